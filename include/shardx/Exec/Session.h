//===- Session.h - Resident shards and persistent rank threads --*- C++ -*-===//
//
// Part of ShardX.
//
// What the Python binding (`shardx.compile`) runs on: a `Session` keeps one
// thread per rank of a mesh alive between runs (a `threads` world), and a
// `ShardSet` keeps a tensor's local shards in memory between runs, so that a
// training loop passes parameters and optimizer state from one step to the
// next without assembling or scattering them. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_EXEC_SESSION_H
#define SHARDX_EXEC_SESSION_H

#include "shardx/Exec/Executor.h"
#include "shardx/Exec/RankThreads.h"

#include <functional>
#include <memory>

namespace shardx::exec {

/// A global tensor as its local shards, one per rank of a mesh (rank-major
/// order). Ranks that hold the same shard may share one buffer. A buffer is
/// written after it is made only when its ShardSet is donated to a run and
/// nothing else holds it (see Session::run), so sharing is safe.
struct ShardSet {
  std::vector<int64_t> meshShape;
  std::vector<int64_t> globalShape;
  rt::DType dtype = rt::DType::F32;
  /// None: every rank holds the whole tensor.
  std::optional<Layout> layout;
  std::vector<std::shared_ptr<const HostTensor>> locals;
  /// Donated to a run: `locals` is empty, the run's output has the buffers.
  bool donated = false;

  /// The spec of the tensor as an artifact describes it (for assemble).
  TensorSpec getSpec() const;
  /// Whether `spec` (an entry point's input) accepts these shards: same
  /// global shape, dtype and layout (no layout = fully replicated).
  bool matches(const TensorSpec &spec, std::string &why) const;
};

/// Scatters `global` over `meshShape` by `layout` (none: replicated). A
/// replicated tensor is one buffer all ranks share.
ShardSet scatterShards(const HostTensor &global,
                       const std::optional<Layout> &layout,
                       const std::vector<int64_t> &meshShape);

/// Assembles the global tensor (pending Partials reduced).
HostTensor gatherShards(const ShardSet &shards, std::string &error);

/// One rank per thread of this process, kept alive between runs. A run
/// that fails on any rank ends the world (its collectives abort); the next
/// run starts a fresh one.
///
/// Or one rank of a world of processes (MPI): this process runs its rank on
/// the calling thread, and its ShardSets hold that rank's shard only (the
/// other ranks' entries are null); gather() is then a collective.
class Session {
public:
  /// Every rank of `meshShape` a thread of `world` (rt::runThreads: the
  /// `threads` backend; rt::runCudaLocal: `cuda-local`, every rank on CUDA
  /// device 0).
  explicit Session(std::vector<int64_t> meshShape,
                   double timeoutSeconds = 60.0,
                   RankWorld world = rt::runThreads);
  /// This process's rank on `comm` (every rank of the mesh in its own
  /// process).
  explicit Session(std::unique_ptr<rt::Communicator> comm);
  /// The same where `comm` takes device buffers (nccl): `hostComm` runs its
  /// collectives on host buffers (rt::stageHostBuffers(*comm)), for
  /// gather().
  Session(std::unique_ptr<rt::Communicator> comm,
          std::unique_ptr<rt::Communicator> hostComm);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  const std::vector<int64_t> &getMeshShape() const { return meshShape; }
  int64_t getSize() const { return size; }
  /// Worlds started so far (1 after the first run; +1 after each failure;
  /// 0 for a process's rank).
  int64_t getWorldsStarted() const {
    return threads ? threads->getWorldsStarted() : 0;
  }
  /// The rank this process runs (-1: all of them, as threads).
  int64_t getProcessRank() const;
  /// Whether this process holds rank `rank`'s shards.
  bool holds(int64_t rank) const {
    return !processMode || rank == getProcessRank();
  }
  /// `global` scattered by `layout` (none: replicated) to the ranks this
  /// process holds.
  ShardSet scatter(const HostTensor &global,
                   const std::optional<Layout> &layout) const;
  /// The global tensor of `shards` (pending Partials reduced); a
  /// collective when the ranks are processes.
  rt::Status gather(const ShardSet &shards, HostTensor &global);
  /// Ends the process world's communicator (before MPI_Finalize); the
  /// session runs nothing after.
  void close();

  /// Keeps the results of CUDA artifacts in device memory (the GPU
  /// backends): a run passes its inputs' device buffers as they are, copies
  /// host inputs in for the call, and its outputs' shards are the device
  /// buffers the program wrote. Host reads copy them out (onHost).
  void setDeviceResident(bool resident) { deviceResident = resident; }
  bool isDeviceResident() const { return deviceResident; }

  /// Runs `body` on every rank and returns each rank's status.
  std::vector<rt::Status>
  runOnRanks(const std::function<rt::Status(rt::Communicator &)> &body);

  /// Runs `entry` of `artifact` on resident inputs. On success `outputs`
  /// holds one ShardSet per result; on failure nothing is written and the
  /// error names the failing rank and its cause.
  rt::Status run(const Artifact &artifact, const EntryPoint &entry,
                 const std::vector<const ShardSet *> &inputs,
                 std::vector<ShardSet> &outputs);
  /// The same with donation: `donatedInputOf[o]` is the input whose buffers
  /// output `o` reuses (same global shape, dtype and layout), or -1. Once
  /// every rank has succeeded, each rank's result is copied into the
  /// donated input's buffer on that rank when nothing else holds it (not
  /// shared with another rank or a view, and not itself the result's
  /// source); else into a new buffer. A donated input is then invalidated
  /// (`donated`, no locals). On failure no input is touched.
  /// `inputsChecked`: the caller has checked each input's global shape,
  /// dtype and layout against the entry (the Python call path's guards).
  rt::Status run(const Artifact &artifact, const EntryPoint &entry,
                 const std::vector<ShardSet *> &inputs,
                 std::vector<ShardSet> &outputs,
                 const std::vector<int64_t> &donatedInputOf,
                 bool inputsChecked = false);

private:
  std::vector<int64_t> meshShape;
  int64_t size = 1;
  /// The ranks as threads of this process; null when this process is one
  /// rank of `comm`'s world.
  std::unique_ptr<RankThreads> threads;
  std::unique_ptr<rt::Communicator> comm;
  /// Host-buffer collectives on `comm` (destroyed first); null: `comm`
  /// takes host buffers itself.
  std::unique_ptr<rt::Communicator> hostComm;
  bool processMode = false;
  bool deviceResident = false;
};

} // namespace shardx::exec

#endif // SHARDX_EXEC_SESSION_H
