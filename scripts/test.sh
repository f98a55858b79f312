#!/usr/bin/env bash
# The whole test suite: installs what is missing, configures, builds, runs
# the lit suite (lit + FileCheck tests and the gtest unit tests), the
# pytest suite, the install check (scripts/install_check.sh) and a bounded
# libFuzzer run (scripts/fuzz.sh), and ends with
# a line "N passed, N failed". Exits non-zero when anything failed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Seconds per phase, printed before the result line (CI's time budget).
phases=()
phase_start=$SECONDS
phase_done() { phases+=("$1 $(( SECONDS - phase_start )) s"); phase_start=$SECONDS; }

# The venv first: CMake builds the Python binding with its nanobind.
ensure_python_env
phase_done "setup"
build_shardx all mlir-doc
phase_done "build"
LOG="$SHARDX_BUILD/test-results.log"
log "running the lit suite"
set +e
"$LLVM_PREFIX/bin/lit" -v --no-gtest-sharding -j "$JOBS" "$SHARDX_BUILD/test" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e
phase_done "lit"

count() { # sums lit's "<label>: N" summary lines (padded "Passed     : N"
  # when several categories are listed)
  { grep -E "^[[:space:]]*$1[[:space:]]*: [0-9]+" "$LOG" || true; } |
    sed -E 's/.*: ([0-9]+).*/\1/' | awk '{ n += $1 } END { print n + 0 }'
}
passed=$(( $(count Passed) + $(count "Expectedly Failed") ))
failed=$(( $(count Failed) + $(count "Unexpectedly Passed") + $(count Unresolved) + $(count "Timed Out") ))

# The Python frontend's tests (importer, placements, examples) with pytest,
# one file per worker process on $JOBS workers (pytest-xdist): most tests
# keep one core busy, compiling or tracing, so two workers use the second.
PYLOG="$SHARDX_BUILD/pytest-results.log"
log "running the Python tests ($JOBS workers)"
set +e
SHARDX_BUILD="$SHARDX_BUILD" "$SHARDX_PYTHON" -m pytest -q -p no:cacheprovider \
  -n "$JOBS" --dist loadfile "$SHARDX_ROOT/python/tests" 2>&1 | tee "$PYLOG"
pystatus=${PIPESTATUS[0]}
set -e
phase_done "pytest"
pycount() { # the N of "N <label>" in pytest's summary line
  tail -n 1 "$PYLOG" | { grep -oE "[0-9]+ $1" || true; } | awk '{ n += $1 } END { print n + 0 }'
}
passed=$(( passed + $(pycount passed) ))
failed=$(( failed + $(pycount failed) + $(pycount error) ))
if [ "$pystatus" -ne 0 ]; then
  [ "$status" -ne 0 ] || status=$pystatus
  [ "$(pycount failed)$(pycount error)" != "00" ] || failed=$(( failed + 1 ))
fi
# ShardX as a user installs it (scripts/install_check.sh, docs/Install.md):
# the CMake package with an out-of-tree consumer built against it, and
# `pip install .` into a fresh venv running the README's example; one result
# per part. SHARDX_INSTALL_CHECK=0 leaves it out.
# One pass or one failure for a step that is not lit or pytest, from its
# exit status (the first failure's status is the command's).
count_step() {
  if [ "$1" -eq 0 ]; then
    passed=$(( passed + 1 ))
  else
    failed=$(( failed + 1 ))
    [ "$status" -ne 0 ] || status=$1
  fi
}
if [ "${SHARDX_INSTALL_CHECK:-1}" != 0 ]; then
  for part in cmake pip; do
    log "install check: $part"
    set +e
    SHARDX_BUILD="$SHARDX_BUILD" bash "$SHARDX_ROOT/scripts/install_check.sh" "$part"
    count_step $?
    set -e
    phase_done "install check ($part)"
  done
fi
# A bounded coverage-guided fuzzing run (libFuzzer, ASan; docs/Testing.md):
# SHARDX_FUZZ_SECONDS (default 60) per target from seed FUZZ_SEED (default
# 1), no crash, hang or OOM.
# SHARDX_FUZZ_SECONDS=0 leaves it out.
fuzz_seconds="${SHARDX_FUZZ_SECONDS:-60}"
if [ "$fuzz_seconds" -gt 0 ]; then
  log "fuzzing each target for ${fuzz_seconds}s"
  set +e
  FUZZ_SEED="${FUZZ_SEED:-1}" bash "$SHARDX_ROOT/scripts/fuzz.sh" "$fuzz_seconds"
  count_step $?
  set -e
  phase_done "fuzz (build and run)"
fi
if [ "$passed" -eq 0 ] && [ "$status" -eq 0 ]; then
  log "lit ran no test"
  status=1
fi
log "seconds per phase: $(IFS=,; echo "${phases[*]}" | sed 's/,/, /g'), total $SECONDS s"
echo "$passed passed, $failed failed"
exit "$status"
