//===- shardx-run.cpp - Compile, run and check a ShardX program -----------===//
//
// Part of ShardX.
//
// shardx-run in.mlir [--ranks N] [--backend threads|mpi] [--check]
//            [--inputs a.npy,b.npy | --seed S] [--rtol R] [--atol A]
//            [--allow-nan] [--entry F]
//
// Compiles the program twice: unsharded (layouts dropped) and sharded (the
// shardx-spmd pipeline), runs the unsharded one on one rank and the sharded
// one on N ranks with the same global inputs (each rank gets its shard by the
// input layouts), assembles the sharded outputs by the output layouts and,
// with --check, prints per output the max abs/rel error and exits 1 when an
// output differs beyond rtol/atol (numpy's allclose rule), is NaN or Inf in
// one run only, or is NaN (or the same Inf) in both runs (unless
// --allow-nan). A run whose index checks failed (a program the importer
// traced with them: docs/Importer.md, "Index checks") is an error that
// names the check, its outputs not compared.
//
// Random inputs are uniform in [-1, 1) except where the entry function's
// argument says otherwise: an optimizer state the importer marked
// `torch.state = "exp_avg_sq"` (and the like) is drawn in [0, 1), a
// `torch.state = "step"` counter is a whole number in [1, 100].
//
//===----------------------------------------------------------------------===//

#include "CollectiveTiming.h"
#include "ExecCommon.h"

#include "shardx/Compiler/Compiler.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/InitAll.h"
#include "shardx/Report/Progress.h"
#include "shardx/Report/Report.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>

using namespace mlir;
using namespace mlir::shardx;
namespace cl = llvm::cl;
using Artifact = exec::Artifact;
using HostTensor = exec::HostTensor;

static cl::OptionCategory toolOptions("shardx-run options");
static cl::opt<std::string> inputFile(cl::cat(toolOptions), cl::Positional, cl::desc("<in.mlir>"),
                                      cl::Required);
static cl::opt<int64_t> ranks(cl::cat(toolOptions), "ranks", cl::desc("number of ranks"),
                              cl::init(0));
static cl::opt<std::string> backend(cl::cat(toolOptions), "backend",
                                    cl::desc("threads (default) or mpi"),
                                    cl::init("threads"));
static cl::opt<bool> check(cl::cat(toolOptions), "check",
                           cl::desc("compare with the unsharded program"));
static cl::opt<bool> allowNan(
    cl::cat(toolOptions), "allow-nan",
    cl::desc("with --check, accept outputs that are NaN (or the same Inf) "
             "in both runs; they are still counted"));
static cl::list<std::string>
    inputFiles(cl::cat(toolOptions), "inputs", cl::CommaSeparated,
               cl::desc("global inputs as .npy files (default: random)"));
static cl::opt<uint64_t> seed(cl::cat(toolOptions), "seed", cl::desc("seed of the random inputs"),
                              cl::init(0));
static cl::opt<int64_t> intRange(cl::cat(toolOptions), "int-range",
                                 cl::desc("random integers are in [0, N)"),
                                 cl::init(2));
static cl::opt<double> rtolOpt(cl::cat(toolOptions), "rtol", cl::desc("relative tolerance"), cl::init(1e-4));
static cl::opt<double> atolOpt(cl::cat(toolOptions), "atol", cl::desc("absolute tolerance"), cl::init(1e-5));
static cl::opt<std::string> entryName(cl::cat(toolOptions), "entry", cl::desc("entry point"));
static cl::opt<double> timeout(cl::cat(toolOptions), "timeout",
                               cl::desc("collective timeout (s)"),
                               cl::init(60));
static cl::opt<unsigned> repeat(cl::cat(toolOptions), "repeat",
                                cl::desc("runs of each program; the median "
                                         "time is reported"),
                                cl::init(1));
static cl::opt<std::string> saveIo(
    cl::cat(toolOptions), "save-io",
    cl::desc("directory to write the global inputs (in<i>.npy) and, with "
             "--check, the unsharded outputs (ref<i>.npy) to: the "
             "references of scripts/gpu_check.sh"));
static cl::opt<std::string> keep(cl::cat(toolOptions), "keep",
                                 cl::desc("directory to keep the artifacts"));
static cl::opt<bool> timing(cl::cat(toolOptions), "timing",
                            cl::desc("print where the time went (compiling, "
                                     "each run), like --mlir-timing"));
static cl::opt<std::string>
    reportFile(cl::cat(toolOptions), "report",
               cl::desc("write the HTML sharding report (docs/Report.md) "
                        "with this run's times to this file"),
               cl::value_desc("out.html"));
static cl::opt<int64_t> ringAttentionBytes(
    cl::cat(toolOptions), "ring-attention-bytes",
    cl::desc("shardx-spmd's ring-attention-bytes: ring attention where the "
             "gathered keys and values take at least this many bytes per "
             "rank (-1: never)"),
    cl::init(32 * 1024 * 1024));
static cl::opt<int64_t> attentionPieceRows(
    cl::cat(toolOptions), "attention-piece-rows",
    cl::desc("shardx-spmd's attention-piece-rows: an attention on one rank "
             "at known positions runs by the pieces its causal mask shows, "
             "of at least this many rows (0: whole)"),
    cl::init(128));
static cl::opt<bool> bucketCollectives(
    cl::cat(toolOptions), "bucket-collectives",
    cl::desc("merge small all-reduces into buckets (shardx-spmd's "
             "bucket-collectives; default on)"),
    cl::init(true));

static cl::opt<bool> scheduleCollectives(
    cl::cat(toolOptions), "schedule-collectives",
    cl::desc("split all-reduces, all-gathers and reduce-scatters into "
             "start/wait and overlap them with compute (shardx-spmd's "
             "schedule-collectives; default on: the runtime runs starts "
             "asynchronously only where each rank has a spare core, see "
             "SHARDX_ASYNC_COLLECTIVES in docs/Runtime.md)"),
    cl::init(true));

/// Per argument of `entryName`, the values its random inputs take: from the
/// importer's `torch.state` argument attributes (the optimizer state's
/// PyTorch name).
static std::vector<exec::InputDomain> inputDomains(ModuleOp module,
                                                   StringRef entryName) {
  std::vector<exec::InputDomain> domains;
  auto fn = module.lookupSymbol<func::FuncOp>(entryName);
  if (!fn)
    return domains;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    auto state = fn.getArgAttrOfType<StringAttr>(i, "torch.state");
    domains.push_back(
        state ? exec::inputDomainOfTorchState(state.getValue().str())
              : exec::InputDomain::Any);
  }
  return domains;
}

static bool compileTo(ModuleOp source, bool sharded, const std::string &path) {
  OwningOpRef<ModuleOp> module(cast<ModuleOp>(source->clone()));
  if (sharded) {
    PassManager pm(module->getContext());
    mlir::shardx::SpmdPipelineOptions spmdOptions;
    spmdOptions.bucketCollectives = bucketCollectives;
    spmdOptions.scheduleCollectives = scheduleCollectives;
    spmdOptions.ringAttentionBytes = ringAttentionBytes;
    spmdOptions.attentionPieceRows = attentionPieceRows;
    mlir::shardx::buildSpmdPipeline(pm, spmdOptions);
    if (failed(pm.run(*module)))
      return false;
  } else if (failed(mlir::shardx::stripToGlobalProgram(*module))) {
    return false;
  }
  mlir::shardx::CompileOptions options;
  options.outputPath = path;
  return succeeded(mlir::shardx::compileModule(*module, options));
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  bool wantMpi = false;
  if (!tools::initMpiIfRequested(argc, argv, "shardx-run", wantMpi))
    return 1;
  std::unique_ptr<MLIRContext> context = mlir::shardx::createToolContext();
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv, "ShardX: compile, run, check\n");
  {
    // Before the compiles.
    tools::RunOptions early;
    early.timeout = timeout;
    std::string error;
    if (!tools::checkRunOptions(early, error)) {
      std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
      return 1;
    }
  }
  if (backend == "nccl" || backend == "cuda-local") {
    // shardx-run compiles for the CPU; the GPU backends run CUDA artifacts.
    std::fprintf(stderr,
                 "shardx-run: error: --backend %s runs CUDA artifacts, and "
                 "shardx-run compiles for the CPU: compile with shardx-compile "
                 "--target=cuda and run shardx-gpu-exec --backend %s (or "
                 "scripts/gpu_check.sh)\n",
                 backend.c_str(), backend.c_str());
    tools::finalizeMpiIfInitialized(wantMpi);
    return 1;
  }
  DefaultTimingManager timingManager;
  timingManager.setEnabled(timing);
  TimingScope rootTiming = timingManager.getRootScope();
  ::shardx::Progress progress("shardx-run");
  OwningOpRef<ModuleOp> module =
      mlir::shardx::loadProgram(inputFile, *context, "shardx-run");
  if (!module)
    return 1;

  SmallString<128> dir;
  if (!keep.empty()) {
    dir = keep;
    llvm::sys::fs::create_directories(dir);
  } else if (auto ec = llvm::sys::fs::createUniqueDirectory("shardx-run", dir)) {
    std::fprintf(stderr, "shardx-run: error: %s\n", ec.message().c_str());
    return 1;
  }
  std::string error;
  std::string tag = std::to_string(getpid());
  std::string shardedPath = (dir + "/sharded." + tag + ".so").str();
  std::string globalPath = (dir + "/unsharded." + tag + ".so").str();
  // From here on every way out removes the artifacts (unless --keep),
  // a failed compile's partial one included.
  auto removeArtifacts = [&] {
    if (keep.empty()) {
      llvm::sys::fs::remove(shardedPath);
      llvm::sys::fs::remove(globalPath);
      llvm::sys::fs::remove(dir);
    }
  };
  // An error: exit status 1. MPI is not ended: the ranks may not agree
  // that the run is over (as before the artifacts were removed here).
  auto fail = [&] {
    removeArtifacts();
    return 1;
  };
  // The run's end, which every rank reaches: MPI ended, `code` returned.
  auto finish = [&](int code) {
    removeArtifacts();
    tools::finalizeMpiIfInitialized(wantMpi);
    return code;
  };
  {
    progress.step("compiling the sharded program");
    TimingScope t = rootTiming.nest("compile sharded (spmd + codegen)");
    if (!compileTo(*module, /*sharded=*/true, shardedPath))
      return fail();
  }
  if (check) {
    progress.step("compiling the unsharded program");
    TimingScope t = rootTiming.nest("compile unsharded");
    if (!compileTo(*module, /*sharded=*/false, globalPath))
      return fail();
  }

  std::unique_ptr<Artifact> sharded = Artifact::load(shardedPath, error);
  if (!sharded) {
    std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
    return fail();
  }
  const exec::EntryPoint *entry =
      tools::findEntry(*sharded, inputFile, entryName, error);
  if (!entry) {
    std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
    return fail();
  }
  tools::RunOptions options;
  options.backend = backend;
  options.ranks = ranks;
  options.inputs.assign(inputFiles.begin(), inputFiles.end());
  options.domains = inputDomains(*module, entry->name);
  options.seed = seed;
  options.intRange = intRange;
  options.timeout = timeout;
  std::vector<HostTensor> inputs, outputs, expected;
  if (!tools::makeInputs(*entry, options, inputs, error)) {
    std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
    return fail();
  }
  if (!saveIo.empty()) {
    llvm::sys::fs::create_directories(saveIo);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!exec::writeNpy(saveIo + "/in" + std::to_string(i) + ".npy",
                          inputs[i], error)) {
        std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
        return fail();
      }
  }
  double shardedSeconds = 0, globalSeconds = 0;
  bool isRoot = true;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> times, blockedTimes;
  unsigned runs = std::max(1u, unsigned(repeat));
  TimingScope runTiming = rootTiming.nest("run sharded");
  for (unsigned r = 0; r < runs; ++r) {
    progress.step("running the sharded program" +
                  (runs > 1 ? " " + std::to_string(r + 1) + "/" +
                                  std::to_string(runs)
                            : std::string()));
    double blocked = 0;
    auto s = tools::runArtifact(*sharded, *entry, options, inputs, outputs,
                                shardedSeconds, isRoot, &blocked);
    if (!s) {
      std::fprintf(stderr, "shardx-run: error: %s\n", s.message().c_str());
      return fail();
    }
    // A failed index check (every rank reads the same code): no output
    // is compared, whatever --check says.
    if (auto checked = exec::checkIndexCode(*entry, outputs); !checked) {
      progress.clear();
      if (isRoot)
        std::fprintf(stderr, "shardx-run: error: %s\n",
                     checked.message().c_str());
      return finish(1);
    }
    times.push_back(shardedSeconds);
    blockedTimes.push_back(blocked);
  }
  shardedSeconds = median(times);
  runTiming.stop();
  progress.clear();
  int status = 0;
  if (isRoot) {
    int64_t n = 1;
    for (int64_t m : sharded->getMeshShape())
      n *= m;
    std::printf("%s: %lld ranks (%s), %zu outputs, %.3f ms\n",
                entry->name.c_str(), static_cast<long long>(n),
                backend.c_str(), outputs.size(), shardedSeconds * 1e3);
    // Time the ranks spent blocked in collectives and waits (mean over
    // ranks, median over runs): the communication compute did not hide.
    std::printf("exposed communication: %.3f ms\n",
                median(blockedTimes) * 1e3);
    std::printf("inputs: %s\n", tools::describeInputs(*entry, options).c_str());
    if (check) {
      std::unique_ptr<Artifact> global = Artifact::load(globalPath, error);
      if (!global) {
        std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
        return fail();
      }
      const exec::EntryPoint *gentry = global->lookup(entry->name);
      tools::RunOptions one = options;
      one.backend = "threads";
      one.ranks = 0;
      bool root = true;
      std::vector<double> gtimes;
      TimingScope globalTiming = rootTiming.nest("run unsharded");
      for (unsigned r = 0; r < runs; ++r) {
        progress.step("running the unsharded program");
        auto gs = tools::runArtifact(*global, *gentry, one, inputs, expected,
                                     globalSeconds, root);
        if (!gs) {
          std::fprintf(stderr, "shardx-run: error: unsharded run: %s\n",
                       gs.message().c_str());
          return fail();
        }
        if (auto checked = exec::checkIndexCode(*gentry, expected); !checked) {
          progress.clear();
          std::fprintf(stderr, "shardx-run: error: unsharded run: %s\n",
                       checked.message().c_str());
          return finish(1);
        }
        gtimes.push_back(globalSeconds);
      }
      globalSeconds = median(gtimes);
      globalTiming.stop();
      // The references, as shardx-exec writes outputs: less the check
      // code (as exec::dropIndexCode leaves them), for its --expect.
      for (size_t i = 0, ref = 0; !saveIo.empty() && i < expected.size(); ++i) {
        if (static_cast<int64_t>(i) == gentry->checkOutput)
          continue;
        if (!exec::writeNpy(saveIo + "/ref" + std::to_string(ref++) + ".npy",
                            expected[i], error)) {
          std::fprintf(stderr, "shardx-run: error: %s\n", error.c_str());
          return fail();
        }
      }
      progress.clear();
      std::printf("unsharded: 1 rank, %.3f ms\n", globalSeconds * 1e3);
      int64_t differ = 0, nonFinite = 0;
      for (size_t i = 0; i < outputs.size(); ++i) {
        auto d =
            exec::compare(outputs[i], expected[i], rtolOpt, atolOpt, allowNan);
        const std::string &layout = entry->outputs[i].layoutText;
        std::printf("output %zu%s%s: max abs err %.3g, max rel err %.3g", i,
                    layout.empty() ? "" : " ", layout.c_str(), d.maxAbs,
                    d.maxRel);
        tools::printVerdict(d);
        differ += d.mismatches != 0;
        nonFinite += d.bothNonFinite != 0;
        if (!d.withinTolerance)
          status = 1;
      }
      std::string summary;
      if (differ)
        summary = std::to_string(differ) + " of " +
                  std::to_string(outputs.size()) + " outputs differ";
      if (nonFinite)
        summary += (summary.empty() ? "" : ", ") + std::to_string(nonFinite) +
                   " of " + std::to_string(outputs.size()) +
                   " outputs NaN/Inf in both runs" +
                   (allowNan ? " (allowed by --allow-nan)"
                             : " (--allow-nan accepts them)");
      std::printf("%s%s%s\n", status ? "check FAILED" : "check passed",
                  summary.empty() ? "" : ": ", summary.c_str());
    }
  }
  if (isRoot && !reportFile.empty()) {
    progress.step("writing the report");
    TimingScope t = rootTiming.nest("report");
    OwningOpRef<ModuleOp> copy(cast<ModuleOp>(module->clone()));
    mlir::shardx::ReportExtras extras;
    extras.title = "ShardX sharding report: " + entry->name;
    int64_t n = 1;
    for (int64_t m : sharded->getMeshShape())
      n *= m;
    extras.runSummary = llvm::formatv(
        "shardx-run: {0} ranks ({1}), sharded {2:F3} ms{3} (median of {4})",
        n, backend, shardedSeconds * 1e3,
        check ? llvm::formatv(", unsharded {0:F3} ms", globalSeconds * 1e3).str()
              : std::string(),
        runs);
    if (backend == "threads") {
      // Once more with every collective timed, per rank.
      std::vector<std::string> axisNames;
      for (auto mesh : module->getOps<mlir::shardx::MeshOp>()) {
        if (std::optional<ArrayAttr> axes = mesh.getAxes())
          for (Attribute a : *axes)
            axisNames.push_back(cast<StringAttr>(a).getValue().str());
        break;
      }
      progress.step("timing the collectives");
      auto s = tools::measureCollectives(*sharded, *entry, inputs, axisNames,
                                         timeout, extras.measured);
      if (!s) {
        progress.clear();
        std::fprintf(stderr, "shardx-run: error: timed run: %s\n",
                     s.message().c_str());
        return fail();
      }
    }
    std::string fileError;
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(reportFile, &fileError);
    if (!file || failed(mlir::shardx::prepareForReport(*copy, extras)) ||
        failed(mlir::shardx::writeHtmlReport(*copy, extras, file->os()))) {
      progress.clear();
      std::fprintf(stderr, "shardx-run: error: cannot write the report %s%s\n",
                   reportFile.c_str(), fileError.empty() ? "" : (": " + fileError).c_str());
      return fail();
    }
    file->keep();
    progress.clear();
  }
  return finish(status);
}
