//===- shardx-compile.cpp - Compile a ShardX program to an artifact -------===//
//
// Part of ShardX.
//
// shardx-compile in.mlir -o model.so [--emit=so|obj|llvm|mlir] [--unsharded]
//
// Reads a program on tensors, lowers it for the CPU and writes a shared
// object that exports one C entry point per public function plus the
// program description `shardx_program_info` (docs/Compiler.md).
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/InitAll.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "shardx/Report/Progress.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::OptionCategory toolOptions("shardx-compile options");
static llvm::cl::opt<std::string> inputFile(llvm::cl::cat(toolOptions), llvm::cl::Positional,
                                            llvm::cl::desc("<input.mlir>"),
                                            llvm::cl::init("-"));
static llvm::cl::opt<std::string>
    outputFile(llvm::cl::cat(toolOptions), "o", llvm::cl::desc("output file"), llvm::cl::value_desc("path"),
               llvm::cl::Required);
static llvm::cl::opt<std::string>
    emit(llvm::cl::cat(toolOptions), "emit", llvm::cl::desc("output kind: so (default), obj, llvm, mlir, ptx "
                        "(--target=cuda)"),
         llvm::cl::init("so"));
static llvm::cl::opt<std::string>
    cpu(llvm::cl::cat(toolOptions), "cpu", llvm::cl::desc("target CPU (default: host)"),
        llvm::cl::init("host"));
static llvm::cl::opt<std::string>
    target(llvm::cl::cat(toolOptions), "target",
           llvm::cl::desc("cpu (default) or cuda (NVIDIA GPUs; --emit=ptx "
                          "writes the device code)"),
           llvm::cl::init("cpu"));
static llvm::cl::opt<std::string>
    gpuChip(llvm::cl::cat(toolOptions), "gpu-chip",
            llvm::cl::desc("GPU architecture of --target=cuda (default: "
                           "sm_90)"),
            llvm::cl::init("sm_90"));
static llvm::cl::opt<std::string> gpuBinary(
    llvm::cl::cat(toolOptions), "gpu-binary",
    llvm::cl::desc("kernels of --target=cuda: fatbin (compiled for "
                   "--gpu-chip by the CUDA toolkit's ptxas, with the PTX), "
                   "ptx (compiled by the driver at the first call) or auto "
                   "(default: fatbin where ptxas and fatbinary are found)"),
    llvm::cl::init("auto"));
static llvm::cl::opt<bool>
    noBlas(llvm::cl::cat(toolOptions), "no-blas",
           llvm::cl::desc("lower matmuls to loops instead of OpenBLAS calls"),
           llvm::cl::init(false));
static llvm::cl::opt<std::string> recompute(
    llvm::cl::cat(toolOptions), "recompute",
    llvm::cl::desc("activation recomputation: none (default), selective "
                   "(elementwise forward values computed again before their "
                   "first backward reader; contraction and reduction results "
                   "kept), aggressive (also contractions and reductions "
                   "whose inputs the backward pass keeps anyway) or budget (a "
                   "greedy choice of aggressive's copies that brings the "
                   "modeled activation peak within --recompute-budget); "
                   "results bit for bit unchanged, docs/Compiler.md; "
                   "without this option each function's shardx.recompute, "
                   "the policy shardx-auto-shard chose to fit its memory "
                   "budget, else none"),
    llvm::cl::init("none"));
static llvm::cl::opt<std::string> recomputeBudget(
    llvm::cl::cat(toolOptions), "recompute-budget",
    llvm::cl::desc("--recompute=budget's modeled activation peak per rank: "
                   "bytes, or a number with KiB, MiB or GiB"),
    llvm::cl::value_desc("bytes"));
static llvm::cl::opt<std::string> ringAttentionBytes(
    llvm::cl::cat(toolOptions), "ring-attention-bytes",
    llvm::cl::desc("run an attention whose keys and values are gathered "
                   "along the sequence as ring attention where the gathered "
                   "keys and values take at least this many bytes per rank: "
                   "bytes, or a number with KiB, MiB or GiB, or never "
                   "(default: 32MiB; shardx-ring-attention, docs/Rules.md)"),
    llvm::cl::value_desc("bytes"), llvm::cl::init("32MiB"));
static llvm::cl::opt<int64_t> attentionPieceRows(
    llvm::cl::cat(toolOptions), "attention-piece-rows",
    llvm::cl::desc("an attention on one rank whose queries and keys are at "
                   "the same known positions (torch.arange's, unsharded) "
                   "runs by the pieces its causal mask shows, of at least "
                   "this many rows, at most 8 a side (0: whole; "
                   "docs/Rules.md)"),
    llvm::cl::init(128));
static llvm::cl::opt<unsigned>
    optLevel(llvm::cl::cat(toolOptions), "O", llvm::cl::Prefix,
             llvm::cl::desc("LLVM optimization level of the CPU code, -O0 "
                            "to -O3 (default: -O3; -O0 compiles a large "
                            "program many times faster, same rounding)"),
             llvm::cl::init(3));
static llvm::cl::opt<bool> unsharded(llvm::cl::cat(toolOptions), 
    "unsharded",
    llvm::cl::desc("compile the global (unsharded) program: drop layouts, "
                   "annotations and redistributions, which do not change "
                   "global values (default: run the shardx-spmd pipeline "
                   "when the program has layouts)"),
    llvm::cl::init(false));

static llvm::cl::opt<bool> scheduleCollectives(
    llvm::cl::cat(toolOptions), "schedule-collectives",
    llvm::cl::desc("split all-reduces, all-gathers and reduce-scatters "
                   "into start/wait and overlap them with compute "
                   "(shardx-spmd's schedule-collectives; default on for "
                   "--target=cpu, off for cuda: the CPU runtime runs starts "
                   "asynchronously only where each rank has a spare core, "
                   "see SHARDX_ASYNC_COLLECTIVES in docs/Runtime.md)"),
    llvm::cl::init(true));
static llvm::cl::opt<bool> printSchedule(
    llvm::cl::cat(toolOptions), "print-schedule",
    llvm::cl::desc("print, per function, the modeled communication and "
                   "exposed communication before and after scheduling"),
    llvm::cl::init(false));

static llvm::cl::opt<bool> verifyEach(
    llvm::cl::cat(toolOptions), "verify-each",
    llvm::cl::desc("run the IR verifier after every pass of the SPMD "
                   "pipeline and of code generation, as mlir-opt's "
                   "--verify-each does (default: once after the SPMD "
                   "pipeline, once after the kernel outlining and once "
                   "after the lowering to the LLVM dialect)"),
    llvm::cl::init(false));

static llvm::cl::opt<bool> timing(
    llvm::cl::cat(toolOptions), "timing",
    llvm::cl::desc("print where the time went (each pass of the SPMD "
                   "pipeline: propagation, reshard planning, localization; "
                   "code generation), like --mlir-timing"),
    llvm::cl::init(false));

static llvm::cl::opt<std::string> timingJson(
    llvm::cl::cat(toolOptions), "timing-json",
    llvm::cl::desc("write the --timing report as JSON (MLIR's timing "
                   "format) to this file"),
    llvm::cl::value_desc("path"), llvm::cl::init(""));

static llvm::cl::opt<bool> noKernelCache(
    llvm::cl::cat(toolOptions), "no-kernel-cache",
    llvm::cl::desc("compile every kernel, neither reading nor filling the "
                   "kernel cache ($SHARDX_KERNEL_CACHE, docs/Compiler.md)"),
    llvm::cl::init(false));

static llvm::cl::opt<bool> printBuildId(
    llvm::cl::cat(toolOptions), "print-build-id",
    llvm::cl::desc("print what identifies this compiler's output (this "
                   "build and the runtime archives artifacts link: file, "
                   "size and time of each) and exit; shardx.compile keys "
                   "its cache with it; the only argument)"),
    llvm::cl::init(false));

/// Prints the remarks and warnings of the passes (--print-schedule's
/// schedules, the planner's notes), which MLIR drops when no handler takes
/// them; errors go on to MLIR's own handler, as before.
static LogicalResult printRemarks(Diagnostic &diag) {
  if (diag.getSeverity() == DiagnosticSeverity::Error)
    return failure();
  auto printLoc = [](Location loc) {
    if (auto file = dyn_cast<FileLineColLoc>(loc))
      llvm::errs() << file.getFilename().getValue() << ":" << file.getLine()
                   << ":" << file.getColumn() << ": ";
    else
      llvm::errs() << loc << ": ";
  };
  printLoc(diag.getLocation());
  llvm::errs() << (diag.getSeverity() == DiagnosticSeverity::Warning
                       ? "warning: "
                       : "remark: ")
               << diag << "\n";
  for (Diagnostic &note : diag.getNotes()) {
    printLoc(note.getLocation());
    llvm::errs() << "note: " << note << "\n";
  }
  return success();
}

static bool hasLayouts(ModuleOp module) {
  bool found = false;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "shardx" &&
        !isa<mlir::shardx::MeshOp>(op))
      found = true;
    if (auto fn = dyn_cast<func::FuncOp>(op)) {
      for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
        found |= bool(fn.getArgAttr(i, "shardx.layout"));
      for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
        found |= bool(fn.getResultAttr(i, "shardx.layout"));
    }
  });
  return found;
}

/// A byte count option's value (--recompute-budget's, ...): a non-negative
/// integer, optionally with KiB, MiB or GiB. Failure with a message on
/// anything else.
static FailureOr<int64_t> parseBytes(llvm::StringRef text,
                                     llvm::StringRef option) {
  llvm::StringRef number = text.trim();
  int64_t scale = 1;
  for (auto [suffix, factor] :
       {std::pair<llvm::StringRef, int64_t>{"KiB", 1ll << 10},
        {"MiB", 1ll << 20},
        {"GiB", 1ll << 30}})
    if (number.consume_back(suffix)) {
      scale = factor;
      break;
    }
  uint64_t value = 0;
  if (number.trim().getAsInteger(10, value) ||
      value > uint64_t(INT64_MAX) / scale) {
    llvm::errs() << "shardx-compile: error: --" << option << "='" << text
                 << "' is not a number of bytes (a non-negative integer, "
                    "optionally with KiB, MiB or GiB)\n";
    return failure();
  }
  return int64_t(value) * scale;
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  std::unique_ptr<MLIRContext> context = mlir::shardx::createToolContext();
  ScopedDiagnosticHandler remarks(context.get(), printRemarks);
  // Alone, without the options a compile needs (-o).
  if (argc == 2 && llvm::StringRef(argv[1]) == "--print-build-id") {
    llvm::outs() << mlir::shardx::compilerBuildId() << "\n";
    return 0;
  }
  llvm::cl::HideUnrelatedOptions(toolOptions);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "ShardX compiler: a tensor program to a CPU shared object\n");
  int64_t budgetBytes = -1;
  if (recompute == "budget" && recomputeBudget.getNumOccurrences() == 0) {
    llvm::errs() << "shardx-compile: error: --recompute=budget needs "
                    "--recompute-budget=BYTES (the modeled activation peak "
                    "per rank to fit)\n";
    return 1;
  }
  if (recomputeBudget.getNumOccurrences()) {
    if (recompute != "budget") {
      llvm::errs() << "shardx-compile: error: --recompute-budget is for "
                      "--recompute=budget (got --recompute="
                   << recompute << ")\n";
      return 1;
    }
    FailureOr<int64_t> bytes = parseBytes(recomputeBudget, "recompute-budget");
    if (failed(bytes))
      return 1;
    budgetBytes = *bytes;
  }
  int64_t ringBytes = -1;
  if (ringAttentionBytes != "never") {
    FailureOr<int64_t> bytes =
        parseBytes(ringAttentionBytes, "ring-attention-bytes");
    if (failed(bytes))
      return 1;
    ringBytes = *bytes;
  }
  {
    // What can be refused before the work (a missing output directory was
    // found by the linker at the end).
    mlir::shardx::CompileOptions early;
    early.outputPath = outputFile;
    early.cpu = cpu;
    early.optLevel = optLevel;
    early.target = target;
    early.gpuChip = gpuChip;
    early.gpuBinary = gpuBinary;
    if (failed(mlir::shardx::checkCompileOptions(early)))
      return 1;
  }
  // Declared before the timing manager, which writes into it when it goes.
  std::unique_ptr<llvm::ToolOutputFile> timingFile;
  if (!timingJson.empty()) {
    std::error_code ec;
    timingFile = std::make_unique<llvm::ToolOutputFile>(
        timingJson, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      llvm::errs() << "shardx-compile: error: " << timingJson << ": "
                   << ec.message() << "\n";
      return 1;
    }
    timingFile->keep();
  }
  DefaultTimingManager timingManager;
  timingManager.setEnabled(timing || timingFile);
  if (timingFile)
    timingManager.setOutput(createOutputStrategy(
        DefaultTimingManager::OutputFormat::Json, timingFile->os()));
  TimingScope rootTiming = timingManager.getRootScope();
  ::shardx::Progress progress("shardx-compile");
  progress.step("parsing");
  OwningOpRef<ModuleOp> module;
  {
    TimingScope parseTiming = rootTiming.nest("parse");
    module = mlir::shardx::loadProgram(inputFile, *context, "shardx-compile");
  }
  if (!module)
    return 1;
  if (unsharded) {
    if (failed(mlir::shardx::stripToGlobalProgram(*module)))
      return 1;
  } else if (hasLayouts(*module)) {
    // The per-rank program: SPMD expansion first.
    progress.step("propagating layouts, planning reshards");
    TimingScope spmdTiming = rootTiming.nest("spmd pipeline");
    PassManager pm(context.get());
    mlir::shardx::SpmdPipelineOptions spmdOptions;
    // On by default for CPU artifacts: the runtime runs starts
    // asynchronously only where each rank has a spare core
    // (asyncCollectivesEnabled), else synchronously, so a scheduled program
    // costs what an unscheduled one does (bench/README.md, "Overlap").
    // Off by default for CUDA artifacts until their overlap is measured
    // across GPUs (the communicators run starts asynchronously: cuda-local
    // on its communication thread, nccl stream-ordered): an explicit
    // --schedule-collectives asks for it.
    spmdOptions.scheduleCollectives =
        scheduleCollectives &&
        (target != "cuda" || scheduleCollectives.getNumOccurrences() > 0);
    spmdOptions.printSchedule = printSchedule;
    // A grouped matmul's run of rows is a count the host reads: the cuda
    // target's host reads no device buffer.
    spmdOptions.groupedRowRuns = target != "cuda";
    spmdOptions.ringAttentionBytes = ringBytes;
    spmdOptions.attentionPieceRows = attentionPieceRows;
    mlir::shardx::buildSpmdPipeline(pm, spmdOptions);
    // The verifier runs once after the pipeline rather than after each of
    // its passes: on large programs a run costs about what a pass does.
    pm.enableVerifier(verifyEach);
    pm.enableTiming(spmdTiming);
    if (failed(pm.run(*module)) || (!verifyEach && failed(verify(*module))))
      return 1;
  }
  progress.step("generating code");
  mlir::shardx::CompileOptions options;
  options.outputPath = outputFile;
  options.emit = emit;
  options.cpu = cpu;
  options.blas = !noBlas;
  options.optLevel = optLevel;
  options.target = target;
  options.gpuChip = gpuChip;
  options.gpuBinary = gpuBinary;
  // Without --recompute, what the plan says (CompileOptions' "plan":
  // shardx.recompute on a function, shardx-auto-shard's choice).
  if (recompute.getNumOccurrences())
    options.recompute = recompute;
  options.recomputeBudget = budgetBytes;
  options.kernelCache = !noKernelCache;
  options.verifyEach = verifyEach;
  mlir::shardx::CodegenStats stats;
  options.stats = &stats;
  options.progress = [&](unsigned done, unsigned total) {
    progress.step("compiling kernels " + std::to_string(done) + "/" +
                  std::to_string(total));
  };
  LogicalResult compiled = success();
  {
    TimingScope codegenTiming = rootTiming.nest("codegen");
    options.timing = &codegenTiming;
    compiled = mlir::shardx::compileModule(*module, options);
  }
  progress.clear();
  if (timing && succeeded(compiled))
    llvm::errs() << "shardx-compile: " << stats.kernels << " kernels, "
                 << stats.uniqueKernels << " unique; " << stats.units
                 << " object units: " << stats.cachedUnits
                 << " from the kernel cache, " << stats.compiledUnits
                 << " compiled\n";
  return failed(compiled) ? 1 : 0;
}
