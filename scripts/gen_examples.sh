#!/usr/bin/env bash
# Regenerates the traced example programs in examples/ and the traced test
# programs in test/Programs/ from PyTorch
# (python/shardx_dev/examples.py), after MLIR removes their dead ops (which needs
# shardx-opt: build first). The test suite fails when they are stale.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_python_env
PYTHONPATH="$SHARDX_ROOT/python" "$SHARDX_PYTHON" -m shardx_dev.examples "$SHARDX_ROOT/examples" "$SHARDX_ROOT/test/Programs"
log "regenerated examples/ and test/Programs/"
