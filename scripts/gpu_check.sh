#!/usr/bin/env bash
# The GPU check of the traced test programs, in two halves.
#
#   scripts/gpu_check.sh [DIR]        build half: any machine, no GPU needed
#   scripts/gpu_check.sh --run [DIR]  run half: a machine with a GPU
#
# The build half builds ShardX, then fills DIR (default build-gpu-check/, an
# ignored folder kept under 50 MiB) with everything the run half needs and
# nothing else: bin/shardx-gpu-exec (links no LLVM, MLIR, OpenBLAS, MPI or
# CUDA library) and, per program P of test/Programs, P/in<i>.npy (its
# global inputs, random from seed 0 by the program's input domains),
# P/ref<i>.npy (its unsharded outputs on the CPU backend; shardx-run --check
# also checks the CPU sharded run against them) and its CUDA artifacts
# P/unsharded.so (1 rank), P/sharded.so (the program's mesh: 2 or 4
# ranks) and P/scheduled.so (the same with --schedule-collectives: started
# collectives and waits). Also shardx.ragged_all_to_all, as local programs
# (test/Compiler/Gpu/Inputs/ragged-{counted,known}.mlir, made by
# ragged_gpu_check.py there): R = ragged_{counted,known}_{2,4,2x2}, the
# counts exchanged or given (recv_counts), on 2 and 4 ranks and over ep of
# a (dp, ep) 2x2 mesh, uneven counts with zeros, there and back; R/in<i>.npy (rows and counts), R/ref<i>.npy (the
# outputs on the CPU's threads backend, checked there against the answer
# computed from the inputs) and R/local.so (its CUDA artifact).
#
# The run half needs only DIR and a CUDA driver (cuBLAS is found in
# PyTorch's wheels, docs/Runtime.md): it runs every artifact with
# `shardx-gpu-exec --backend cuda-local` on the inputs (the ragged ones'
# local.so too: the runtime's ragged entry points staging device buffers
# through host memory, never run elsewhere), compares each output
# with the reference (f32: rtol 1e-4, atol 1e-5 unless SHARDX_GPU_RTOL /
# SHARDX_GPU_ATOL say otherwise; f64 1e-10 and 1e-12; integers exact),
# prints one line per run and `N passed, N failed`, and exits 1 when any
# run failed. It then runs each unsharded artifact again on the nccl
# backend (one process, a world of one: the communicator's creation and
# NCCL's loading on a GPU), the nccl conformance suite in one process
# (bin/ShardXRuntimeNcclTests: mesh 1; its AsyncAllReduce runs the
# stream-ordered start and wait, SynchronousCollectives the host-waiting
# mode), the cuda-local one (bin/ShardXRuntimeCudaLocalTests: meshes 1, 4,
# 2x3, 2x2x2 on the one GPU), the fused attention kernels against their CPU
# reference (bin/ShardXAttentionKernelTests: bf16 and f16, widths 32, 64,
# 128, causal, grouped-query and off-tile cases, each tensor's error
# printed; its timing of a causal bf16 attention, B 8 H 12 S 1024 D 64, is
# printed, not counted), and prints the figures of
# bin/shardx-gpu-bench (GEMM vs cuBLAS in f32, bf16 and f16, collectives vs
# NCCL; not counted). Before those figures, with PyTorch, the train step
# benchmark (bench/gpu_step_bench.py: compiled MLP and transformer-block
# steps vs PyTorch eager on the GPU, f32 and bf16), whose artifacts the
# build half makes in DIR/step-bench (counted: a failed run or a compiled
# step whose outputs differ from eager's fails the check).
# Then the JIT on the GPU (scripts/gpu_jit_check.py, counted): the build
# half precompiles the README's MLP and the zoo's GPT-2 and Llama train
# steps for `shardx.compile(..., backend="cuda")` on 1 and on 2 or 4
# cuda-local ranks, exports each as an AOT package with its eager
# reference (DIR/jit), and builds the Python binding into DIR/python for
# this machine's Python and for the GPU host's ($SHARDX_GPU_PYTHON: a
# Python of the GPU host's version, default python3.12 on PATH or under
# pyenv; its binding is built in build-gpu-python/ without MPI). The run
# half loads the packages with `shardx.load` (no compiler there) and
# checks every step against eager; it needs PyTorch and the binding for
# the Python it runs ($SHARDX_GPU_RUN_PYTHON, default python3).
# On a machine without a usable GPU the first run prints the driver's
# reason ("no CUDA driver: ...") and every run counts as failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run=0
if [ "${1:-}" = "--run" ]; then
  run=1
  shift
fi
DIR="$(realpath -m "${1:-$ROOT/build-gpu-check}")"

# Megatron MLP and attention train steps, DP, FSDP x TP with StridedShard,
# uneven shards (the programs of test/Compiler/Gpu/programs.test).
PROGRAMS=(megatron_mlp_train megatron_attention_train dp_train
  fsdp_tp_large_batch fsdp_uneven megatron_uneven dp_uneven_4
  vocab_parallel_ce cp_zigzag)
MAX_BYTES=$((50 * 1024 * 1024))

log() { printf '[gpu_check] %s\n' "$*" >&2; }

if [ "$run" = 0 ]; then
  # shellcheck source=scripts/lib.sh
  source "$ROOT/scripts/lib.sh"
  ensure_python_env
  build_shardx shardx-compile shardx-run shardx-exec shardx-gpu-exec shardx-gpu-bench \
    ShardXRuntimeNcclTests ShardXRuntimeCudaLocalTests ShardXAttentionKernelTests
  bin="$SHARDX_BUILD/bin"
  rm -rf "$DIR"
  mkdir -p "$DIR/bin"
  cp "$bin/shardx-gpu-exec" "$bin/shardx-gpu-bench" \
    "$bin/ShardXAttentionKernelTests" \
    "$SHARDX_BUILD/unittests/ShardXRuntimeNcclTests" \
    "$SHARDX_BUILD/unittests/ShardXRuntimeCudaLocalTests" "$DIR/bin/"
  for p in "${PROGRAMS[@]}"; do
    src="$ROOT/test/Programs/$p.mlir"
    log "$p: CPU reference (shardx-run --check --seed 0)"
    if ! "$bin/shardx-run" "$src" --check --seed 0 --save-io "$DIR/$p" \
      >"$DIR/$p.cpu.log" 2>&1; then
      cat "$DIR/$p.cpu.log" >&2
      log "error: the CPU run of $p failed"
      exit 1
    fi
    rm "$DIR/$p.cpu.log"
    log "$p: CUDA artifacts"
    "$bin/shardx-compile" --target=cuda --unsharded "$src" -o "$DIR/$p/unsharded.so"
    "$bin/shardx-compile" --target=cuda "$src" -o "$DIR/$p/sharded.so"
    "$bin/shardx-compile" --target=cuda --schedule-collectives "$src" \
      -o "$DIR/$p/scheduled.so"
  done
  log "ragged all-to-all (counted, known recv_counts; 2, 4, 2x2 ranks): CPU references and CUDA artifacts"
  "$SHARDX_PYTHON" "$ROOT/test/Compiler/Gpu/Inputs/ragged_gpu_check.py" "$bin" "$DIR" >&2
  log "the JIT's train steps for backend=cuda (scripts/gpu_jit_check.py --build)"
  "$SHARDX_PYTHON" "$ROOT/scripts/gpu_jit_check.py" --build "$DIR/jit" >&2
  mkdir -p "$DIR/python"
  cp "$SHARDX_BUILD"/python/_shardx_rt.*.so "$DIR/python/"
  gpu_py="${SHARDX_GPU_PYTHON:-}"
  if [ -z "$gpu_py" ]; then
    for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
      # (a pyenv shim exists even where it cannot run its Python)
      if "$c" -c "" >/dev/null 2>&1; then
        gpu_py="$(command -v "$c")"
        break
      fi
    done
  fi
  if [ -n "$gpu_py" ]; then
    tag=$("$gpu_py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
    venv="$HOME/.cache/shardx/venv-gpu-py$tag"
    [ -x "$venv/bin/python" ] || "$gpu_py" -m venv "$venv"
    nb=$("$SHARDX_PYTHON" -c 'import nanobind; print(nanobind.__version__)')
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "nanobind==$nb"
    gbuild="$ROOT/build-gpu-python"
    if [ ! -f "$gbuild/build.ninja" ]; then
      cmake -G Ninja -S "$ROOT" -B "$gbuild" -DCMAKE_BUILD_TYPE=Release \
        -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" -DSHARDX_ENABLE_MPI=OFF \
        -DSHARDX_PYTHON="$venv/bin/python" >"$gbuild.configure.log" 2>&1 || {
        cat "$gbuild.configure.log" >&2
        exit 1
      }
    fi
    log "the Python binding for the GPU host's Python ($gpu_py)"
    ninja -C "$gbuild" -j "$JOBS" _shardx_rt >&2
    cp "$gbuild"/python/_shardx_rt.*.so "$DIR/python/"
  else
    log "no python3.12 here (SHARDX_GPU_PYTHON): DIR/python has this machine's binding only"
  fi
  log "train step benchmark artifacts (bench/gpu_step_bench.py --build-only)"
  "$SHARDX_PYTHON" "$ROOT/bench/gpu_step_bench.py" --build-only \
    --dir "$DIR/step-bench" >&2
  bytes=$(du -sb "$DIR" | cut -f1)
  log "$DIR: $(du -sh "$DIR" | cut -f1) (${#PROGRAMS[@]} programs, 6 ragged)"
  if [ "$bytes" -gt "$MAX_BYTES" ]; then
    log "error: $DIR is $bytes bytes, over the $MAX_BYTES a GPU machine is carried"
    exit 1
  fi
  log "done; on a GPU machine: scripts/gpu_check.sh --run $DIR"
  exit 0
fi

exe="$DIR/bin/shardx-gpu-exec"
if [ ! -x "$exe" ]; then
  log "error: no $exe: run scripts/gpu_check.sh (the build half) first"
  exit 1
fi
tolerance=()
[ -n "${SHARDX_GPU_RTOL:-}" ] && tolerance+=(--rtol "$SHARDX_GPU_RTOL")
[ -n "${SHARDX_GPU_ATOL:-}" ] && tolerance+=(--atol "$SHARDX_GPU_ATOL")
passed=0
failed=0
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
nodriver=""
# Every program folder the build half made (one with references).
for dir in "$DIR"/*/; do
  p=$(basename "$dir")
  ls "$dir"/ref*.npy >/dev/null 2>&1 || continue
  inputs=$(ls "$dir"/in*.npy 2>/dev/null | sort -V | paste -sd, -)
  refs=$(ls "$dir"/ref*.npy | sort -V | paste -sd, -)
  for kind in unsharded sharded scheduled local; do
    [ -f "$dir/$kind.so" ] || continue
    if [ -n "$nodriver" ]; then
      failed=$((failed + 1))
      continue
    fi
    log="$out/$p.$kind.log"
    if "$exe" "$dir/$kind.so" --backend cuda-local \
      ${inputs:+--inputs "$inputs"} --expect "$refs" "${tolerance[@]}" \
      >"$log" 2>&1; then
      passed=$((passed + 1))
      printf 'PASS %s %s: %s\n' "$p" "$kind" "$(head -1 "$log")"
    else
      failed=$((failed + 1))
      printf 'FAIL %s %s\n' "$p" "$kind"
      sed 's/^/  /' "$log"
      # No usable GPU: every other run would fail alike.
      if grep -q "no CUDA driver" "$log"; then
        nodriver=1
        echo "no usable GPU: the remaining runs are counted as failed"
      fi
    fi
  done
done
# The nccl backend on this GPU: a world of one process.
if [ -z "$nodriver" ]; then
  for dir in "$DIR"/*/; do
    p=$(basename "$dir")
    [ -f "$dir/unsharded.so" ] && ls "$dir"/ref*.npy >/dev/null 2>&1 || continue
    inputs=$(ls "$dir"/in*.npy 2>/dev/null | sort -V | paste -sd, -)
    refs=$(ls "$dir"/ref*.npy | sort -V | paste -sd, -)
    log="$out/$p.nccl.log"
    store="$(mktemp -d -p "$out")"
    if SHARDX_RANK=0 SHARDX_WORLD_SIZE=1 SHARDX_STORE_DIR="$store" \
      "$exe" "$dir/unsharded.so" --backend nccl \
      ${inputs:+--inputs "$inputs"} --expect "$refs" "${tolerance[@]}" \
      >"$log" 2>&1; then
      passed=$((passed + 1))
      printf 'PASS %s unsharded nccl: %s\n' "$p" "$(head -1 "$log")"
    else
      failed=$((failed + 1))
      printf 'FAIL %s unsharded nccl\n' "$p"
      sed 's/^/  /' "$log"
    fi
  done
  if [ -x "$DIR/bin/ShardXRuntimeNcclTests" ]; then
    if "$DIR/bin/ShardXRuntimeNcclTests" >"$out/nccl-tests.log" 2>&1; then
      passed=$((passed + 1))
      printf 'PASS nccl conformance (1 process): %s\n' \
        "$(grep -E '^\[  PASSED  \]' "$out/nccl-tests.log")"
    else
      failed=$((failed + 1))
      echo "FAIL nccl conformance (1 process)"
      grep -E 'FAILED|Failure|error' "$out/nccl-tests.log" | sed 's/^/  /'
    fi
  fi
  if [ -x "$DIR/bin/ShardXRuntimeCudaLocalTests" ]; then
    if "$DIR/bin/ShardXRuntimeCudaLocalTests" >"$out/cuda-local-tests.log" 2>&1; then
      passed=$((passed + 1))
      printf 'PASS cuda-local conformance: %s\n' \
        "$(grep -E '^\[  PASSED  \]' "$out/cuda-local-tests.log")"
    else
      failed=$((failed + 1))
      echo "FAIL cuda-local conformance"
      grep -E 'FAILED|Failure|error' "$out/cuda-local-tests.log" | sed 's/^/  /'
    fi
  fi
  if [ -x "$DIR/bin/ShardXAttentionKernelTests" ]; then
    log="$out/attention-tests.log"
    if "$DIR/bin/ShardXAttentionKernelTests" >"$log" 2>&1; then
      passed=$((passed + 1))
      printf 'PASS fused attention kernels: %s\n' \
        "$(grep -E '^\[  PASSED  \]' "$log")"
    else
      failed=$((failed + 1))
      echo "FAIL fused attention kernels"
      grep -E 'FAILED|Failure|error|no usable GPU|shardx:' "$log" | sed 's/^/  /'
    fi
    # Each case's errors and the timing case's figures (not counted).
    grep -E '^[a-z_0-9]+ \(|max abs error| ms ' "$log" | sed 's/^/  /' || true
  fi
  if [ -f "$DIR/step-bench/steps.json" ]; then
    python="${SHARDX_PYTHON:-python3}"
    [ -x "$python" ] || python=python3
    if "$python" "$ROOT/bench/gpu_step_bench.py" --dir "$DIR/step-bench"; then
      passed=$((passed + 1))
      echo "PASS train step benchmark"
    else
      failed=$((failed + 1))
      echo "FAIL train step benchmark"
    fi
  fi
  if [ -d "$DIR/jit" ]; then
    python="${SHARDX_GPU_RUN_PYTHON:-python3}"
    if SHARDX_BUILD="$DIR" SHARDX_CACHE_DIR="$out/jit-cache" \
      "$python" "$ROOT/scripts/gpu_jit_check.py" --run "$DIR/jit"; then
      passed=$((passed + 1))
      echo "PASS the JIT's train steps on backend=cuda"
    else
      failed=$((failed + 1))
      echo "FAIL the JIT's train steps on backend=cuda"
    fi
  fi
  if [ -x "$DIR/bin/shardx-gpu-bench" ]; then
    for t in f32 bf16 f16; do
      "$DIR/bin/shardx-gpu-bench" gemm 8192 8192 8192 "$t" || true
    done
    "$DIR/bin/shardx-gpu-bench" nccl || true
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
