# -*- Python -*-
# lit configuration for ShardX: the site config records paths only.

import os
import sys

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "SHARDX"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.shardx_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%shardx_src_root", config.shardx_src_root))
config.substitutions.append(("%shardx_obj_root", config.shardx_obj_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

# Optional parts: tests that need them say `REQUIRES: mpi`.
if config.shardx_enable_mpi:
    config.available_features.add("mpi")
    # Root in containers; more ranks than cores on small machines.
    config.substitutions.append(
        ("%mpirun", config.mpiexec + " --allow-run-as-root --oversubscribe"))

# The fuzz targets link libFuzzer in the SHARDX_ENABLE_FUZZ build (the
# coverage-guided runs say `REQUIRES: fuzz`) and a plain driver otherwise.
if config.shardx_enable_fuzz:
    config.available_features.add("fuzz")
config.substitutions.append(("%python", sys.executable))

# The CUDA toolkit, for the cuda target and the cuda-local kernels (no GPU
# needed): `REQUIRES: cuda-toolkit` = ptxas and libdevice found. A test that
# expects the runtime to find no driver says `UNSUPPORTED: cuda-driver`;
# `cuda-stub` is the toolkit's stub libcuda, which loads and fails cuInit.
import ctypes
import shutil

cuda_roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
cuda_roots += ["/usr/local/cuda", "/usr/lib/cuda"]
for root in filter(None, cuda_roots):
    ptxas = os.path.join(root, "bin", "ptxas")
    libdevice = os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")
    if os.path.exists(ptxas) and os.path.exists(libdevice):
        config.available_features.add("cuda-toolkit")
        config.substitutions.append(("%ptxas", ptxas))
        config.substitutions.append(("%cuda_root", root))
        break
else:
    ptxas = shutil.which("ptxas")
    if ptxas:
        config.substitutions.append(("%ptxas", ptxas))

try:
    ctypes.CDLL("libcuda.so.1")
    config.available_features.add("cuda-driver")
except OSError:
    pass

for root in filter(None, cuda_roots):
    stub = os.path.join(root, "lib64", "stubs", "libcuda.so")
    if os.path.exists(stub):
        config.available_features.add("cuda-stub")
        config.substitutions.append(("%cuda_stub", stub))
        break

# NCCL where the nccl backend looks for it (the loader path, or PyTorch's
# wheel): `nccl`, and `%nccl_lib` a path to it.
import glob

nccl_found = None
try:
    ctypes.CDLL("libnccl.so.2")
    nccl_found = "libnccl.so.2"
except OSError:
    wheels = glob.glob(os.path.expanduser(
        "~/.cache/shardx/venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2"))
    if wheels:
        nccl_found = wheels[0]
if nccl_found:
    config.available_features.add("nccl")
    config.substitutions.append(("%nccl_lib", nccl_found))

# The cuda-local reduction kernels' PTX (built when CMake found nvcc).
if os.path.exists(os.path.join(config.shardx_obj_root, "lib", "Runtime", "cuda",
                               "CollectiveKernels.ptx")):
    config.available_features.add("cuda-local-kernels")
# The fused attention kernels' PTX (likewise).
if os.path.exists(os.path.join(config.shardx_obj_root, "lib", "Runtime", "cuda",
                               "AttentionKernels.ptx")):
    config.available_features.add("cuda-attention-kernels")

# MLIR's runner executes a lowered function on the CPU (mlir-22-tools); its
# support libraries are libmlir-22-dev's.
runner_lib_dir = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
config.substitutions.append(("%mlir_runner_libs", ",".join(
    os.path.join(runner_lib_dir, name)
    for name in ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so"))))

tool_dirs = [config.shardx_tools_dir, config.llvm_tools_dir]
tools = ["shardx-opt", "shardx-compile", "shardx-exec", "shardx-gpu-exec", "shardx-run", "split-file", "not",
         "shardx-mpi-conformance", "shardx-fuzz-layout", "shardx-fuzz-spmd", "mlir-opt", "mlir-runner"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
