//===- Bootstrap.h - How the ranks of a job find each other -----*- C++ -*-===//
//
// Part of ShardX.
//
// A bootstrap hands one rank's bytes (an ncclUniqueId) to every rank of the
// job, separate from the communicator that uses them (IREE's
// hal/channel_provider.h). Two kinds: over MPI (the mpi build, MPI_Bcast on
// MPI_COMM_WORLD), and a file store for launchers without MPI: rank 0
// writes the bytes to a temporary file in a shared folder and renames it to
// its key; the other ranks poll for the key with a timeout. No CUDA, NCCL
// or MPI dependency here.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_BOOTSTRAP_H
#define SHARDX_RUNTIME_BOOTSTRAP_H

#include "shardx/Runtime/Communicator.h"

#include <memory>
#include <string>

namespace shardx::rt {

class Bootstrap {
public:
  virtual ~Bootstrap();
  virtual const char *getName() const = 0;
  virtual int64_t getRank() const = 0;
  virtual int64_t getWorldSize() const = 0;
  /// Rank 0's `bytes` bytes at `data` under `key` end up in every rank's
  /// `data`. Every rank calls it with the same key, once per key.
  virtual Status broadcast(const std::string &key, void *data,
                           size_t bytes) = 0;
};

/// The file store: `dir` is a folder every rank can read and write (a
/// shared file system across machines); a rank that waits longer than
/// `timeoutSeconds` for a key fails with a message naming the file.
std::unique_ptr<Bootstrap> createFileStoreBootstrap(int64_t rank,
                                                    int64_t worldSize,
                                                    std::string dir,
                                                    double timeoutSeconds);

/// The file store from the environment: SHARDX_RANK, SHARDX_WORLD_SIZE and
/// SHARDX_STORE_DIR. Returns null with the reason in `error` when one is
/// missing or malformed.
std::unique_ptr<Bootstrap>
createFileStoreBootstrapFromEnv(double timeoutSeconds, std::string &error);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_BOOTSTRAP_H
