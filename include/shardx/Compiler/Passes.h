//===- Passes.h - ShardX code generation passes -----------------*- C++ -*-===//
//
// Part of ShardX.
//
// The code generation passes (Passes.td) and the two target pipelines built
// from them (lib/Compiler/Pipelines.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_COMPILER_PASSES_H
#define SHARDX_COMPILER_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <string>

namespace mlir::shardx {

struct OutlineStats;

#define GEN_PASS_DECL
#include "shardx/Compiler/Passes.h.inc"

/// `shardx-outline-kernels` that adds what it did to `*stats`.
std::unique_ptr<Pass> createOutlineKernelsPass(OutlineStats *stats);

/// The options of the target pipelines.
struct CodegenPipelineOptions {
  /// Matmul-family ops become OpenBLAS calls (the cpu target; else loops).
  bool blas = true;
  /// The GPU architecture and the libdevice of the cuda target.
  std::string gpuChip = "sm_90";
  std::string libdevice;
  /// Where `shardx-outline-kernels` reports (the cpu target), if anywhere.
  OutlineStats *outlineStats = nullptr;
  /// Activation recomputation: "none", "selective", "aggressive",
  /// "budget" with `recomputeBudget` bytes per rank, or "plan" (each
  /// function's `shardx.recompute`) (`shardx-recompute-activations`).
  std::string recompute = "plan";
  int64_t recomputeBudget = -1;
};

/// The cpu target from a local program on tensors to the LLVM dialect:
/// widened accumulation, the program description, entry points, the
/// common bufferization, BLAS calls, deallocation, kernels outlined, loops
/// and the lowering to LLVM (`shardx-codegen-cpu`).
void buildCpuCodegenPipeline(OpPassManager &pm,
                             const CodegenPipelineOptions &options);
/// Its two halves: up to the kernels outlined (`shardx-outline-kernels`,
/// on buffers), then the loops and the lowering to the LLVM dialect.
/// compileModule looks kernels up in the kernel cache between them, so that
/// only the kernels it lacks are lowered.
void buildCpuKernelsPipeline(OpPassManager &pm,
                             const CodegenPipelineOptions &options);
void buildCpuKernelLoweringPipeline(OpPassManager &pm);

/// The cuda target to the LLVM dialect with the kernels' PTX embedded
/// (`shardx-codegen-cuda`). The context needs the NVVM target and the LLVM
/// IR translations registered (compileModule does it).
void buildCudaCodegenPipeline(OpPassManager &pm,
                              const CodegenPipelineOptions &options);

/// The targets' common start (in both pipelines): the collectives become
/// runtime calls, the meshes go, tensor ops are fused, forward values are
/// recomputed where `recompute` says, and the program is bufferized. With
/// `narrowGemmOperands` (the cuda target), GEMMs of widened bf16/f16 values
/// read the narrow values (shardx-narrow-gemm-operands). `recomputeBudget`:
/// bytes per rank for the "budget" policy (-1 otherwise). `contractions`:
/// what the target makes of contractions after bufferization (`blas`,
/// `cublas` or `loops`), which the "budget" policy's model follows.
/// `scatterLoops`: `tensor.scatter` becomes a loop over its indices (false
/// for the cuda target, whose host code runs no loops over device buffers:
/// a masked linalg.generic, shardx-decompose-for-codegen).
/// `maxFusedOperandBytes`: fusion's bound on an op's memref descriptor bytes
/// (shardx-fuse-tensor-ops{max-operand-bytes}; 0 none).
void buildBufferizationPipeline(OpPassManager &pm,
                                const std::string &recompute = "none",
                                bool narrowGemmOperands = false,
                                int64_t recomputeBudget = -1,
                                StringRef contractions = "blas",
                                bool scatterLoops = true,
                                int64_t maxFusedOperandBytes = 0);

/// The most bytes of parameters a kernel of PTX ISA 8.0 (the cuda target's
/// `+ptx80`) may take; from 8.1 on sm_70 and later, 32764.
constexpr int64_t kPtx80KernelParamBytes = 4352;
/// What follows `shardx-recompute-activations` up to the freeing of buffers
/// (bufferization, the library calls `contractions` names, deallocation):
/// the buffer program whose memory model the "budget" policy evaluates.
void buildRecomputeBudgetModelPipeline(OpPassManager &pm,
                                       StringRef contractions);

#define GEN_PASS_REGISTRATION
#include "shardx/Compiler/Passes.h.inc"

/// Registers the code generation passes, the conversion passes they use and
/// the two pipelines.
void registerCompilerPasses();

} // namespace mlir::shardx

#endif // SHARDX_COMPILER_PASSES_H
