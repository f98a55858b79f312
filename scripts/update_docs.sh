#!/usr/bin/env bash
# Regenerates the dialect and pass reference in docs/generated/ from the
# TableGen sources (the test suite checks that it is up to date).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_shardx mlir-doc >&2
mkdir -p "$SHARDX_ROOT/docs/generated"
cp "$SHARDX_BUILD"/docs/ShardX/*.md "$SHARDX_ROOT/docs/generated/"
log "updated docs/generated/"
