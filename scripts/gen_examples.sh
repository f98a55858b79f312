#!/usr/bin/env bash
# Regenerates the traced example programs in examples/ from PyTorch
# (python/shardx/examples.py). The test suite fails when they are stale.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_python_env
PYTHONPATH="$SHARDX_ROOT/python" "$SHARDX_PYTHON" -m shardx.examples "$SHARDX_ROOT/examples"
log "regenerated: $(cd "$SHARDX_ROOT/python" && "$SHARDX_PYTHON" -c 'from shardx.examples import EXAMPLES; print(" ".join(EXAMPLES))')"
