#!/usr/bin/env bash
# The whole test suite: installs what is missing, configures, builds, runs
# the lit suite (lit + FileCheck tests and the gtest unit tests) and ends
# with a line "N passed, N failed". Exits non-zero when anything failed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build_shardx all mlir-doc
LOG="$SHARDX_BUILD/test-results.log"
log "running the lit suite"
set +e
"$LLVM_PREFIX/bin/lit" -v --no-gtest-sharding -j "$JOBS" "$SHARDX_BUILD/test" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e

count() { # sums the "<label>: N" summary lines of lit
  awk -v label="$1" '$1 == label":" { n += $2 } END { print n + 0 }' "$LOG"
}
passed=$(( $(count Passed) + $(count "Expectedly Failed") ))
failed=$(( $(count Failed) + $(count "Unexpectedly Passed") + $(count Unresolved) + $(count "Timed Out") ))
if [ "$passed" -eq 0 ] && [ "$status" -eq 0 ]; then
  log "lit ran no test"
  status=1
fi
echo "$passed passed, $failed failed"
exit "$status"
