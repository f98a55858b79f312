//===- CudaLibraries.cpp - Finding the CUDA libraries ---------------------===//
//
// Part of ShardX.
//
// openCudaLibrary (Cuda.h): where the CUDA runtime (the driver, cuBLAS)
// and the nccl backend find the libraries they open at run time.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"

#include <cstdlib>
#include <dlfcn.h>
#include <glob.h>
#include <string>
#include <vector>

namespace {

/// Python package folders where PyTorch's wheels put the CUDA libraries
/// (nvidia/<package>/lib): $SHARDX_SITE_PACKAGES (the Python binding sets
/// it to its interpreter's site-packages), the active virtual environment,
/// PYTHONPATH, the user's and the system's site-packages.
std::vector<std::string> wheelPatterns(const std::string &file) {
  std::vector<std::string> roots;
  auto appendList = [&](const char *var) {
    const char *list = std::getenv(var);
    if (!list)
      return;
    std::string p = list;
    for (size_t pos = 0; pos <= p.size();) {
      size_t end = p.find(':', pos);
      if (end == std::string::npos)
        end = p.size();
      if (end > pos)
        roots.push_back(p.substr(pos, end - pos));
      pos = end + 1;
    }
  };
  appendList("SHARDX_SITE_PACKAGES");
  if (const char *venv = std::getenv("VIRTUAL_ENV"))
    roots.push_back(std::string(venv) + "/lib/python3*/site-packages");
  appendList("PYTHONPATH");
  if (const char *home = std::getenv("HOME")) {
    roots.push_back(std::string(home) + "/.local/lib/python3*/site-packages");
    roots.push_back(std::string(home) +
                    "/.cache/shardx/venv/lib/python3*/site-packages");
  }
  for (const char *sys : {"/usr/local/lib/python3*/dist-packages",
                          "/usr/local/lib/python3*/site-packages",
                          "/usr/lib/python3/dist-packages",
                          "/opt/conda/lib/python3*/site-packages"})
    roots.push_back(sys);
  std::vector<std::string> patterns;
  for (const std::string &root : roots) {
    patterns.push_back(root + "/nvidia/*/lib/" + file);
    patterns.push_back(root + "/nvidia/lib/" + file);
  }
  return patterns;
}

} // namespace

/// Opens the first of `names` found: the path in `$envVar` (a file, or a
/// folder holding one of the names), the default loader path, then PyTorch's
/// wheel folders. Appends what was tried to `tried`. With `envOnly`, a set
/// `$envVar` is the only place tried.
void *shardx::rt::openCudaLibrary(const char *envVar,
                                  const std::vector<std::string> &names,
                                  std::string &tried, bool envOnly) {
  auto attempt = [&](const std::string &path) -> void * {
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *err = dlerror();
      tried += "\n  " + (err ? std::string(err) : path);
    }
    return h;
  };
  if (const char *env = std::getenv(envVar); env && *env) {
    std::string dir = env;
    if (void *h = attempt(dir))
      return h;
    for (const std::string &name : names)
      if (void *h = attempt(dir + "/" + name))
        return h;
    if (envOnly)
      return nullptr;
  }
  for (const std::string &name : names)
    if (void *h = attempt(name))
      return h;
  for (const std::string &name : names)
    for (const std::string &pattern : wheelPatterns(name)) {
      glob_t g;
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (void *h = attempt(g.gl_pathv[i])) {
            globfree(&g);
            return h;
          }
      }
      globfree(&g);
    }
  return nullptr;
}
