#!/usr/bin/env bash
# The main job: builds ShardX and its Python binding, prints the reshards
# propagation chose for the embedded example (examples/mlp_dp_tp_train.mlir,
# an MLP train step on a 2x2 dp x tp mesh), then trains a small MLP for a
# few hundred steps with shardx.compile on a 2x2 dp x tp mesh of CPU threads
# (batch over dp, Megatron over tp; parameters and momentum stay on the
# ranks), with a progress bar, checks every step's loss against eager
# PyTorch (rtol 1e-5, f32) and saves both loss curves as a PNG. Needs no GPU
# or MPI; installs PyTorch into the venv on first use (docs/Importer.md).
# Usage:
#   bash scripts/run_example.sh [--steps N] [--plot train_loss.png]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The venv first: CMake builds the Python binding with its nanobind.
ensure_python_env
build_shardx shardx-opt shardx-compile _shardx_rt >&2
OPT="$SHARDX_BUILD/bin/shardx-opt"
EXAMPLE="$SHARDX_ROOT/examples/mlp_dp_tp_train.mlir"

log "reshards chosen by shardx-propagate for $(basename "$EXAMPLE") (shardx-print-plan)"
"$OPT" "$EXAMPLE" --shardx-propagate --shardx-insert-reshards --shardx-verify-layouts |
  "$OPT" --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 |
  grep -E 'remark: |^  [a-z_]+\(' | sed -e 's/^.*remark: //'
log "training with shardx.compile on CPU threads, against eager PyTorch"
PLOT=(--plot "$SHARDX_BUILD/train_loss.png")
case " $* " in *" --plot "*) PLOT=() ;; esac
PYTHONPATH="$SHARDX_ROOT/python${PYTHONPATH:+:$PYTHONPATH}" SHARDX_BUILD="$SHARDX_BUILD" \
  PYTHONWARNINGS=ignore "$SHARDX_PYTHON" -m shardx.demo "${PLOT[@]}" "$@"
