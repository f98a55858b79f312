//===- MpiBootstrap.cpp - The bootstrap over MPI --------------------------===//
//
// Part of ShardX.
//
// Rank 0's bytes to every rank of MPI_COMM_WORLD with MPI_Bcast: how
// `mpirun -np N shardx-exec model.so --backend nccl` hands out the
// ncclUniqueId.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Mpi.h"

#include <mpi.h>

namespace shardx::rt {
namespace {

class MpiBootstrap : public Bootstrap {
public:
  MpiBootstrap() {
    int r = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    rank = r;
    size = n;
  }
  const char *getName() const override { return "MPI job"; }
  int64_t getRank() const override { return rank; }
  int64_t getWorldSize() const override { return size; }
  Status broadcast(const std::string &key, void *data, size_t bytes) override {
    if (MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
      return Status::error("MPI_Bcast of " + key + " failed");
    return Status::ok();
  }

private:
  int64_t rank = 0, size = 1;
};

} // namespace

bool isMpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

std::unique_ptr<Bootstrap> createMpiBootstrap() {
  return std::make_unique<MpiBootstrap>();
}

} // namespace shardx::rt
