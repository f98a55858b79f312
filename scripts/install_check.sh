#!/usr/bin/env bash
# ShardX as a user installs it (docs/Install.md), checked from outside the
# checkout:
#   cmake  `cmake --install` of the build ($SHARDX_BUILD) into a temporary
#          prefix; examples/out-of-tree configured against it alone
#          (find_package(ShardX)), built and run: my-opt runs the SPMD
#          pipeline (FileCheck), my-plan plans a reshard, the installed
#          shardx-compile compiles mlp.mlir with the prefix's runtime
#          archives, my-run runs the artifact on 2 threads and compares it
#          with the unsharded product.
#   pip    `pip install .[demo]` into a fresh venv that has PyTorch (the
#          test venv's packages through a .pth file, as a user has torch
#          installed already; the C++ build in build-pip/, which ccache
#          fills from the main build's objects), then the README's example
#          (python -m shardx.demo, a few steps) with that venv's python, in
#          a temporary folder, with no PYTHONPATH or SHARDX_BUILD and a fresh
#          compile cache: the sharded loss must match eager's.
# Usage: bash scripts/install_check.sh [cmake|pip]...   (default: both)
# Needs the build (scripts/test.sh builds it first). Exits non-zero when a
# part fails; prints "install check <part>: passed|FAILED" for each.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PARTS=("$@")
[ "${#PARTS[@]}" -gt 0 ] || PARTS=(cmake pip)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardx-install-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# Nothing of the checkout may leak into the installed forms.
unset PYTHONPATH SHARDX_RUNTIME_ARCHIVE SHARDX_CUDA_RUNTIME_ARCHIVE

fail() { log "install check: $*"; return 1; }

check_cmake() {
  local prefix="$WORK/prefix" consumer="$WORK/consumer" out="$WORK/cmake.out"
  log "cmake --install $SHARDX_BUILD --prefix $prefix"
  cmake --install "$SHARDX_BUILD" --prefix "$prefix" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "cmake --install failed"; return 1; }
  [ -f "$prefix/lib/cmake/ShardX/ShardXConfig.cmake" ] ||
    { fail "no ShardXConfig.cmake in $prefix/lib/cmake/ShardX"; return 1; }

  log "configuring and building examples/out-of-tree against $prefix"
  # CMAKE_PREFIX_PATH names the prefix alone: MLIR is found through
  # ShardXConfig.cmake's find_dependency.
  cmake -G Ninja -S "$SHARDX_ROOT/examples/out-of-tree" -B "$consumer" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    >"$WORK/consumer.configure.log" 2>&1 ||
    { cat "$WORK/consumer.configure.log" >&2; fail "configuring the consumer failed"; return 1; }
  grep -q "Using ShardXConfig.cmake in: $prefix/lib/cmake/ShardX" \
    "$WORK/consumer.configure.log" ||
    { cat "$WORK/consumer.configure.log" >&2; fail "the consumer did not use $prefix"; return 1; }
  ninja -C "$consumer" -j "$JOBS" >"$WORK/consumer.build.log" 2>&1 ||
    { cat "$WORK/consumer.build.log" >&2; fail "building the consumer failed"; return 1; }

  local example="$SHARDX_ROOT/examples/out-of-tree/mlp.mlir"
  log "my-opt --my-spmd (ShardX's SPMD pipeline in the consumer's tool)"
  ( cd "$WORK" && "$consumer/bin/my-opt" "$example" --my-spmd ) >"$out" 2>&1 &&
    "$LLVM_PREFIX/bin/FileCheck" --input-file="$out" "$example" ||
    { cat "$out" >&2; fail "my-opt's SPMD program is wrong"; return 1; }
  "$consumer/bin/my-opt" --help >"$out" 2>&1 && grep -q -- "--shardx-propagate" "$out" ||
    { fail "my-opt lacks the ShardX passes"; return 1; }

  log "my-plan (the planner API)"
  "$consumer/bin/my-plan" >"$out" 2>&1 && cat "$out" >&2 &&
    grep -q "^\[S(0), S(1)\] -> \[S(0), S(0)\]: .*1 collective" "$out" &&
    grep -q "all_to_all" "$out" ||
    { cat "$out" >&2; fail "my-plan's plan is wrong"; return 1; }

  log "the installed shardx-compile links the prefix's runtime archives"
  "$prefix/bin/shardx-compile" --print-build-id >"$out" 2>&1 &&
    grep -q "|$prefix/lib/libShardXRuntime.a:[0-9]" "$out" &&
    ! grep -q "$SHARDX_BUILD" "$out" ||
    { cat "$out" >&2; fail "the installed shardx-compile does not use $prefix/lib"; return 1; }
  "$prefix/bin/shardx-compile" "$example" -o "$WORK/mlp.so" >"$out" 2>&1 ||
    { cat "$out" >&2; fail "the installed shardx-compile failed"; return 1; }

  log "my-run (runs the artifact on 2 threads, against the unsharded product)"
  "$consumer/bin/my-run" "$WORK/mlp.so" >"$out" 2>&1 && cat "$out" >&2 &&
    grep -q "^MATCH$" "$out" ||
    { cat "$out" >&2; fail "my-run's result is wrong"; return 1; }
}

check_pip() {
  local venv="$WORK/venv" run="$WORK/run" out="$WORK/pip.out"
  local start=$SECONDS
  log "pip install $SHARDX_ROOT[demo] into a fresh venv that has PyTorch"
  /usr/bin/python3 -m venv "$venv"
  # PyTorch is there already, as on a user's machine: the fresh venv sees the
  # test venv's packages through a .pth file (after its own site-packages,
  # so what pip installs into it comes first), and pip finds torch
  # installed instead of downloading its 4 GB on every run.
  local own theirs
  own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  theirs="$("$SHARDX_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$theirs" >"$own/zz-shardx-test-torch.pth"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "torch==$SHARDX_TORCH_VERSION" "$SHARDX_ROOT[demo]" >"$WORK/pip.log" 2>&1 ||
    { tail -n 60 "$WORK/pip.log" >&2; fail "pip install failed"; return 1; }
  log "pip install took $(( SECONDS - start )) s"

  mkdir -p "$run"
  local version
  version="$(sed -nE 's/^__version__ = "(.*)"/\1/p' "$SHARDX_ROOT/python/shardx/_version.py")"
  ( cd "$run" && env -u PYTHONPATH -u SHARDX_BUILD "$venv/bin/python" - "$venv" "$version" ) \
    >"$out" 2>&1 <<'PY' || { cat "$out" >&2; fail "the installed package is wrong"; return 1; }
import os, subprocess, sys
import shardx
from shardx.artifact import find_tool
from shardx.sharded_tensor import runtime
venv, version = sys.argv[1], sys.argv[2]
package = os.path.dirname(shardx.__file__)
assert package.startswith(venv), f"shardx imported from {package}, not from {venv}"
assert shardx.__version__ == version, (shardx.__version__, version)
rt = runtime()
assert rt.__file__.startswith(package), f"_shardx_rt from {rt.__file__}"
tool = find_tool("shardx-compile")
assert tool == os.path.join(package, "_bin", "shardx-compile"), tool
build_id = subprocess.run([tool, "--print-build-id"], capture_output=True, text=True,
                          check=True).stdout
assert f"|{package}/_lib/libShardXRuntime.a:" in build_id, build_id
print(f"shardx {shardx.__version__} from {package}")
PY
  cat "$out" >&2

  log "the README's example (python -m shardx.demo) from $run"
  ( cd "$run" && env -u PYTHONPATH -u SHARDX_BUILD SHARDX_CACHE_DIR="$WORK/jit-cache" \
      PYTHONWARNINGS=ignore "$venv/bin/python" -m shardx.demo --steps 20 \
      --plot "$run/train_loss.png" ) >"$out" 2>&1 ||
    { cat "$out" >&2; fail "the README's example failed in the fresh venv"; return 1; }
  grep -v "shardx (2x2\|eager PyTorch" "$out" >&2
  grep -q "sharded loss matches eager at every step" "$out" ||
    { fail "the README's example does not match eager"; return 1; }
  log "pip part took $(( SECONDS - start )) s"
}

status=0
for part in "${PARTS[@]}"; do
  case "$part" in
    cmake) check_cmake && r=0 || r=1 ;;
    pip) check_pip && r=0 || r=1 ;;
    *) log "unknown part '$part' (cmake or pip)"; exit 2 ;;
  esac
  if [ "$r" -eq 0 ]; then
    echo "install check $part: passed"
  else
    echo "install check $part: FAILED"
    status=1
  fi
done
exit "$status"
