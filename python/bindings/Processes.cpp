//===- Processes.cpp - The binding's MPI, where the build has it ----------===//
//
// Part of ShardX.
//
// The one place of `_shardx_rt` where MPI is a build option (CMake's
// SHARDX_ENABLE_MPI defines SHARDX_HAVE_MPI for this file only): the rest of
// the binding asks these functions.
//
//===----------------------------------------------------------------------===//

#include "Binding.h"

#ifdef SHARDX_HAVE_MPI
#include "shardx/Runtime/Mpi.h"
#endif

using namespace shardx;

#ifdef SHARDX_HAVE_MPI

bool binding::hasMpi() { return true; }

std::unique_ptr<rt::Communicator>
binding::connectMpi(const std::vector<int64_t> &meshShape, double timeout) {
  static bool initialized = false;
  if (!initialized) {
    if (rt::Status s = rt::initMpi(nullptr, nullptr); !s)
      throw RunError(s.message());
    initialized = true;
  }
  std::string error;
  std::unique_ptr<rt::Communicator> comm =
      rt::createMpiCommunicator(meshShape, timeout, error);
  if (!comm)
    throw RunError(error);
  return comm;
}

std::unique_ptr<rt::Bootstrap> binding::mpiBootstrapIfRunning() {
  return rt::isMpiInitialized() ? rt::createMpiBootstrap() : nullptr;
}

void binding::finalizeMpi() { rt::finalizeMpi(); }

#else

bool binding::hasMpi() { return false; }

std::unique_ptr<rt::Communicator>
binding::connectMpi(const std::vector<int64_t> &, double) {
  throw std::invalid_argument(
      "this ShardX build has no mpi backend (CMake found no MPI)");
}

std::unique_ptr<rt::Bootstrap> binding::mpiBootstrapIfRunning() {
  return nullptr;
}

void binding::finalizeMpi() {}

#endif
