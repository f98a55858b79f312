//===- ObjectCache.h - Compiled objects on disk, by content -----*- C++ -*-===//
//
// Part of ShardX.
//
// The kernel cache: object files keyed by a hash of their LLVM IR and of
// everything else that decides the machine code (LLVM version, target
// triple, CPU, features, optimization level). A kernel compiled once is
// linked from here into every later artifact that has it, in any program
// and any process, until the least recently used entries are evicted.
//
// Where: $SHARDX_KERNEL_CACHE (a directory; "0" or "off" turns the cache
// off), else $SHARDX_CACHE_DIR/kernels (beside the JIT's artifacts), else
// ~/.cache/shardx/kernels. The bound is the JIT cache's,
// $SHARDX_CACHE_MAX_MB (MiB, default 1024) of disk space (allocated
// blocks: a small object takes a whole one), least recently used first;
// the directory is listed for it only when the tally `.size` (the bytes at
// the last listing, plus what was stored since) is over the bound, missing
// or an hour old.
//
// An entry is `<key>.o` and `<key>.sum` (the object's SHA-256), each
// written under a private name and renamed into place, the sum last: an
// entry whose sum is missing or does not match is a miss (and is written
// again), never a corrupt link.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_COMPILER_OBJECTCACHE_H
#define SHARDX_LIB_COMPILER_OBJECTCACHE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::shardx {

class ObjectCache {
public:
  /// The cache the environment asks for (see the file comment); disabled
  /// when it is turned off or has no usable directory (`error` says why).
  static ObjectCache fromEnvironment(std::string &error);

  bool isEnabled() const { return !dir.empty(); }
  const std::string &directory() const { return dir; }

  /// The object of the valid entry for `key`, whose last use it records.
  std::optional<std::string> lookup(llvm::StringRef key) const;

  /// Stores `object` under `key`; false (and `error`) when it cannot.
  bool store(llvm::StringRef key, llvm::StringRef object,
             std::string &error) const;

  /// Removes least recently used entries until the cache holds at most
  /// its bound, and what crashed writers left (an object without its sum,
  /// temporary files) an hour old or more; returns how many entries went.
  unsigned evict() const;

private:
  std::string dir;
  uint64_t maxBytes = 0;
};

/// The kernels of a module on buffers (after `shardx-outline-kernels`)
/// looked up in the kernel cache by their MLIR before they are lowered
/// (takeCachedKernels, lib/Compiler/Artifact.cpp).
struct CachedKernels {
  /// The objects found, by kernel name: those kernels are declarations now.
  llvm::StringMap<std::string> objects;
  /// The MLIR key of each kernel not found: once compiled, its object is
  /// kept under it (where the kernel's unit needs nothing from the program).
  llvm::StringMap<std::string> keys;
};

struct CompileOptions;

/// Before the kernels of `module` (on buffers, outlined) are lowered: each
/// kernel whose object the kernel cache holds under its MLIR key (a hash of
/// its canonical text, canonicalKernelText, and of the target, the
/// optimization level, LLVM's version and ShardX's build) loses its body,
/// its object going into `found`; the keys of the others go there too.
/// Nothing is looked up when `options` turns the cache off or emits no
/// artifact. Fails only when the target is unknown.
LogicalResult takeCachedKernels(ModuleOp module, const CompileOptions &options,
                                CachedKernels &found);

/// Hex SHA-256 of `data`.
std::string sha256Hex(llvm::StringRef data);

} // namespace mlir::shardx

#endif // SHARDX_LIB_COMPILER_OBJECTCACHE_H
