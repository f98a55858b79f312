//===- ExecCommon.h - Shared driver code of shardx-exec and shardx-run ----===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TOOLS_EXECCOMMON_H
#define SHARDX_TOOLS_EXECCOMMON_H

#include "shardx/Exec/Executor.h"
#include "shardx/Runtime/Nccl.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace shardx::tools {

/// One backend an executor runs artifacts on.
struct Backend {
  std::string name;
  /// threads, cuda-local: every rank a thread of this process, in the
  /// world this makes.
  exec::RankWorld rankThreads;
  /// mpi, nccl: this process is one rank of a world of processes; its
  /// communicator, or null with the reason in `error`.
  std::function<std::unique_ptr<rt::Communicator>(
      const std::vector<int64_t> &meshShape, double timeout,
      std::string &error)>
      connect;
  /// Whether its runs report how long the ranks were blocked (shardx-run's
  /// blocked time).
  bool reportsBlocked = false;
  /// A backend this build has not (neither of the two above is set): the
  /// error a run on it gives.
  std::string missing;
};

/// What an executor can run on: its backends, and how it starts and ends
/// the MPI processes of process backends where it has MPI.
struct BackendTable {
  /// In the order an unknown backend's error lists them.
  std::vector<Backend> backends;
  /// MPI_Init (null: this build has no MPI).
  rt::Status (*initProcesses)(int *argc, char ***argv) = nullptr;
  /// MPI_Finalize.
  void (*finalizeProcesses)() = nullptr;
};

/// The nccl backend: this process's rank on its GPU, the NCCL id through
/// `processBootstrap()` where it gives one (MPI_Bcast under mpirun), else
/// through the file store of the environment. Inline, so that only the
/// tables that list it link the nccl runtime.
inline Backend
ncclBackend(std::unique_ptr<rt::Bootstrap> (*processBootstrap)() = nullptr) {
  Backend nccl;
  nccl.name = "nccl";
  nccl.connect = [processBootstrap](const std::vector<int64_t> &meshShape,
                                    double timeout, std::string &error) {
    return rt::connectNccl(meshShape,
                           processBootstrap ? processBootstrap() : nullptr,
                           timeout, error);
  };
  return nccl;
}

/// A backend that runs every rank as a thread of this process in the
/// worlds `world` makes (threads: rt::runThreads, cuda-local:
/// rt::runCudaLocal).
inline Backend rankThreadsBackend(std::string name, exec::RankWorld world,
                                  bool reportsBlocked) {
  Backend backend;
  backend.name = std::move(name);
  backend.rankThreads = std::move(world);
  backend.reportsBlocked = reportsBlocked;
  return backend;
}

/// `threads`: every rank a thread of this process, on host memory.
inline Backend threadsBackend() {
  return rankThreadsBackend("threads", rt::runThreads,
                            /*reportsBlocked=*/true);
}

/// A backend this build has not: runs on it fail with `why`.
inline Backend missingBackend(std::string name, std::string why) {
  Backend backend;
  backend.name = std::move(name);
  backend.missing = std::move(why);
  return backend;
}

/// This executor's backends: each executable defines it once, in the one
/// file that says what its build has (shardx-exec and shardx-run:
/// CpuBackends.cpp, the only place MPI is a build option; shardx-gpu-exec:
/// GpuBackends.cpp).
const BackendTable &getBackends();

struct RunOptions {
  std::string entry;
  std::string backend = "threads";
  int64_t ranks = 0; // 0: the mesh's size
  std::vector<std::string> inputs;
  /// Per input, what random values it takes (empty: all InputDomain::Any).
  std::vector<exec::InputDomain> domains;
  uint64_t seed = 0;
  int64_t intRange = 2;
  double timeout = 60;
};

/// The entry point `name` of `artifact` (`path`), or its first when `name`
/// is empty; null with `error` set when there is none (an artifact of a
/// program without public functions has no first).
const exec::EntryPoint *findEntry(const exec::Artifact &artifact,
                                  const std::string &path,
                                  const std::string &name, std::string &error);

/// Checks what makeInputs and the runs cannot check: a timeout that is a
/// positive, finite number of seconds.
bool checkRunOptions(const RunOptions &options, std::string &error);

/// Global inputs of `entry`: from .npy files or random.
bool makeInputs(const exec::EntryPoint &entry, const RunOptions &options,
                std::vector<exec::HostTensor> &inputs, std::string &error);

/// Where the inputs of `entry` come from, in one line: the .npy files, or
/// the seed and how many inputs are drawn from which range.
std::string describeInputs(const exec::EntryPoint &entry,
                           const RunOptions &options);

/// Runs `entry` on the chosen backend; on MPI every process returns the
/// global outputs. `isRoot` is false on MPI ranks other than 0.
rt::Status runArtifact(const exec::Artifact &artifact,
                       const exec::EntryPoint &entry, const RunOptions &options,
                       const std::vector<exec::HostTensor> &inputs,
                       std::vector<exec::HostTensor> &outputs, double &seconds,
                       bool &isRoot, double *blockedSeconds = nullptr);

/// A command line of shardx-exec / shardx-gpu-exec.
struct ExecArgs {
  std::string artifactPath;
  std::string outDir;
  RunOptions options;
  /// Reference outputs (.npy, one per output) to compare with; empty: none.
  std::vector<std::string> expected;
  /// Tolerances of the comparison for float outputs; negative: by dtype
  /// (see defaultTolerance).
  double rtol = -1, atol = -1;
  /// Runs after a first one (a warm-up) whose median time is reported;
  /// 1: one run, no warm-up (shardx-gpu-exec's --repeat).
  int64_t repeat = 1;
  /// shardx-gpu-exec --resident: one call of the artifact's
  /// `shardx_entry_<f>_resident`, which stages the inputs once and runs the
  /// program on the device buffers `repeat` times after a warm-up; the
  /// reported time is the median of those runs.
  bool resident = false;
};

/// The end of a line about one compared output: how many elements differ
/// or are NaN/Inf in both runs, and the verdict (ok, MISMATCH, NOT FINITE).
void printVerdict(const exec::Difference &d);

/// The comparison's tolerances for outputs of `dtype`: f32 rtol 1e-4, atol
/// 1e-5 (shardx-run's defaults); f64 1e-10 and 1e-12; integers and
/// booleans exact.
void defaultTolerance(rt::DType dtype, double &rtol, double &atol);

/// Loads the artifact, makes or reads the inputs, runs on the chosen
/// backend, fails where a run's index check failed (exec::checkIndexCode:
/// the error names the check, and no output is written), writes the
/// outputs, less the check code (exec::dropIndexCode), as
/// DIR/<entry>.out<i>.npy and compares them
/// with the expected ones (one line per output, then "check passed" or
/// "check FAILED", which exits 1); prints errors as "<tool>: error: ..."
/// and returns the exit code. Ends MPI when `finalizeMpi`.
int runExecutor(const ExecArgs &args, const char *tool, bool finalizeMpi);

/// shardx-exec's command line (LLVM's option parser; ExecMain.cpp).
int execMain(int argc, char **argv);

/// Whether the command line asks for the mpi backend (read before MPI_Init,
/// which may rewrite argv). Initializes MPI when it does; returns false and
/// prints an error when that fails.
bool initMpiIfRequested(int &argc, char **&argv, const char *tool,
                        bool &initialized);

/// Ends MPI where initMpiIfRequested started it (`initialized`).
void finalizeMpiIfInitialized(bool initialized);

} // namespace shardx::tools

#endif // SHARDX_TOOLS_EXECCOMMON_H
