//===- RuntimeArchives.cpp - What an artifact links ----------------------===//
//
// Part of ShardX.
//
// runtimeLibraries(): the runtime archives an artifact of each target links,
// from the build tree or from where ShardX is installed. Alone in its file
// because it is compiled with the build folder's paths: the rest of the
// library then compiles alike in every build folder (the main build, the
// pip build, a clone's) and ccache serves it.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

using namespace mlir;

// The runtime archives of the build tree (lib/Compiler/CMakeLists.txt).
#ifndef SHARDX_RUNTIME_ARCHIVE
#define SHARDX_RUNTIME_ARCHIVE ""
#endif
#ifndef SHARDX_RUNTIME_BLAS_ARCHIVE
#define SHARDX_RUNTIME_BLAS_ARCHIVE ""
#endif
#ifndef SHARDX_LAYOUT_ARCHIVE
#define SHARDX_LAYOUT_ARCHIVE ""
#endif
#ifndef SHARDX_OPENBLAS_LIBRARY
#define SHARDX_OPENBLAS_LIBRARY "-lopenblas"
#endif
#ifndef SHARDX_CUDA_CODE_ARCHIVE
#define SHARDX_CUDA_CODE_ARCHIVE ""
#endif
#ifndef SHARDX_CUDA_RUNTIME_ARCHIVE
#define SHARDX_CUDA_RUNTIME_ARCHIVE ""
#endif
// Where installed tools find them (cmake/ShardXInstall.cmake): relative to
// the tool's folder ("../lib" in a prefix, "../_lib" in the Python wheel),
// and the configured prefix's library folder.
#ifndef SHARDX_INSTALLED_ARCHIVE_DIR
#define SHARDX_INSTALLED_ARCHIVE_DIR "../lib"
#endif
#ifndef SHARDX_INSTALL_PREFIX_ARCHIVE_DIR
#define SHARDX_INSTALL_PREFIX_ARCHIVE_DIR ""
#endif

/// The folder of installed runtime archives, or "" for the build tree's:
/// beside the running tool where it is installed (a prefix's bin/, the
/// wheel's shardx/_bin), else the build tree's while it exists, else the
/// configured install prefix's (a program of its own that links
/// ShardXCompiler from an installed ShardX).
static std::string installedArchiveDir() {
  auto holdsRuntime = [](const SmallString<128> &dir) {
    return llvm::sys::fs::exists(dir + "/libShardXRuntime.a");
  };
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  if (!exe.empty()) {
    SmallString<128> dir(llvm::sys::path::parent_path(exe));
    llvm::sys::path::append(dir, SHARDX_INSTALLED_ARCHIVE_DIR);
    llvm::sys::path::remove_dots(dir, /*remove_dot_dot=*/true);
    if (holdsRuntime(dir))
      return std::string(dir);
  }
  if (llvm::sys::fs::exists(SHARDX_RUNTIME_ARCHIVE))
    return "";
  SmallString<128> prefix(SHARDX_INSTALL_PREFIX_ARCHIVE_DIR);
  if (!prefix.empty() && holdsRuntime(prefix))
    return std::string(prefix);
  return "";
}

SmallVector<std::string> mlir::shardx::runtimeLibraries(bool cuda) {
  std::string installed = installedArchiveDir();
  // An archive of the installed folder, else of the build tree.
  auto archive = [&](StringRef name, const char *built) {
    return installed.empty() ? std::string(built) : installed + "/" + name.str();
  };
  // `archive` from the build, or, where $`var` names a copy of `archive`,
  // that copy and `sibling` beside it in place of `siblingDefault`.
  auto withOverride = [](const char *var, std::string archive,
                         StringRef siblingName, std::string sibling) {
    if (const char *env = std::getenv(var)) {
      archive = env;
      sibling = (llvm::sys::path::parent_path(archive) + "/" + siblingName).str();
    }
    return std::make_pair(archive, sibling);
  };
  std::string runtimeArchive =
      archive("libShardXRuntime.a", SHARDX_RUNTIME_ARCHIVE);
  std::string layoutArchive =
      archive("libShardXLayout.a", SHARDX_LAYOUT_ARCHIVE);
  SmallVector<std::string> all;
  if (cuda) {
    // The compiled-code entry points on device buffers (shardx_rt_invoke,
    // shardx_rt_cg_*), the CUDA runtime, the communicator interface and the
    // layouts; $SHARDX_CUDA_RUNTIME_ARCHIVE names a copy of the CUDA
    // runtime with libShardXRuntimeCudaCode.a beside it.
    auto [runtime, code] = withOverride(
        "SHARDX_CUDA_RUNTIME_ARCHIVE",
        archive("libShardXRuntimeCuda.a", SHARDX_CUDA_RUNTIME_ARCHIVE),
        "libShardXRuntimeCudaCode.a",
        archive("libShardXRuntimeCudaCode.a", SHARDX_CUDA_CODE_ARCHIVE));
    all = {code, runtime, runtimeArchive, layoutArchive, "-ldl"};
  } else {
    // The runtime and its GEMMs (OpenBLAS); $SHARDX_RUNTIME_ARCHIVE names a
    // copy of the runtime, with libShardXRuntimeBlas.a beside it.
    auto [runtime, blas] = withOverride(
        "SHARDX_RUNTIME_ARCHIVE", runtimeArchive, "libShardXRuntimeBlas.a",
        archive("libShardXRuntimeBlas.a", SHARDX_RUNTIME_BLAS_ARCHIVE));
    all = {runtime, blas, layoutArchive, SHARDX_OPENBLAS_LIBRARY};
  }
  SmallVector<std::string> libraries;
  for (std::string &lib : all)
    if (!lib.empty())
      libraries.push_back(std::move(lib));
  return libraries;
}
