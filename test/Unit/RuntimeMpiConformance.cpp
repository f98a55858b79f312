//===- RuntimeMpiConformance.cpp - The conformance checks under mpirun ----===//
//
// Part of ShardX.
//
// Usage: mpirun -np N shardx-mpi-conformance MESH [--fail-rank R]
//            [--silent-rank R] [--timeout SECONDS]
// Runs every conformance check on the mpi backend (skip list: none) on the
// mesh MESH (e.g. 2x3, N its device count) and prints one line per rank.
// --fail-rank makes rank R fail before the checks, --silent-rank makes it
// skip them: every other rank must then stop with a message naming it.
// One more check covers the MPI bootstrap (how the nccl backend gets its
// ncclUniqueId under mpirun): rank 0's bytes reach every rank.
//
//===----------------------------------------------------------------------===//

#include "Conformance.h"

#include "shardx/Runtime/Mpi.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unistd.h>

using namespace shardx;
using namespace shardx::rt;

/// Two ids of 128 bytes from rank 0, each in every rank after broadcast.
static Status checkMpiBootstrap(Communicator &c) {
  std::unique_ptr<Bootstrap> bootstrap = createMpiBootstrap();
  if (bootstrap->getRank() != c.getRank() ||
      bootstrap->getWorldSize() != c.getSize())
    return Status::error("the MPI bootstrap's rank or size differs");
  for (int key = 0; key < 2; ++key) {
    char id[128], want[128];
    for (int i = 0; i < 128; ++i) {
      want[i] = static_cast<char>(i * 13 + key);
      id[i] = c.getRank() == 0 ? want[i] : 0;
    }
    if (Status s =
            bootstrap->broadcast("id-" + std::to_string(key), id, sizeof(id));
        !s)
      return s;
    if (std::memcmp(id, want, sizeof(id)) != 0)
      return Status::error("rank " + std::to_string(c.getRank()) +
                           " did not receive rank 0's bytes");
  }
  return Status::ok();
}

int main(int argc, char **argv) {
  if (Status s = initMpi(&argc, &argv); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MESH [--fail-rank R] [--silent-rank R] "
                 "[--timeout S]\n",
                 argv[0]);
    return 2;
  }
  std::vector<int64_t> mesh;
  std::stringstream shape(argv[1]);
  for (std::string part; std::getline(shape, part, 'x');)
    mesh.push_back(std::atoll(part.c_str()));
  int64_t failRank = -1, silentRank = -1;
  double timeout = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--fail-rank"))
      failRank = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--silent-rank"))
      silentRank = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--timeout"))
      timeout = std::atof(argv[i + 1]);
  }
  std::string error;
  std::unique_ptr<Communicator> comm =
      createMpiCommunicator(mesh, timeout, error);
  if (!comm) {
    std::fprintf(stderr, "shardx: %s\n", error.c_str());
    finalizeMpi();
    return 1;
  }
  if (comm->getRank() == failRank)
    comm->abort("bad input shape 3x5, expected 4x5");
  if (comm->getRank() == silentRank) {
    // Never joins a collective; outlives the others' timeout.
    sleep(static_cast<unsigned>(timeout * 4 + 2));
    finalizeMpi();
    return 0;
  }
  using Check = Status (*)(Communicator &);
  std::vector<std::pair<const char *, Check>> checks = {
      {"all_gather f32", conformance::checkAllGather<float>},
      {"all_gather i64", conformance::checkAllGather<int64_t>},
      {"reductions f32", conformance::checkReductions<float>},
      {"reductions f64", conformance::checkReductions<double>},
      {"reductions i32", conformance::checkReductions<int32_t>},
      {"reductions i64", conformance::checkReductions<int64_t>},
      {"large all_reduce f32", conformance::checkLargeAllReduce<float>},
      {"large all_reduce i64", conformance::checkLargeAllReduce<int64_t>},
      {"nan max/min f32", conformance::checkNanMaxMin<float>},
      {"nan max/min f64", conformance::checkNanMaxMin<double>},
      {"all_to_all f32", conformance::checkAllToAll<float>},
      {"all_to_all i32", conformance::checkAllToAll<int32_t>},
      {"async all_reduce f32", conformance::checkAsyncAllReduce<float>},
      {"async all_reduce i64", conformance::checkAsyncAllReduce<int64_t>},
      {"async all_gather/reduce_scatter f32",
       conformance::checkAsyncGatherScatter<float>},
      {"async all_gather/reduce_scatter i64",
       conformance::checkAsyncGatherScatter<int64_t>},
      {"exchange f32", conformance::checkExchange<float>},
      {"permute broadcast barrier f64",
       conformance::checkPermuteBroadcast<double>},
      {"mpi bootstrap", checkMpiBootstrap},
  };
  int failed = 0;
  for (auto [name, check] : checks) {
    Status s = check(*comm);
    if (!s) {
      std::fprintf(stderr, "FAIL %s: %s\n", name, s.message().c_str());
      ++failed;
    }
  }
  std::printf("rank %lld: %zu checks, %d failed\n",
              static_cast<long long>(comm->getRank()), checks.size(), failed);
  std::fflush(stdout);
  comm.reset();
  finalizeMpi();
  return failed ? 1 : 0;
}
