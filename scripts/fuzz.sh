#!/usr/bin/env bash
# A coverage-guided fuzzing campaign with libFuzzer (docs/Fuzzing.md):
# builds the fuzz targets in build-fuzz/ (clang-22, ShardX instrumented,
# AddressSanitizer), seeds each target's corpus from the lit tests, fuzzes
# each target for SECONDS (default 600, one after the other) and reports
# executions, crashes, timeouts, out-of-memory inputs and coverage.
#
#   scripts/fuzz.sh [SECONDS] [layout|spmd]...
#
# Environment: FUZZ_SEED (libFuzzer's -seed; default 0: a random one),
# FUZZ_FORKS (parallel fuzzing jobs per target, default 1),
# FUZZ_TIMEOUT (seconds per input, default 10), SHARDX_FUZZ_BUILD,
# SHARDX_FUZZ_SANITIZERS (address; address,undefined adds UBSan).
# The corpus grows in build-fuzz/corpus/<target>; crash-, timeout- and oom-
# inputs land in build-fuzz/artifacts/<target>/. Exits non-zero when any
# target found one.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

seconds="${1:-600}"
shift || true
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(layout spmd)
forks="${FUZZ_FORKS:-1}"
timeout="${FUZZ_TIMEOUT:-10}"
seed="${FUZZ_SEED:-0}"

build_shardx_fuzz
export ASAN_SYMBOLIZER_PATH="$LLVM_PREFIX/bin/llvm-symbolizer"
export ASAN_OPTIONS="${ASAN_OPTIONS:-allow_user_poisoning=0:detect_leaks=0}"

# The value of the last "field: N" of a libFuzzer fork-mode status line.
field() { grep -oE "$1:? [0-9/]+" <<<"$2" | tail -n 1 | awk '{ print $2 }'; }

status=0
summary=()
for target in "${targets[@]}"; do
  corpus="$SHARDX_FUZZ_BUILD/corpus/$target"
  artifacts="$SHARDX_FUZZ_BUILD/artifacts/$target"
  logfile="$SHARDX_FUZZ_BUILD/fuzz-$target.log"
  mkdir -p "$corpus" "$artifacts"
  python3 "$SHARDX_ROOT/fuzz/make_corpus.py" --target "$target" \
    --out "$corpus" "$SHARDX_ROOT/test"
  before=$(find "$artifacts" -type f | wc -l)
  log "fuzzing shardx-fuzz-$target for ${seconds}s ($forks job(s), log: $logfile)"
  set +e
  "$SHARDX_FUZZ_BUILD/bin/shardx-fuzz-$target" "$corpus" \
    -fork="$forks" -seed="$seed" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=4096 \
    -dict="$SHARDX_ROOT/fuzz/shardx.dict" \
    -artifact_prefix="$artifacts/" >"$logfile" 2>&1
  set -e
  # Fork mode prints "#EXECS: cov: C ft: F corp: N exec/s: E
  # oom/timeout/crash: O/T/C time: Ts ..." lines.
  first=$(grep -E "^#[0-9]+: cov:" "$logfile" | head -n 1 || true)
  last=$(grep -E "^#[0-9]+: cov:" "$logfile" | tail -n 1 || true)
  execs=$(grep -oE "^#[0-9]+" <<<"$last" | tr -d '#')
  cov0=$(field cov "$first")
  cov=$(field cov "$last")
  read -r ooms timeouts crashes < <(field "oom/timeout/crash" "$last" | tr / ' ')
  found=$(( $(find "$artifacts" -type f | wc -l) - before ))
  line="$target: ${execs:-0} execs in ${seconds}s, coverage ${cov0:-?} -> ${cov:-?} edges, corpus $(ls "$corpus" | wc -l), crashes ${crashes:-?}, timeouts ${timeouts:-?}, ooms ${ooms:-?}, new artifacts $found"
  summary+=("$line")
  [ "$found" -eq 0 ] || status=1
done
for line in "${summary[@]}"; do
  echo "$line"
done
[ "$status" -eq 0 ] || log "inputs that failed are in $SHARDX_FUZZ_BUILD/artifacts/"
exit "$status"
