#!/usr/bin/env bash
# The main job on the embedded example: builds ShardX, then runs shardx-opt on
# examples/mlp_dp_tp.mlir and prints the program with its layouts in
# canonical form, every rank's local shard of each annotated tensor, and the
# planned collectives of each reshard. Usage:
#   bash scripts/run_example.sh [example.mlir]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

EXAMPLE="${1:-$SHARDX_ROOT/examples/mlp_dp_tp.mlir}"
build_shardx shardx-opt >&2
OPT="$SHARDX_BUILD/bin/shardx-opt"

log "verifying and printing $EXAMPLE"
"$OPT" "$EXAMPLE"
log "local shards of every layout on the mesh"
"$OPT" "$EXAMPLE" --shardx-test-local-shards -o /dev/null \
  --mlir-print-op-on-diagnostic=false 2>&1 |
  grep -E 'remark: |^  rank ' | sed -e 's/^.*remark: //'
log "reshard plans (shardx-print-plan), then the lowered reshards"
"$OPT" "$EXAMPLE" --shardx-print-plan -o /dev/null \
  --mlir-print-op-on-diagnostic=false 2>&1 |
  grep -E 'remark: |^  [a-z_]+\(' | sed -e 's/^.*remark: //'
"$OPT" "$EXAMPLE" --shardx-lower-reshards
