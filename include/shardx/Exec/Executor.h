//===- Executor.h - Run ShardX artifacts on N ranks -------------*- C++ -*-===//
//
// Part of ShardX.
//
// Loads an artifact (shardx-compile output), scatters global inputs to every
// rank by the input layouts, runs the entry point on each rank (threads in
// this process, or one MPI process per rank) and assembles the global
// outputs by the output layouts (reducing pending Partials). Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_EXEC_EXECUTOR_H
#define SHARDX_EXEC_EXECUTOR_H

#include "shardx/Exec/ProgramInfo.h"
#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/BufferCache.h"
#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/DType.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace shardx::exec {

/// The bytes of a host tensor: blocks of 1 MiB or more are reused from a
/// cache of freed ones (rt::BufferCache), so a run's outputs do not map and
/// page-fault fresh memory each time.
using HostData = std::vector<char, rt::CachingAllocator<char>>;

/// Device memory that holds a tensor's elements (the resident shards of a
/// GPU session): the first element's address, the allocation's owner,
/// which gives it back to the runtime that allocated it when the last
/// holder goes, and that runtime's synchronous copy (any direction).
struct DeviceData {
  void *address = nullptr;
  std::shared_ptr<void> owner;
  void (*copy)(void *dst, const void *src, int64_t bytes) = nullptr;
};

/// A dense row-major tensor: its elements in host memory (`data`) or, for
/// a GPU session's resident shards, in device memory (`device`; `data` is
/// then empty). Code that reads elements on the host takes onHost(t).
struct HostTensor {
  std::vector<int64_t> shape;
  rt::DType dtype = rt::DType::F32;
  HostData data;
  std::shared_ptr<const DeviceData> device;

  int64_t numElements() const;
  size_t elementSize() const { return rt::dtypeSize(dtype); }
  bool onDevice() const { return device != nullptr; }
};

/// `t` with its elements in host memory: `t` itself, or a copy of its
/// device elements.
std::shared_ptr<const HostTensor> onHost(std::shared_ptr<const HostTensor> t);

/// One rank's results of an entry point call as the program returned them
/// (buffers it allocated), until they are copied out; freed on destruction.
/// Lets a caller copy results only once every rank has succeeded, and into
/// buffers it already has (donation).
class RawOutputs {
public:
  RawOutputs() = default;
  RawOutputs(RawOutputs &&other) noexcept;
  RawOutputs &operator=(RawOutputs &&other) noexcept;
  RawOutputs(const RawOutputs &) = delete;
  RawOutputs &operator=(const RawOutputs &) = delete;
  ~RawOutputs();

  size_t size() const { return offsets.size(); }
  /// Whether output `o` lies in one of the call's input buffers (the
  /// program returned an argument or a view of one).
  bool aliasesInput(size_t o) const;
  /// Copies output `o` into `into` (shape and dtype set); a buffer of the
  /// right size is reused, not reallocated. `into` may be one of the
  /// call's inputs unless aliasesInput(o). Host results only.
  void copyOut(size_t o, HostTensor &into) const;
  /// Whether the results are in device memory (Artifact::callOnDevice).
  bool onDevice() const { return deviceCopy != nullptr; }
  /// Output `o` of a device call as a device tensor: the program's buffer
  /// itself, which the tensor then owns, unless it is an input's or not
  /// dense (then a copy); an output returned twice shares the buffer.
  HostTensor takeOut(size_t o);

private:
  friend class Artifact;
  void release();
  const EntryPoint *entry = nullptr;
  std::vector<int64_t> results;
  /// Word offset of each output's descriptor in `results`.
  std::vector<size_t> offsets;
  std::set<int64_t> inputPtrs;
  /// The artifact's `shardx_rt_host_free` (its buffer cache), else free;
  /// for a device call its `shardx_rt_cuda_free`.
  void (*freeBuffer)(void *) = nullptr;
  /// A device call: the runtime's copy and allocation, the device copies
  /// of host inputs (freed with the results), and the owners of the
  /// buffers takeOut gave away, by allocation (not freed here).
  void (*deviceCopy)(void *, const void *, int64_t) = nullptr;
  void *(*deviceAlloc)(int64_t) = nullptr;
  std::vector<void *> staged;
  std::map<int64_t, std::shared_ptr<void>> taken;
  /// A host call's copies of inputs that were in device memory (a result
  /// may be one of their buffers).
  std::vector<std::shared_ptr<const HostTensor>> hostInputs;
};

class Artifact {
public:
  /// Loads `path`; nullptr with `error` set when it is not an artifact.
  static std::unique_ptr<Artifact> load(const std::string &path,
                                        std::string &error);
  ~Artifact();

  const std::vector<EntryPoint> &getEntryPoints() const {
    return info.functions;
  }
  const EntryPoint *lookup(const std::string &name) const;
  /// The mesh shape of sharded programs ({1} for unsharded ones).
  const std::vector<int64_t> &getMeshShape() const { return meshShape; }
  /// The program description, read and as the artifact embeds it.
  const ProgramInfo &getProgramInfo() const { return info; }
  const std::string &getProgramInfoText() const { return infoText; }
  const std::string &getPath() const { return path; }

  /// Lets each BLAS call use `threads` threads (the artifact's OpenBLAS is
  /// per process); 0 leaves the setting alone.
  void setComputeThreads(int threads) const;

  /// The address of `symbol` in the artifact, or nullptr.
  void *lookupSymbol(const std::string &symbol) const;
  /// From now on calls `shardx_entry_<f><suffix>` for entry `f` (CUDA
  /// artifacts: "_resident", see shardx-gpu-exec --resident).
  void setEntrySuffix(const std::string &suffix) { entrySuffix = suffix; }

  /// Runs `entry` on this rank with its local inputs.
  rt::Status run(const EntryPoint &entry, rt::Communicator &comm,
                 const std::vector<HostTensor> &localInputs,
                 std::vector<HostTensor> &localOutputs) const;
  /// The same with the inputs by pointer (buffers several ranks share, or
  /// that stay resident between runs, are not copied).
  rt::Status run(const EntryPoint &entry, rt::Communicator &comm,
                 const std::vector<const HostTensor *> &localInputs,
                 std::vector<HostTensor> &localOutputs) const;
  /// Runs `entry` on this rank and leaves the results uncopied in `raw`.
  /// Inputs in device memory are copied to the host first.
  rt::Status call(const EntryPoint &entry, rt::Communicator &comm,
                  const std::vector<const HostTensor *> &localInputs,
                  RawOutputs &raw) const;

  /// Whether this is a CUDA artifact (its entries have device variants).
  bool isCuda() const { return cuda.alloc != nullptr; }
  /// Runs `entry` of a CUDA artifact on device buffers: inputs in device
  /// memory are passed as they are, host inputs are copied to the device
  /// for the call (through the rank's pinned staging memory, queued on its
  /// stream); the results stay in device memory (`raw.takeOut`). The
  /// rank's stream is synchronized before it returns, so other streams and
  /// the host may read the results.
  rt::Status callOnDevice(const EntryPoint &entry, rt::Communicator &comm,
                          const std::vector<const HostTensor *> &localInputs,
                          RawOutputs &raw) const;

private:
  Artifact() = default;
  /// Calls `fn` (an entry of this artifact) on the input descriptors
  /// `descs` and leaves its results in `raw`, freed by `free`.
  rt::Status invokeEntry(void *fn, const EntryPoint &entry,
                         rt::Communicator &comm,
                         std::vector<std::vector<int64_t>> descs,
                         std::set<int64_t> inputPtrs, RawOutputs &raw,
                         void (*free)(void *)) const;
  std::string path;
  void *handle = nullptr;
  ProgramInfo info;
  std::string infoText;
  std::vector<int64_t> meshShape{1};
  std::string entrySuffix;
  int (*invoke)(void (*)(void **), void **, void *, char *, int64_t) = nullptr;
  int (*setThreads)(int) = nullptr;
  void (*freeBuffer)(void *) = nullptr;
  void (*trimBuffers)() = nullptr;
  /// The entry points of a CUDA artifact's copy of the CUDA runtime
  /// (include/shardx/Runtime/Cuda.h; `alloc` null for CPU artifacts, the
  /// staging pair null in artifacts built before it).
  struct CudaRuntime {
    void *(*alloc)(int64_t) = nullptr;
    void (*free)(void *) = nullptr;
    void (*copy)(void *, const void *, int64_t) = nullptr;
    void (*synchronize)() = nullptr;
    void (*stageToDevice)(void *, const void *, int64_t) = nullptr;
    void (*stagingReset)() = nullptr;
  } cuda;
};

/// The threads each BLAS call gets when `ranks` ranks share this machine:
/// SHARDX_NUM_THREADS if set; 0 (leave OpenBLAS's own choice) if
/// OPENBLAS_NUM_THREADS is set; else the machine's cores / `ranks`, at least
/// one, so that ranks do not oversubscribe the cores.
int computeThreadsPerRank(int64_t ranks);

/// The part of `global` rank `coords` holds under `spec` (a Partial input:
/// the rank at coordinate 0 of each Partial axis holds the value, the others
/// the reduction's identity).
HostTensor scatter(const HostTensor &global, const TensorSpec &spec,
                   const std::vector<int64_t> &meshShape,
                   const std::vector<int64_t> &coords);

/// The global tensor from every rank's local tensor (rank-major order).
HostTensor assemble(const std::vector<HostTensor> &locals,
                    const TensorSpec &spec,
                    const std::vector<int64_t> &meshShape, std::string &error);

/// The values a random input is drawn from.
enum class InputDomain {
  /// Floats uniform in [-1, 1), integers uniform in [0, intRange).
  Any,
  /// Floats uniform in [0, 1), integers as for Any: running means of
  /// squares (Adam's second moment), whose square root the program takes.
  NonNegative,
  /// Whole numbers uniform in [1, 100], in the tensor's own type: step
  /// counters.
  Count,
};

/// The domain of an optimizer state argument by the key PyTorch gives the
/// state (the importer's `torch.state` argument attribute), by the policy
/// table kTorchOptimizerStateDomains (lib/Exec/RandomInputs.cpp): `step` is
/// a count; `exp_avg_sq`, `max_exp_avg_sq`, `exp_inf`, `square_avg`, `sum`
/// and `acc_delta` are non-negative; anything else is Any.
InputDomain inputDomainOfTorchState(const std::string &state);

/// A random tensor from `seed`, its elements drawn from `domain`.
HostTensor randomTensor(const std::vector<int64_t> &shape, rt::DType dtype,
                        uint64_t seed, int64_t intRange,
                        InputDomain domain = InputDomain::Any);

/// .npy files: written in format 1.0, read in 1.0, 2.0 and 3.0; little-endian,
/// C order. A header numpy would not write, or a file whose size is not what
/// its header says, is an error (never a partial tensor).
bool readNpy(const std::string &path, HostTensor &out, std::string &error);
bool writeNpy(const std::string &path, const HostTensor &t,
              std::string &error);

/// How a world of ranks in this process is run: rt::runThreads (the
/// `threads` backend) or rt::runCudaLocal (`cuda-local`).
using RankWorld = std::function<std::vector<rt::Status>(
    const std::vector<int64_t> &,
    const std::function<rt::Status(rt::Communicator &)> &, double)>;

/// Runs `entry` of `artifact` on every rank of its mesh as threads of
/// `world` and returns the global outputs. `blockedSeconds`, when given, is
/// set to the mean over ranks of the time spent blocked in collectives and
/// waits (the exposed communication).
rt::Status runThreaded(const Artifact &artifact, const EntryPoint &entry,
                       const std::vector<HostTensor> &globalInputs,
                       std::vector<HostTensor> &globalOutputs,
                       double timeoutSeconds, double *seconds = nullptr,
                       const RankWorld &world = rt::runThreads,
                       double *blockedSeconds = nullptr);

/// Runs this process's rank on `comm` (any backend) and gathers the global
/// outputs on every rank.
rt::Status runOnCommunicator(const Artifact &artifact, const EntryPoint &entry,
                             rt::Communicator &comm,
                             const std::vector<HostTensor> &globalInputs,
                             std::vector<HostTensor> &globalOutputs,
                             double *seconds = nullptr,
                             double *blockedSeconds = nullptr);

/// Whether a run of `entry` passed its index checks (docs/Importer.md,
/// "Index checks"), read from its global outputs `outputs`: ok where the
/// entry has no check output or its code is 0, else an error saying which
/// check failed (describeFailedCheck). The code is replicated, so every
/// rank of a world of processes reads the same and agrees.
rt::Status checkIndexCode(const EntryPoint &entry,
                          const std::vector<HostTensor> &outputs);

/// Removes the check code from `outputs`, a run of `entry` whose checks
/// passed (nothing where the entry has none), so the outputs a tool writes
/// or compares are the program's own: those of the traced function, as
/// eager returns them (a later output moves down one place).
void dropIndexCode(const EntryPoint &entry, std::vector<HostTensor> &outputs);

/// The global tensor of `spec` from this rank's local tensor and every
/// other rank's of `comm` (a collective: every rank calls it).
rt::Status gatherOnCommunicator(const HostTensor &local, const TensorSpec &spec,
                                rt::Communicator &comm, HostTensor &global);

/// How `a` (the run under test) differs from `b` (the reference), element
/// by element. Finite pairs follow numpy's allclose rule, |a - b| <= atol +
/// rtol * |b|. A NaN or Inf on one side only, or Infs of opposite signs, is
/// a mismatch. NaN on both sides, or the same Inf on both, compares equal
/// but proves nothing: such elements are counted and fail the comparison
/// unless `allowNonFinite`.
struct Difference {
  /// Max abs and rel differences (rel: abs / max(|b|, atol)); infinite
  /// when an element is non-finite on one side only.
  double maxAbs = 0, maxRel = 0;
  /// Elements beyond tolerance (one-sided NaN/Inf included); all of them
  /// when the shapes differ.
  int64_t mismatches = 0;
  /// Elements NaN on both sides or the same Inf on both sides.
  int64_t bothNonFinite = 0;
  /// Elements compared (of `a`).
  int64_t elements = 0;
  /// Same shape, no mismatch and, unless allowed, no NaN/Inf on both sides.
  bool withinTolerance = true;
};
Difference compare(const HostTensor &a, const HostTensor &b, double rtol,
                   double atol, bool allowNonFinite = false);

} // namespace shardx::exec

#endif // SHARDX_EXEC_EXECUTOR_H
