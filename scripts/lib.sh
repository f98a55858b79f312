#!/usr/bin/env bash
# Shared helpers for the ShardX scripts: install what is missing, configure,
# build. Sourced, not run.
set -euo pipefail

SHARDX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARDX_BUILD="${SHARDX_BUILD:-$SHARDX_ROOT/build}"
LLVM_PREFIX=/usr/lib/llvm-22
JOBS="${JOBS:-2}"
# ccache (when installed) hashes paths inside the checkout relative to the
# build directory, so every clone of the project shares its cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$SHARDX_ROOT}"

# Debian packages the build and the CPU test suite need.
SHARDX_PACKAGES=(
  cmake ninja-build ccache g++ git
  libgtest-dev nlohmann-json3-dev zlib1g-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  python3 python3-venv python3-dev
  chromium  # headless, for the HTML report's test (python/tests/test_report.py)
)

# The libFuzzer build (scripts/fuzz.sh): clang and its runtimes (libFuzzer,
# the sanitizers). The regular build and the test suite do not need them.
SHARDX_FUZZ_PACKAGES=(clang-22 libclang-rt-22-dev)
SHARDX_FUZZ_BUILD="${SHARDX_FUZZ_BUILD:-$SHARDX_ROOT/build-fuzz}"

# The Python environment of the frontend and its tests: PyTorch (the source
# of traced programs and the numerical oracle), numpy and pytest from PyPI in
# a virtual environment of Debian's python3, kept outside the checkout so
# clones share it.
SHARDX_VENV="${SHARDX_VENV:-$HOME/.cache/shardx/venv}"
SHARDX_TORCH_VERSION=2.15.0
SHARDX_PYTHON="$SHARDX_VENV/bin/python"

log() { printf '[shardx] %s\n' "$*" >&2; }

# Installs the Debian packages in "$@" that are not installed yet.
install_packages() {
  local missing=()
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null |
        grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
      log "need root (or sudo) to install: ${missing[*]}"
      exit 1
    }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Creates the virtual environment and installs what it lacks.
ensure_python_env() {
  install_packages python3 python3-venv
  if [ -x "$SHARDX_PYTHON" ] && "$SHARDX_PYTHON" - "$SHARDX_TORCH_VERSION" <<'PY' 2>/dev/null
import sys, torch, numpy, pytest, xdist, hypothesis, transformers, torchvision, nanobind, tqdm, matplotlib, pulp
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
  then
    return 0
  fi
  log "installing torch==$SHARDX_TORCH_VERSION, numpy and pytest into $SHARDX_VENV (PyPI)"
  mkdir -p "$(dirname "$SHARDX_VENV")"
  [ -x "$SHARDX_PYTHON" ] || /usr/bin/python3 -m venv "$SHARDX_VENV"
  "$SHARDX_PYTHON" -m pip install -q --disable-pip-version-check \
    "torch==$SHARDX_TORCH_VERSION" numpy pytest pytest-xdist hypothesis transformers==5.23.0 pillow \
    nanobind tqdm matplotlib pulp
  # The model zoo's torchvision models (pure Python; no wheel is built for this torch yet).
  "$SHARDX_PYTHON" -m pip install -q --disable-pip-version-check --no-deps torchvision==0.29.2
}

# Configures (once) and builds the given targets (default: all).
build_shardx() {
  install_packages "${SHARDX_PACKAGES[@]}"
  if [ ! -f "$SHARDX_BUILD/build.ninja" ]; then
    log "configuring in $SHARDX_BUILD"
    cmake -G Ninja -S "$SHARDX_ROOT" -B "$SHARDX_BUILD" \
      -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
      -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" >"$SHARDX_BUILD.configure.log" 2>&1 || {
      cat "$SHARDX_BUILD.configure.log" >&2
      exit 1
    }
  fi
  # The Python binding is configured only when the venv has nanobind
  # (ensure_python_env): reconfigure a build made before it had.
  if ! grep -q _shardx_rt "$SHARDX_BUILD/build.ninja" &&
      "$SHARDX_PYTHON" -m nanobind --cmake_dir >/dev/null 2>&1; then
    cmake "$SHARDX_BUILD" >>"$SHARDX_BUILD.configure.log" 2>&1
  fi
  log "building ${*:-all} (-j$JOBS)"
  ninja -C "$SHARDX_BUILD" -j "$JOBS" "$@"
}

# Configures (once) and builds the fuzz targets with libFuzzer in
# $SHARDX_FUZZ_BUILD: clang-22, ShardX instrumented for coverage and
# AddressSanitizer (SHARDX_FUZZ_SANITIZERS), assertions on (-O1 without
# NDEBUG), MLIR and LLVM from the system, uninstrumented.
build_shardx_fuzz() {
  install_packages "${SHARDX_PACKAGES[@]}" "${SHARDX_FUZZ_PACKAGES[@]}"
  if [ ! -f "$SHARDX_FUZZ_BUILD/build.ninja" ]; then
    log "configuring the libFuzzer build in $SHARDX_FUZZ_BUILD"
    cmake -G Ninja -S "$SHARDX_ROOT" -B "$SHARDX_FUZZ_BUILD" \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
      -DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
      -DSHARDX_ENABLE_FUZZ=ON \
      -DSHARDX_FUZZ_SANITIZERS="${SHARDX_FUZZ_SANITIZERS:-address}" \
      -DSHARDX_ENABLE_MPI=OFF \
      -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
      -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" \
      >"$SHARDX_FUZZ_BUILD.configure.log" 2>&1 || {
      cat "$SHARDX_FUZZ_BUILD.configure.log" >&2
      exit 1
    }
  fi
  log "building the fuzz targets in $SHARDX_FUZZ_BUILD (-j$JOBS)"
  ninja -C "$SHARDX_FUZZ_BUILD" -j "$JOBS" shardx-fuzz-layout shardx-fuzz-spmd
}
