//===- Pipelines.cpp - The code generation pipelines and driver -----------===//
//
// Part of ShardX.
//
// The one place that strings code generation together: the cpu and cuda
// target pipelines on an OpPassManager (each step a pass of Passes.td or an
// upstream pass), registered as `shardx-codegen-cpu` and
// `shardx-codegen-cuda`, and compileModule, which runs one and writes what
// CompileOptions::emit asks for (emitArtifact, lib/Compiler/Artifact.cpp).
//
//===----------------------------------------------------------------------===//

#include "ObjectCache.h"
#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace mlir::shardx;

#ifndef SHARDX_CUDA_LIBDEVICE
#define SHARDX_CUDA_LIBDEVICE "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc"
#endif

namespace {

/// Appends the upstream passes of `text` (a pipeline without its anchor) to
/// `pm`. The texts are this file's own: a parse error is a bug here.
void addUpstream(OpPassManager &pm, StringRef text) {
  std::string error;
  llvm::raw_string_ostream os(error);
  if (failed(parsePassPipeline(text, pm, os)))
    llvm::report_fatal_error(llvm::Twine("bad code generation pipeline '") +
                             text + "': " + error);
}

/// Both targets' start: accumulation widened (bf16/f16 reductions in f32;
/// cuBLAS accumulates the cuda target's GEMMs in f32, the cpu target's are
/// loop nests), the program described, the entry points marked.
void addProgramStart(OpPassManager &pm, bool widenContractions) {
  pm.addPass(createWidenAccumulationPass({widenContractions}));
  pm.addPass(createRecordProgramInfoPass());
  pm.addPass(createPrepareEntryPointsPass());
}

LogicalResult writeFile(StringRef path, StringRef text) {
  std::error_code ec;
  llvm::ToolOutputFile out(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "error: " << path << ": " << ec.message() << "\n";
    return failure();
  }
  out.os() << text;
  out.keep();
  return success();
}

} // namespace

/// After recomputation: fresh tensors per writer, slices packed, then
/// one-shot bufferization.
static void addBufferize(OpPassManager &pm) {
  pm.addPass(createSplitSharedEmptyTensorsPass());
  pm.addPass(createPackSlicesAsConcatPass());
  addUpstream(pm, "one-shot-bufferize{bufferize-function-boundaries "
                  "allow-return-allocs-from-loops "
                  "function-boundary-type-conversion=identity-layout-map},"
                  "canonicalize,cse");
}

/// Contractions become library calls as `contractions` says (`blas`,
/// `cublas`, or `loops`: left to the kernels), then buffers are freed after
/// their last reader.
static void addContractionsAndDeallocation(OpPassManager &pm,
                                           StringRef contractions) {
  if (contractions == "blas")
    pm.addPass(createContractionsToBlasPass());
  else if (contractions == "cublas")
    pm.addPass(createContractionsToCublasPass());
  pm.addPass(createDeallocateBuffersPass());
}

void mlir::shardx::buildBufferizationPipeline(
    OpPassManager &pm, const std::string &recompute, bool narrowGemmOperands,
    int64_t recomputeBudget, StringRef contractions, bool scatterLoops,
    int64_t maxFusedOperandBytes) {
  // Halo exchanges become permutes, which the conversion lowers.
  pm.addPass(createLowerHalosPass());
  pm.addPass(createConvertShardXToRuntimePass());
  pm.addPass(createDropMeshesPass());
  // The cuda target calls the runtime's fused attention kernels.
  DecomposeForCodegenPassOptions decompose;
  decompose.scatterLoops = scatterLoops;
  decompose.attentionKernels = contractions == "cublas";
  pm.addPass(createDecomposeForCodegenPass(decompose));
  // A grouped matmul as one matmul per expert (its bounds read on the
  // host: not the cuda target's).
  if (contractions != "cublas")
    pm.addPass(createGroupedMatmulLoopsPass());
  addUpstream(pm, "func.func(convert-elementwise-to-linalg),canonicalize,cse");
  // Every integer division is a scalar or vector op from here on.
  pm.addPass(createGuardIntegerDivisionPass());
  // And every tensor.extract/insert reads or writes within its tensor.
  pm.addPass(createGuardTensorIndicesPass());
  // A GPU's elementwise kernels are bound by memory: math functions are
  // computed again in their readers rather than written and read back.
  pm.addPass(createFuseTensorOpsPass(
      {maxFusedOperandBytes, /*recomputeMath=*/contractions == "cublas"}));
  if (narrowGemmOperands)
    pm.addPass(createNarrowGemmOperandsPass());
  addUpstream(pm, "canonicalize,cse");
  // After the last CSE on tensors, which would merge the copies back. Under
  // `none` too: it honors the model's torch.utils.checkpoint regions.
  pm.addPass(createRecomputeActivationsPass(
      {recompute, recomputeBudget, contractions.str()}));
  addBufferize(pm);
}

void mlir::shardx::buildRecomputeBudgetModelPipeline(OpPassManager &pm,
                                                     StringRef contractions) {
  addBufferize(pm);
  addContractionsAndDeallocation(pm, contractions);
}

void mlir::shardx::buildCpuCodegenPipeline(
    OpPassManager &pm, const CodegenPipelineOptions &options) {
  buildCpuKernelsPipeline(pm, options);
  buildCpuKernelLoweringPipeline(pm);
}

void mlir::shardx::buildCpuKernelsPipeline(
    OpPassManager &pm, const CodegenPipelineOptions &options) {
  // Each layer's ops (inlined for the SPMD pipeline) back into one call of
  // one function per distinct body: the rest lowers a layer once.
  pm.addPass(createOutlineCallsPass());
  addProgramStart(pm, /*widenContractions=*/true);
  StringRef contractions = options.blas ? "blas" : "loops";
  buildBufferizationPipeline(pm, options.recompute,
                             /*narrowGemmOperands=*/false,
                             options.recomputeBudget, contractions);
  addContractionsAndDeallocation(pm, contractions);
  // One function per fused loop nest, identical ones merged: LLVM then
  // optimizes each unique kernel once, in parallel and through the kernel
  // cache, instead of the whole step as one function (emitArtifact).
  pm.addPass(createOutlineKernelsPass(options.outlineStats));
}

void mlir::shardx::buildCpuKernelLoweringPipeline(OpPassManager &pm) {
  // Loops LLVM vectorizes, in the kernels (the host unit is compiled at
  // -O0): scatters visit each index once, row reductions carry their
  // accumulators in registers, f32 exp/erf/tanh are polynomials, bf16/f16
  // convert without compiler builtins.
  pm.addPass(createLowerMaskedScattersPass({/*order=*/"cpu"}));
  pm.addPass(createLowerInnerReductionsPass());
  addUpstream(pm, "func.func(convert-linalg-to-loops)");
  pm.addPass(createApproximateMathPass());
  pm.addPass(createExpandNarrowFloatsPass());
  // Buffers come from the runtime's caching allocator
  // (lib/Runtime/cpu/BufferCache.cpp), which keeps large blocks for the
  // next run instead of mapping and faulting them in again.
  addUpstream(pm, "math-expand-ops{ops=rsqrt},convert-math-to-libm,"
                  "lower-affine,convert-scf-to-cf,expand-strided-metadata,"
                  "lower-affine");
  // A kernel's buffers as pointers, not descriptors: the host code's calls
  // pass one value per buffer instead of 3 + 2 * rank.
  pm.addPass(createKernelPointerArgsPass());
  addUpstream(pm, "finalize-memref-to-llvm{use-generic-functions},"
                  "convert-math-to-llvm,convert-arith-to-llvm,"
                  "convert-index-to-llvm,convert-func-to-llvm,"
                  "convert-cf-to-llvm,reconcile-unrealized-casts");
  // The host code (compiled at -O0) without the descriptors it builds only
  // to take apart.
  pm.addPass(createFoldDescriptorsPass());
}

void mlir::shardx::buildCudaCodegenPipeline(
    OpPassManager &pm, const CodegenPipelineOptions &options) {
  pm.addPass(createOutlineCallsPass());
  addProgramStart(pm, /*widenContractions=*/false);
  pm.addPass(createRecordStagingSignaturesPass());
  // Kernels take their buffers as descriptors, in at most 4352 bytes of
  // parameters (PTX ISA 8.0): fusion leaves 256 for the launch bounds and
  // the scalars a kernel captures.
  buildBufferizationPipeline(
      pm, options.recompute,
      /*narrowGemmOperands=*/true, options.recomputeBudget, "cublas",
      /*scatterLoops=*/false, kPtx80KernelParamBytes - 256);
  addContractionsAndDeallocation(pm, "cublas");
  pm.addPass(createPlaceBuffersOnDevicePass());
  pm.addPass(createLowerMaskedScattersPass({/*order=*/"gpu"}));
  pm.addPass(createParallelLoopsFirstPass());
  pm.addPass(createSplitColumnSumsPass());
  pm.addPass(createParallelizeFullSumsPass());
  pm.addPass(createWarpReductionsPass());
  pm.addPass(createWrapSerialOpsPass());
  // No canonicalization before tiling: it would drop the one-iteration
  // loops of shardx-wrap-serial-ops.
  addUpstream(pm, "func.func(convert-linalg-to-parallel-loops)");
  pm.addPass(createTileParallelLoopsPass());
  addUpstream(pm, "func.func(gpu-map-parallel-loops,"
                  "convert-parallel-loops-to-gpu)");
  pm.addPass(createCheckNoHostAccessPass());
  // Fold the launch bounds and the collapsed loops' trip counts into
  // constants and sink them into the launches, so that a kernel's index
  // arithmetic divides by constants (multiplications and shifts) instead
  // of by parameters (a 64-bit division in software per dim and element).
  // Before the dynamic offsets: canonicalization would fold their casts
  // back into static offsets, a kernel per bucket slot again.
  addUpstream(pm, "canonicalize,gpu-launch-sink-index-computations");
  pm.addPass(createDynamicLaunchOffsetsPass());
  addUpstream(pm, "gpu-kernel-outlining,canonicalize,cse");
  pm.addPass(createMergeKernelModulesPass());
  addUpstream(pm, "lower-affine,convert-scf-to-cf,expand-strided-metadata,"
                  "lower-affine,canonicalize,nvvm-attach-target{chip=" +
                      options.gpuChip + " features=+ptx80 O=3 l=" +
                      options.libdevice +
                      "},gpu.module(convert-gpu-to-nvvm,canonicalize,cse,"
                      "reconcile-unrealized-casts)");
  addUpstream(pm, "finalize-memref-to-llvm{use-generic-functions},"
                  "convert-arith-to-llvm,convert-index-to-llvm,"
                  "convert-func-to-llvm,convert-cf-to-llvm,gpu-to-llvm,"
                  "reconcile-unrealized-casts,gpu-module-to-binary{format=isa}");
  pm.addPass(createCheckPtxPass());
  pm.addPass(createAddStagingWrappersPass());
}

TimingScope mlir::shardx::nestTiming(TimingScope *parent, StringRef name) {
  return parent ? parent->nest(name) : TimingScope();
}

LogicalResult mlir::shardx::compileModule(ModuleOp module,
                                          const CompileOptions &options) {
  bool cuda = options.target == "cuda";
  if (!cuda && options.target != "cpu") {
    llvm::errs() << "error: unknown --target '" << options.target
                 << "' (cpu, cuda)\n";
    return failure();
  }
  CodegenPipelineOptions pipeline;
  pipeline.blas = options.blas;
  pipeline.gpuChip = options.gpuChip;
  pipeline.recompute = options.recompute;
  pipeline.recomputeBudget = options.recomputeBudget;
  OutlineStats outlined;
  pipeline.outlineStats = &outlined;
  PassManager pm(module.getContext());
  std::optional<CudaTools> cudaTools;
  if (cuda) {
    // Kernels are serialized through LLVM IR (NVVM) and the host code
    // embeds them (the GPU dialect's offloading translation).
    DialectRegistry registry;
    registerAllToLLVMIRTranslations(registry);
    NVVM::registerNVVMTargetInterfaceExternalModels(registry);
    module.getContext()->appendDialectRegistry(registry);
    pipeline.libdevice = options.libdevice;
    if (pipeline.libdevice.empty()) {
      const char *env = std::getenv("SHARDX_LIBDEVICE");
      pipeline.libdevice = env ? env : SHARDX_CUDA_LIBDEVICE;
    }
    if (!llvm::sys::fs::exists(pipeline.libdevice)) {
      llvm::errs() << "error: libdevice not found at '" << pipeline.libdevice
                   << "' (the CUDA toolkit's nvvm/libdevice/libdevice.10.bc; "
                      "set SHARDX_LIBDEVICE)\n";
      return failure();
    }
    if (failed(checkGpuBinaryKind(options.gpuBinary)))
      return failure();
    if (options.emit != "ptx" && options.gpuBinary != "ptx") {
      std::string error;
      FailureOr<std::optional<CudaTools>> found =
          findCudaTools(pipeline.libdevice, error);
      if (failed(found)) {
        llvm::errs() << "error: " << error << "\n";
        return failure();
      }
      if (!*found && options.gpuBinary == "fatbin") {
        llvm::errs() << "error: --gpu-binary=fatbin: no ptxas and fatbinary "
                        "in the CUDA toolkit of "
                     << pipeline.libdevice
                     << " or on the PATH (set SHARDX_PTXAS)\n";
        return failure();
      }
      cudaTools = *found;
    }
    buildCudaCodegenPipeline(pm, pipeline);
  } else {
    buildCpuKernelsPipeline(pm, pipeline);
  }
  {
    TimingScope lowerTiming = nestTiming(
        options.timing, cuda ? "lower to LLVM dialect" : "outline kernels");
    if (options.timing)
      pm.enableTiming(lowerTiming);
    pm.enableVerifier(options.verifyEach);
    if (failed(pm.run(module)) ||
        (!options.verifyEach && failed(verify(module))))
      return failure();
  }
  if (cuda) {
    if (options.emit == "ptx") {
      FailureOr<std::string> ptx = kernelPtx(module);
      return failed(ptx) ? failure() : writeFile(options.outputPath, *ptx);
    }
    if (cudaTools) {
      TimingScope ptxasTiming = nestTiming(options.timing, "ptxas");
      std::string error;
      if (failed(
              embedKernelFatbin(module, options.gpuChip, *cudaTools, error))) {
        // auto: the PTX the driver compiles, as without the tools (a ptxas
        // older than the PTX, a chip its toolkit does not know).
        bool required = options.gpuBinary == "fatbin";
        llvm::errs() << (required ? "error: " : "warning: ") << error
                     << (required ? "\n"
                                  : "\nwarning: the kernels are embedded as "
                                    "PTX (--gpu-binary=auto)\n");
        if (required)
          return failure();
      }
    }
    return emitArtifact(module, options, runtimeLibraries(cuda));
  }
  if (options.stats) {
    options.stats->kernels = outlined.outlined;
    options.stats->uniqueKernels = outlined.unique;
  }
  // Kernels whose objects the kernel cache holds become declarations here:
  // only the others and the host code are lowered, translated and compiled.
  CachedKernels cached;
  {
    TimingScope lookupTiming =
        nestTiming(options.timing, "kernel cache lookup");
    if (failed(takeCachedKernels(module, options, cached)))
      return failure();
  }
  {
    PassManager lowering(module.getContext());
    buildCpuKernelLoweringPipeline(lowering);
    TimingScope lowerTiming =
        nestTiming(options.timing, "lower to LLVM dialect");
    if (options.timing)
      lowering.enableTiming(lowerTiming);
    lowering.enableVerifier(options.verifyEach);
    if (failed(lowering.run(module)) ||
        (!options.verifyEach && failed(verify(module))))
      return failure();
  }
  return emitArtifact(module, options, runtimeLibraries(cuda), &cached);
}

namespace {

/// The pipelines' options on the command line (shardx-opt).
struct CpuCodegenCLOptions : PassPipelineOptions<CpuCodegenCLOptions> {
  Option<bool> blas{*this, "blas",
                    llvm::cl::desc("matmul-family ops become OpenBLAS calls"),
                    llvm::cl::init(true)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("activation recomputation: none, selective, aggressive, "
                     "budget or plan (each function's shardx.recompute, "
                     "shardx-auto-shard's choice)"),
      llvm::cl::init("plan")};
  Option<int64_t> recomputeBudget{
      *this, "recompute-budget",
      llvm::cl::desc("the budget policy's bytes per rank"), llvm::cl::init(-1)};
};

struct CudaCodegenCLOptions : PassPipelineOptions<CudaCodegenCLOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("the GPU architecture"),
                           llvm::cl::init("sm_90")};
  Option<std::string> libdevice{
      *this, "libdevice", llvm::cl::desc("the CUDA toolkit's libdevice"),
      llvm::cl::init(SHARDX_CUDA_LIBDEVICE)};
};

} // namespace

void mlir::shardx::registerCompilerPasses() {
  registerShardXCompilerPasses();
  registerShardXConversionPasses();
  PassPipelineRegistration<CpuCodegenCLOptions>(
      "shardx-codegen-cpu",
      "The cpu target's code generation, from a local program on tensors to "
      "the LLVM dialect (shardx-compile's, before the LLVM IR translation)",
      [](OpPassManager &pm, const CpuCodegenCLOptions &cl) {
        CodegenPipelineOptions options;
        options.blas = cl.blas;
        options.recompute = cl.recompute;
        options.recomputeBudget = cl.recomputeBudget;
        buildCpuCodegenPipeline(pm, options);
      });
  PassPipelineRegistration<CudaCodegenCLOptions>(
      "shardx-codegen-cuda",
      "The cuda target's code generation, from a local program on tensors to "
      "the LLVM dialect with the kernels' PTX embedded",
      [](OpPassManager &pm, const CudaCodegenCLOptions &cl) {
        CodegenPipelineOptions options;
        options.gpuChip = cl.chip;
        options.libdevice = cl.libdevice;
        buildCudaCodegenPipeline(pm, options);
      });
}
