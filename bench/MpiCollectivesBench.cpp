//===- MpiCollectivesBench.cpp - mpi backend against raw MPI calls --------===//
//
// Part of ShardX.
//
// Under mpirun: for each message size, times the mpi backend's all_gather,
// reduce_scatter, all_reduce and all_to_all and the raw MPI calls they map
// to, in the same run, and prints algbw/busbw (nccl-tests convention) and
// the ratio backend / raw (1.0: no overhead).
//
// Usage: mpirun -np N shardx-mpi-collectives-bench [max-bytes]
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Mpi.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

using namespace shardx;
using namespace shardx::rt;

/// The slowest rank's mean seconds per call.
static double timeIt(const std::function<void()> &call, int iters) {
  call(); // warm-up
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i)
    call();
  double mine = (MPI_Wtime() - t0) / iters, worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char **argv) {
  if (!initMpi(&argc, &argv))
    return 1;
  size_t maxBytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10)
                             : static_cast<size_t>(16) << 20;
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string error;
  auto comm = createMpiCommunicator({size}, 600, error);
  if (!comm) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (rank == 0)
    std::printf("# mpi backend vs raw MPI, %d ranks\n%-15s %12s %10s %10s "
                "%10s %8s\n",
                size, "collective", "bytes", "time_us", "raw_us", "busbw_GBs",
                "raw/ours");
  const char *names[] = {"all_gather", "reduce_scatter", "all_reduce",
                         "all_to_all"};
  for (size_t bytes = 1024; bytes <= maxBytes; bytes *= 8) {
    size_t count = bytes / sizeof(float), piece = count / size;
    std::vector<float> in(count, 1.0f), out(count);
    std::vector<size_t> counts(size, piece);
    std::vector<int> ipieces(size, static_cast<int>(piece)),
        ibytes(size, static_cast<int>(piece * 4)), displs(size);
    for (int i = 0; i < size; ++i)
      displs[i] = static_cast<int>(i * piece * 4);
    int iters = std::max<int>(3, static_cast<int>((32 << 20) / bytes));
    for (int kind = 0; kind < 4; ++kind) {
      std::function<void()> ours, raw;
      switch (kind) {
      case 0:
        ours = [&] {
          comm->allGather(in.data(), out.data(), counts, DType::F32, {0});
        };
        raw = [&] {
          MPI_Allgatherv(in.data(), ibytes[0], MPI_BYTE, out.data(),
                         ibytes.data(), displs.data(), MPI_BYTE,
                         MPI_COMM_WORLD);
        };
        break;
      case 1:
        ours = [&] {
          comm->reduceScatter(in.data(), out.data(), counts, DType::F32,
                              ReduceOp::Sum, {0});
        };
        raw = [&] {
          MPI_Reduce_scatter(in.data(), out.data(), ipieces.data(), MPI_FLOAT,
                             MPI_SUM, MPI_COMM_WORLD);
        };
        break;
      case 2:
        ours = [&] {
          comm->allReduce(in.data(), out.data(), count, DType::F32,
                          ReduceOp::Sum, {0});
        };
        raw = [&] {
          MPI_Allreduce(in.data(), out.data(), static_cast<int>(count),
                        MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
        break;
      default:
        ours = [&] {
          comm->allToAll(in.data(), counts, out.data(), counts, DType::F32,
                         {0});
        };
        raw = [&] {
          MPI_Alltoallv(in.data(), ibytes.data(), displs.data(), MPI_BYTE,
                        out.data(), ibytes.data(), displs.data(), MPI_BYTE,
                        MPI_COMM_WORLD);
        };
        break;
      }
      // Alternate to spread noise evenly over both.
      double tRaw = timeIt(raw, iters), tOurs = timeIt(ours, iters);
      tRaw = std::min(tRaw, timeIt(raw, iters));
      tOurs = std::min(tOurs, timeIt(ours, iters));
      double n = size;
      double factor = kind == 2 ? 2 * (n - 1) / n : (n - 1) / n;
      if (rank == 0)
        std::printf("%-15s %12zu %10.1f %10.1f %10.3f %8.3f\n", names[kind],
                    bytes, tOurs * 1e6, tRaw * 1e6,
                    bytes / tOurs / 1e9 * factor, tRaw / tOurs);
    }
  }
  comm.reset();
  finalizeMpi();
  return 0;
}
