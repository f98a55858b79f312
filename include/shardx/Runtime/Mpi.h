//===- Mpi.h - The mpi backend ----------------------------------*- C++ -*-===//
//
// Part of ShardX.
//
// One rank per MPI process (OpenMPI), working across machines with mpirun.
// Built when CMake finds MPI (SHARDX_ENABLE_MPI).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_MPI_H
#define SHARDX_RUNTIME_MPI_H

#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/Communicator.h"

#include <memory>

namespace shardx::rt {

/// Initializes MPI (with thread support for the watchdog); call once per
/// process before creating communicators.
Status initMpi(int *argc, char ***argv);
void finalizeMpi();

/// This process's rank of a mesh spread over MPI_COMM_WORLD, whose size
/// must be the number of devices of the mesh. A collective that waits
/// longer than `timeoutSeconds`, or a call to abort(), ends every process
/// of the job with a message naming the rank and the cause.
std::unique_ptr<Communicator>
createMpiCommunicator(const std::vector<int64_t> &meshShape,
                      double timeoutSeconds, std::string &error);

/// Whether MPI_Init ran in this process.
bool isMpiInitialized();

/// The bootstrap over MPI_COMM_WORLD (rank 0's bytes by MPI_Bcast), for
/// backends that need one, e.g. nccl under mpirun. Needs MPI initialized.
std::unique_ptr<Bootstrap> createMpiBootstrap();

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_MPI_H
