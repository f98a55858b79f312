//===- ProgramMemory.h - Where a compiled program's buffers live -*- C++ -*-===//
//
// Part of ShardX.
//
// The runtime calls of compiled programs (lib/Runtime/CompiledCode.cpp) are
// written once; what differs between a CPU artifact (host buffers) and a
// CUDA artifact (device buffers of the artifact's CUDA runtime) is this
// interface. The host implementation is in ShardXRuntime, the device one in
// lib/Runtime/cuda (ShardXRuntimeCudaCode); each defines the artifact's
// `shardx_rt_invoke`, which runs the program with its memory.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_PROGRAMMEMORY_H
#define SHARDX_RUNTIME_PROGRAMMEMORY_H

#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/FaultInjection.h"

#include <cstddef>
#include <memory>

namespace shardx::rt {

/// One run's view of the program's buffers. Used by the rank's thread only.
/// Its memory space (MemoryOps) is the one the communicator must take; its
/// copies move between the program's buffers, or between one of them and
/// host memory (either way), after the work queued on them.
class ProgramMemory : public MemoryOps {
public:
  ~ProgramMemory() override;

  /// Before the program runs: ok, or why it cannot (no usable GPU).
  virtual Status open() { return Status::ok(); }
  /// At each call of the program on `comm` (collectives, starts, waits):
  /// device memory tells `comm` the rank's stream (orderAfterStream).
  virtual void attach(Communicator &comm) { (void)comm; }
  /// Before each collective: waits for the program's queued work on its
  /// buffers, unless the attached communicator orders its collectives
  /// after that work itself (a stream-ordered one on device memory).
  virtual void settle() {}
  /// A communicator on host buffers that runs `comm`'s collectives, for the
  /// steps that pack and unpack on the host; null where `comm` takes host
  /// buffers itself.
  virtual std::unique_ptr<Communicator> stageHost(Communicator &comm) {
    (void)comm;
    return nullptr;
  }
  /// After the program returned: the error of a collective still in flight
  /// (on `comm`, null without one), then waits for the program's work.
  virtual Status close(Communicator *comm) {
    (void)comm;
    return Status::ok();
  }
};

/// Runs the compiled entry point `entry(args)` on `comm` (null: a program
/// without collectives) with buffers in `memory`, failing where `faults`
/// says (the failure tests'): what `shardx_rt_invoke` does (CApi.h), with
/// the faults of the environment. A failed runtime call records its error
/// and aborts the world; every later call of the run does no communication
/// and zeroes its outputs, the program runs to its end, and the error is
/// returned (the outputs of a failed run are never the caller's). No
/// longjmp.
Status invokeProgram(void (*entry)(void **), void **args, Communicator *comm,
                     ProgramMemory &memory, const FaultPlan &faults = {});

/// invokeProgram's error copied to `error` (NUL-terminated, truncated to
/// `errorSize`): 0 or 1, as shardx_rt_invoke returns.
int reportInvocation(const Status &status, char *error, int64_t errorSize);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_PROGRAMMEMORY_H
