//===- ExecCommon.cpp - Shared driver code of shardx-exec and shardx-run --===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#ifdef SHARDX_HAVE_MPI
#include "shardx/Runtime/Mpi.h"
#endif

#include "llvm/Support/CommandLine.h"

#include <algorithm>
#include <cstdio>
#include <memory>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Status;

bool tools::makeInputs(const EntryPoint &entry, const RunOptions &options,
                       std::vector<HostTensor> &inputs, std::string &error) {
  inputs.clear();
  if (!options.inputs.empty() &&
      options.inputs.size() != entry.inputs.size()) {
    error = entry.name + " takes " + std::to_string(entry.inputs.size()) +
            " inputs, " + std::to_string(options.inputs.size()) + " given";
    return false;
  }
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const TensorSpec &spec = entry.inputs[i];
    if (options.inputs.empty()) {
      InputDomain domain =
          i < options.domains.size() ? options.domains[i] : InputDomain::Any;
      inputs.push_back(randomTensor(spec.globalShape, spec.dtype,
                                    options.seed * 1000003 + i,
                                    options.intRange, domain));
      continue;
    }
    HostTensor t;
    if (!readNpy(options.inputs[i], t, error))
      return false;
    if (t.shape != spec.globalShape || t.dtype != spec.dtype) {
      error = options.inputs[i] + ": input " + std::to_string(i) +
              " must be a " + spec.dtype + " tensor of the global shape";
      return false;
    }
    inputs.push_back(std::move(t));
  }
  return true;
}

std::string tools::describeInputs(const EntryPoint &entry,
                                  const RunOptions &options) {
  if (!options.inputs.empty())
    return std::to_string(options.inputs.size()) + " .npy file" +
           (options.inputs.size() == 1 ? "" : "s");
  // Counts per range, in a fixed order.
  int64_t any = 0, nonNegative = 0, counts = 0, integers = 0;
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    InputDomain domain =
        i < options.domains.size() ? options.domains[i] : InputDomain::Any;
    bool isFloat = entry.inputs[i].dtype[0] == 'f';
    if (domain == InputDomain::Count)
      ++counts;
    else if (!isFloat)
      ++integers;
    else if (domain == InputDomain::NonNegative)
      ++nonNegative;
    else
      ++any;
  }
  std::string text = "random from seed " + std::to_string(options.seed);
  const char *sep = ": ";
  auto add = [&](int64_t n, const std::string &what) {
    if (!n)
      return;
    text += sep + std::to_string(n) + " " + what;
    sep = ", ";
  };
  add(any, "in [-1, 1)");
  add(nonNegative, "in [0, 1)");
  add(counts, "whole in [1, 100]");
  add(integers, "integer in [0, " +
                    std::to_string(std::max<int64_t>(options.intRange, 1)) +
                    ")");
  return text;
}

Status tools::runArtifact(const Artifact &artifact, const EntryPoint &entry,
                          const RunOptions &options,
                          const std::vector<HostTensor> &inputs,
                          std::vector<HostTensor> &outputs, double &seconds,
                          bool &isRoot) {
  int64_t size = 1;
  for (int64_t s : artifact.getMeshShape())
    size *= s;
  if (options.ranks && options.ranks != size)
    return Status::error("the program's mesh has " + std::to_string(size) +
                         " devices but --ranks is " +
                         std::to_string(options.ranks));
  isRoot = true;
  if (options.backend == "threads")
    return runThreaded(artifact, entry, inputs, outputs, options.timeout,
                       &seconds);
  if (options.backend == "mpi") {
#ifdef SHARDX_HAVE_MPI
    std::string error;
    std::unique_ptr<rt::Communicator> comm = rt::createMpiCommunicator(
        artifact.getMeshShape(), options.timeout, error);
    if (!comm)
      return Status::error(error);
    isRoot = comm->getRank() == 0;
    return runOnCommunicator(artifact, entry, *comm, inputs, outputs,
                             &seconds);
#else
    return Status::error("this build has no mpi backend");
#endif
  }
  return Status::error("unknown backend '" + options.backend +
                       "' (threads or mpi)");
}

namespace {
namespace cl = llvm::cl;
} // namespace

bool tools::initMpiIfRequested(int &argc, char **&argv, const char *tool,
                               bool &initialized) {
  initialized = false;
  bool want = false;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--backend=mpi" ||
        (std::string(argv[i]) == "--backend" && i + 1 < argc &&
         std::string(argv[i + 1]) == "mpi"))
      want = true;
  if (!want)
    return true;
#ifdef SHARDX_HAVE_MPI
  Status s = rt::initMpi(&argc, &argv);
  if (!s) {
    std::fprintf(stderr, "%s: error: %s\n", tool, s.message().c_str());
    return false;
  }
  initialized = true;
#endif
  return true;
}

int tools::execMain(int argc, char **argv) {
  cl::OptionCategory toolOptions("shardx-exec options");
  cl::opt<std::string> artifactPath(cl::cat(toolOptions), cl::Positional, cl::desc("<model.so>"),
                                    cl::Required);
  cl::opt<std::string> entryName(cl::cat(toolOptions), "entry", cl::desc("entry point (default: the first)"));
  cl::opt<std::string> backend(cl::cat(toolOptions), "backend", cl::desc("threads (default) or mpi"),
                               cl::init("threads"));
  cl::opt<int64_t> ranks(cl::cat(toolOptions), "ranks", cl::desc("number of ranks (the mesh size)"),
                         cl::init(0));
  cl::list<std::string> inputFiles(cl::cat(toolOptions), "inputs", cl::CommaSeparated,
                                   cl::desc("global inputs as .npy files"));
  cl::opt<uint64_t> seed(cl::cat(toolOptions), "seed", cl::desc("seed of random inputs"), cl::init(0));
  cl::opt<int64_t> intRange(cl::cat(toolOptions), "int-range",
                            cl::desc("random integers are in [0, N)"),
                            cl::init(2));
  cl::opt<std::string> outDir(cl::cat(toolOptions), "outputs", cl::desc("directory for the outputs"));
  cl::opt<double> timeout(cl::cat(toolOptions), "timeout", cl::desc("collective timeout (s)"),
                          cl::init(60));
  bool wantMpi = false;
  if (!initMpiIfRequested(argc, argv, "shardx-exec", wantMpi))
    return 1;
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv, "ShardX executor\n");
  std::string error;
  std::unique_ptr<Artifact> artifact = Artifact::load(artifactPath, error);
  if (!artifact) {
    std::fprintf(stderr, "shardx-exec: error: %s\n", error.c_str());
    return 1;
  }
  const EntryPoint *entry = entryName.empty()
                                ? &artifact->getEntryPoints().front()
                                : artifact->lookup(entryName);
  if (!entry) {
    std::fprintf(stderr, "shardx-exec: error: no entry point '%s'\n",
                 entryName.c_str());
    return 1;
  }
  RunOptions options;
  options.backend = backend;
  options.ranks = ranks;
  options.inputs.assign(inputFiles.begin(), inputFiles.end());
  options.seed = seed;
  options.intRange = intRange;
  options.timeout = timeout;
  std::vector<HostTensor> inputs, outputs;
  if (!makeInputs(*entry, options, inputs, error)) {
    std::fprintf(stderr, "shardx-exec: error: %s\n", error.c_str());
    return 1;
  }
  double seconds = 0;
  bool isRoot = true;
  Status s = runArtifact(*artifact, *entry, options, inputs, outputs, seconds,
                         isRoot);
  if (!s) {
    std::fprintf(stderr, "shardx-exec: error: %s\n", s.message().c_str());
    return 1;
  }
  if (isRoot) {
    std::printf("%s: %zu outputs in %.3f ms\n", entry->name.c_str(),
                outputs.size(), seconds * 1e3);
    if (!outDir.empty())
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string path =
            outDir + "/" + entry->name + ".out" + std::to_string(i) + ".npy";
        if (!writeNpy(path, outputs[i], error)) {
          std::fprintf(stderr, "shardx-exec: error: %s\n", error.c_str());
          return 1;
        }
      }
  }
#ifdef SHARDX_HAVE_MPI
  if (wantMpi)
    rt::finalizeMpi();
#endif
  return 0;
}
