#!/usr/bin/env bash
# The main job on the embedded example: builds ShardX, then takes the MLP
# train step traced from PyTorch (examples/mlp_dp_tp_train.mlir: forward,
# backward and SGD with momentum on a 2x2 dp x tp mesh, batch split over dp,
# Megatron placements over tp), prints the reshards that propagation chose,
# compiles the program twice (sharded over 4 ranks, and unsharded) and runs
# both on CPU threads with the same inputs, printing the check of every
# output against the unsharded run. Needs no GPU, MPI or PyTorch. Usage:
#   bash scripts/run_example.sh [program.mlir] [shardx-run options...]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

EXAMPLE="${1:-$SHARDX_ROOT/examples/mlp_dp_tp_train.mlir}"
shift || true
build_shardx shardx-opt shardx-run >&2
OPT="$SHARDX_BUILD/bin/shardx-opt"

log "reshards chosen by shardx-propagate for $(basename "$EXAMPLE") (shardx-print-plan)"
"$OPT" "$EXAMPLE" --shardx-propagate --shardx-insert-reshards --shardx-verify-layouts |
  "$OPT" --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 |
  grep -E 'remark: |^  [a-z_]+\(' | sed -e 's/^.*remark: //'
log "compiling (sharded + unsharded) and running on CPU threads"
"$SHARDX_BUILD/bin/shardx-run" "$EXAMPLE" --check "$@"
