//===- ExecCommon.cpp - Shared driver code of shardx-exec and shardx-run --===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Status;

/// The backend of that name (null: none), and the names a tool has
/// ("threads, mpi or nccl").
static const tools::Backend *lookupBackend(const std::string &name,
                                           std::string &names) {
  const std::vector<tools::Backend> &all = tools::getBackends().backends;
  const tools::Backend *found = nullptr;
  std::vector<std::string> listed;
  for (const tools::Backend &backend : all) {
    if (backend.name == name)
      found = &backend;
    if (backend.missing.empty())
      listed.push_back(backend.name);
  }
  for (size_t i = 0; i < listed.size(); ++i)
    names += (i == 0 ? "" : i + 1 == listed.size() ? " or " : ", ") + listed[i];
  return found;
}

bool tools::makeInputs(const EntryPoint &entry, const RunOptions &options,
                       std::vector<HostTensor> &inputs, std::string &error) {
  inputs.clear();
  if (!options.inputs.empty() && options.inputs.size() != entry.inputs.size()) {
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
      auto text = [](rt::DType dtype, const std::vector<int64_t> &shape) {
        std::string s =
            std::string(rt::stringifyDType(dtype)) + " tensor of shape [";
        for (size_t d = 0; d < shape.size(); ++d)
          s += (d ? ", " : "") + std::to_string(shape[d]);
        return s + "]";
      };
      error = options.inputs[i] + ": input " + std::to_string(i) + " of " +
              entry.name + " must be a " +
              text(spec.dtype, spec.globalShape) + " (its global shape); " +
              "the file holds a " + text(t.dtype, t.shape);
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
    bool isFloat = rt::isFloat(entry.inputs[i].dtype);
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
                          bool &isRoot, double *blockedSeconds) {
  int64_t size = 1;
  for (int64_t s : artifact.getMeshShape())
    size *= s;
  if (options.ranks && options.ranks != size)
    return Status::error("the program's mesh has " + std::to_string(size) +
                         " devices but --ranks is " +
                         std::to_string(options.ranks));
  isRoot = true;
  std::string names;
  const Backend *backend = lookupBackend(options.backend, names);
  if (!backend)
    return Status::error("unknown backend '" + options.backend + "' (" +
                         names + ")");
  double *blocked = backend->reportsBlocked ? blockedSeconds : nullptr;
  if (backend->rankThreads)
    return runThreaded(artifact, entry, inputs, outputs, options.timeout,
                       &seconds, backend->rankThreads, blocked);
  if (!backend->connect)
    return Status::error(backend->missing);
  std::string error;
  std::unique_ptr<rt::Communicator> comm =
      backend->connect(artifact.getMeshShape(), options.timeout, error);
  if (!comm)
    return Status::error(error);
  isRoot = comm->getRank() == 0;
  return runOnCommunicator(artifact, entry, *comm, inputs, outputs, &seconds,
                           blocked);
}

bool tools::initMpiIfRequested(int &argc, char **&argv, const char *tool,
                               bool &initialized) {
  initialized = false;
  // mpi, and nccl unless the file store is asked for (SHARDX_STORE_DIR).
  bool want = false;
  const char *store = std::getenv("SHARDX_STORE_DIR");
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], next = i + 1 < argc ? argv[i + 1] : "";
    std::string backend = arg.rfind("--backend=", 0) == 0 ? arg.substr(10)
                          : arg == "--backend"            ? next
                                                          : "";
    if (backend == "mpi" || (backend == "nccl" && !(store && *store)))
      want = true;
  }
  if (!want)
    return true;
  auto initProcesses = getBackends().initProcesses;
  if (!initProcesses)
    return true;
  Status s = initProcesses(&argc, &argv);
  if (!s) {
    std::fprintf(stderr, "%s: error: %s\n", tool, s.message().c_str());
    return false;
  }
  initialized = true;
  return true;
}

void tools::finalizeMpiIfInitialized(bool initialized) {
  if (initialized && getBackends().finalizeProcesses)
    getBackends().finalizeProcesses();
}

void tools::printVerdict(const Difference &d) {
  if (d.mismatches)
    std::printf(", %lld of %lld differ", static_cast<long long>(d.mismatches),
                static_cast<long long>(d.elements));
  if (d.bothNonFinite)
    std::printf(", %lld of %lld NaN/Inf in both runs",
                static_cast<long long>(d.bothNonFinite),
                static_cast<long long>(d.elements));
  const char *verdict = d.mismatches         ? "MISMATCH"
                        : !d.withinTolerance ? "NOT FINITE"
                                             : "ok";
  std::printf(" %s\n", verdict);
}

void tools::defaultTolerance(rt::DType dtype, double &rtol, double &atol) {
  rtol = atol = 0; // integers and booleans: exact
  switch (dtype) {
  case rt::DType::F32:
    rtol = 1e-4;
    atol = 1e-5;
    return;
  case rt::DType::F64:
    rtol = 1e-10;
    atol = 1e-12;
    return;
  case rt::DType::BF16:
    // A few units of bf16's 2^-8 roundoff (docs/Compiler.md, "Mixed
    // precision").
    rtol = 3e-2;
    atol = 1e-2;
    return;
  case rt::DType::F16:
    rtol = 4e-3;
    atol = 1e-3;
    return;
  case rt::DType::I32:
  case rt::DType::I64:
  case rt::DType::I16:
  case rt::DType::I8:
  case rt::DType::I1:
  case rt::DType::Index:
    return;
  }
}

const EntryPoint *tools::findEntry(const Artifact &artifact,
                                   const std::string &path,
                                   const std::string &name,
                                   std::string &error) {
  const std::vector<EntryPoint> &entries = artifact.getEntryPoints();
  if (entries.empty()) {
    error = path + " has no entry points (its program has no public "
                   "function)";
    return nullptr;
  }
  if (name.empty())
    return &entries.front();
  if (const EntryPoint *entry = artifact.lookup(name))
    return entry;
  std::string names;
  for (const EntryPoint &e : entries)
    names += (names.empty() ? "" : ", ") + e.name;
  error =
      "no entry point '" + name + "' in " + path + " (it has " + names + ")";
  return nullptr;
}

bool tools::checkRunOptions(const RunOptions &options, std::string &error) {
  if (!(options.timeout > 0) || !std::isfinite(options.timeout)) {
    error = "--timeout must be a positive number of seconds, got " +
            std::to_string(options.timeout);
    return false;
  }
  return true;
}

int tools::runExecutor(const ExecArgs &args, const char *tool,
                       bool finalizeMpi) {
  auto fail = [&](const std::string &message) {
    std::fprintf(stderr, "%s: error: %s\n", tool, message.c_str());
    return 1;
  };
  std::string error;
  if (!checkRunOptions(args.options, error))
    return fail(error);
  std::unique_ptr<Artifact> artifact = Artifact::load(args.artifactPath, error);
  if (!artifact)
    return fail(error);
  const EntryPoint *entry =
      findEntry(*artifact, args.artifactPath, args.options.entry, error);
  if (!entry)
    return fail(error);
  std::vector<HostTensor> inputs, outputs;
  if (!makeInputs(*entry, args.options, inputs, error))
    return fail(error);
  using ConfigFn = void (*)(int64_t);
  using TimesFn = int64_t (*)(double *, int64_t);
  ConfigFn residentConfig = nullptr;
  TimesFn residentTimes = nullptr;
  if (args.resident) {
    residentConfig = reinterpret_cast<ConfigFn>(
        artifact->lookupSymbol("shardx_rt_cuda_resident_config"));
    residentTimes = reinterpret_cast<TimesFn>(
        artifact->lookupSymbol("shardx_rt_cuda_resident_times"));
    if (!residentConfig || !residentTimes ||
        !artifact->lookupSymbol("shardx_entry_" + entry->name + "_resident"))
      return fail("--resident needs a --target=cuda artifact with "
                  "shardx_entry_" +
                  entry->name + "_resident (" + args.artifactPath +
                  " has none: a CPU artifact, or one compiled before "
                  "resident entries)");
    residentConfig(args.repeat);
    artifact->setEntrySuffix("_resident");
  }
  double seconds = 0;
  bool isRoot = true;
  std::vector<double> times;
  int64_t calls = args.resident ? 1 : args.repeat > 1 ? args.repeat + 1 : 1;
  for (int64_t run = 0; run < calls; ++run) {
    outputs.clear();
    Status s = runArtifact(*artifact, *entry, args.options, inputs, outputs,
                           seconds, isRoot);
    if (!s)
      return fail(s.message());
    // A failed index check: the outputs were computed from safe indices,
    // not the given ones, so none is written or compared. Every rank reads
    // the same code and ends here, MPI's processes included.
    if (Status checked = checkIndexCode(*entry, outputs); !checked) {
      if (isRoot)
        fail(checked.message());
      finalizeMpiIfInitialized(finalizeMpi);
      return 1;
    }
    dropIndexCode(*entry, outputs);
    if (run > 0 || args.repeat == 1 || args.resident)
      times.push_back(seconds);
  }
  if (args.resident) {
    // The device runs' own times (without the staging copies).
    times.assign(static_cast<size_t>(std::max<int64_t>(args.repeat, 1)), 0);
    int64_t have = residentTimes(times.data(), int64_t(times.size()));
    times.resize(static_cast<size_t>(std::min<int64_t>(have, times.size())));
    if (times.empty())
      return fail("the resident entry recorded no runs");
  }
  std::sort(times.begin(), times.end());
  seconds = times[times.size() / 2];
  if (isRoot) {
    std::printf("%s: %zu outputs in %.3f ms", entry->name.c_str(),
                outputs.size(), seconds * 1e3);
    if (args.resident)
      std::printf(" (device-resident: inputs staged once, median of %lld "
                  "runs after a warm-up)",
                  static_cast<long long>(args.repeat));
    else if (args.repeat > 1)
      std::printf(" (median of %lld runs after a warm-up)",
                  static_cast<long long>(args.repeat));
    std::printf("\n");
    if (!args.outDir.empty())
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string path = args.outDir + "/" + entry->name + ".out" +
                           std::to_string(i) + ".npy";
        if (!writeNpy(path, outputs[i], error))
          return fail(error);
      }
    if (!args.expected.empty()) {
      if (args.expected.size() != outputs.size())
        return fail(std::to_string(args.expected.size()) +
                    " expected outputs given for " +
                    std::to_string(outputs.size()) + " outputs");
      bool passed = true;
      for (size_t i = 0; i < outputs.size(); ++i) {
        HostTensor want;
        if (!readNpy(args.expected[i], want, error))
          return fail(error);
        double rtol, atol;
        defaultTolerance(outputs[i].dtype, rtol, atol);
        if (rt::isFloat(outputs[i].dtype)) {
          rtol = args.rtol >= 0 ? args.rtol : rtol;
          atol = args.atol >= 0 ? args.atol : atol;
        }
        Difference d = compare(outputs[i], want, rtol, atol);
        if (want.dtype != outputs[i].dtype) {
          d.withinTolerance = false;
          d.mismatches = d.elements;
        }
        std::printf("output %zu: max abs err %.3g, max rel err %.3g "
                    "(rtol %g, atol %g)",
                    i, d.maxAbs, d.maxRel, rtol, atol);
        printVerdict(d);
        passed &= d.withinTolerance;
      }
      std::printf("check %s\n", passed ? "passed" : "FAILED");
      if (!passed)
        return 1;
    }
  }
  finalizeMpiIfInitialized(finalizeMpi);
  return 0;
}
