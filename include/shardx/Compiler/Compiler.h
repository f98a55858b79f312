//===- Compiler.h - Compile local programs to artifacts ---------*- C++ -*-===//
//
// Part of ShardX.
//
// Code generation: a program on tensors (func/linalg/tensor/arith/math, the
// output of SPMD expansion or an unsharded program) goes through the cpu or
// cuda target pipeline (Passes.h, lib/Compiler/Pipelines.cpp) to the LLVM
// dialect, and is linked with the ShardX runtime into a shared object (the
// artifact): OpenBLAS calls and kernels compiled by LLVM on the cpu target,
// cuBLAS calls and NVVM kernels on the cuda target. See docs/Compiler.md
// for the calling convention.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_COMPILER_COMPILER_H
#define SHARDX_COMPILER_COMPILER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <memory>

#include <optional>
#include <string>

namespace mlir {
class TimingScope;
} // namespace mlir

namespace mlir::shardx {

struct CachedKernels;

/// What code generation did (CompileOptions::stats).
struct CodegenStats {
  /// Linalg ops outlined into kernels, and the unique kernels among them.
  unsigned kernels = 0, uniqueKernels = 0;
  /// Object units (unique kernels + the host code), those found in the
  /// kernel cache and those compiled.
  unsigned units = 0, cachedUnits = 0, compiledUnits = 0;
  /// Kernel-cache entries evicted after the compile.
  unsigned evicted = 0;
};

struct CompileOptions {
  /// Where to write the result.
  std::string outputPath;
  /// What to write: "so" (artifact), "obj", "llvm" (LLVM IR) or "mlir"
  /// (the module after lowering to the LLVM dialect).
  std::string emit = "so";
  /// Target CPU for code generation ("host" or an LLVM CPU name).
  std::string cpu = "host";
  /// Lower matmul-family ops to OpenBLAS calls (else to loops).
  bool blas = true;
  /// LLVM optimization and code generation level of the CPU target, 0-3
  /// (like clang's -O). Level 3 costs most of the compile time of a large
  /// program; the rounding of the result is the same at every level (no
  /// fast-math flags are set).
  unsigned optLevel = 3;
  /// "cpu" (the host) or "cuda" (NVIDIA GPUs: kernels through MLIR's GPU
  /// path, GEMMs on cuBLAS, see docs/Compiler.md).
  std::string target = "cpu";
  /// The GPU architecture of the "cuda" target.
  std::string gpuChip = "sm_90";
  /// Activation recomputation: "none", "selective" (elementwise forward
  /// values computed again in the backward pass, contraction and
  /// reduction results kept) or "aggressive" (also contractions and
  /// reductions whose inputs the backward pass keeps anyway) or "budget"
  /// (a greedy choice of aggressive's copies that brings the modeled activation
  /// peak to `recomputeBudget` bytes per rank) or "plan" (each function's
  /// `shardx.recompute`, shardx-auto-shard's choice; none without one).
  std::string recompute = "plan";
  int64_t recomputeBudget = -1;
  /// libdevice for the "cuda" target's math functions; empty: the toolkit
  /// found at configure time (or $SHARDX_LIBDEVICE).
  std::string libdevice;
  /// The "cuda" target's kernels in the artifact: "fatbin" (the code of
  /// `gpuChip` that the toolkit's ptxas makes, in a fat binary with the PTX:
  /// the driver loads it without compiling; an error without ptxas and
  /// fatbinary, findCudaTools), "ptx" (the driver compiles it at the first
  /// call) or "auto" (fatbin where the tools are found, else ptx).
  std::string gpuBinary = "auto";
  /// Find and keep compiled kernels in the kernel cache
  /// (lib/Compiler/ObjectCache.h: $SHARDX_KERNEL_CACHE, $SHARDX_CACHE_DIR).
  bool kernelCache = true;
  /// Run the IR verifier after every pass of code generation (mlir-opt's
  /// --verify-each). Otherwise the module is verified once after each of
  /// the two pass managers (the kernels pipeline and the lowering): on a
  /// large program each verifier run costs about what a pass does.
  bool verifyEach = false;
  /// Where the code generation steps' times go (--timing), if anywhere.
  TimingScope *timing = nullptr;
  /// Filled with what code generation did, if set.
  CodegenStats *stats = nullptr;
  /// Called (under a lock) as each object unit is compiled: (done, total).
  std::function<void(unsigned, unsigned)> progress;
};

/// Checks the options a compile can be refused on before it starts: the
/// output's directory exists and is writable, the target, the optimization
/// level, the CPU and (for cuda) the GPU chip are ones LLVM knows. Prints
/// "error: ..." and fails otherwise.
LogicalResult checkCompileOptions(const CompileOptions &options);

/// A context with every dialect, extension and ShardX model the tools need
/// (the passes are registered too).
std::unique_ptr<MLIRContext> createToolContext();

/// Parses the program in `path` ("-": stdin), importing a program annotated
/// with upstream's `shard` dialect (shardx-import-shard). Prints
/// "<tool>: error: ..." or the diagnostics and returns null when it cannot
/// be read, parsed or imported.
OwningOpRef<ModuleOp> loadProgram(StringRef path, MLIRContext &context,
                                  StringRef tool);

/// Turns a program with layouts into its global (unsharded) form: layouts,
/// annotations, redistributions and meshes go (none changes a global value);
/// fails on per-rank ops.
LogicalResult stripToGlobalProgram(ModuleOp module);

/// Before bufferization: folds transposes into the ops that read them (GEMM
/// operands become transposed views) and into contractions' results, and
/// fuses elementwise chains into one loop nest (`shardx-fuse-tensor-ops`).
/// With `maxOperandBytes` > 0, no fusion makes an op whose distinct operands
/// take more bytes than that as memref descriptors (8 * (3 + 2 * rank)
/// each): the cuda target's kernels pass them as parameters, whose bytes
/// the PTX ISA bounds. With `recomputeMath`, multi-use producers with a math
/// function are computed again in the readers that read them whole
/// (isCheaperToRecompute).
LogicalResult fuseTensorOps(ModuleOp module, int64_t maxOperandBytes = 0,
                            bool recomputeMath = false);

/// Gives every use of a `tensor.empty`, and of a `linalg.fill` of one, its
/// own op (CSE merges them): one buffer shared by several destinations makes
/// bufferization copy it, and hides a GEMM's zero fill from the BLAS rewrite.
void splitSharedEmptyTensors(ModuleOp module);

/// Replaces each chain of `tensor.insert_slice`s that fills a fresh 1-D
/// tensor exactly, in order (a bucket of shardx-bucket-collectives), by one
/// `tensor.concat`: the same buffer and copies after bufferization, whose
/// analysis takes time quadratic in a chain's length (20 s for the 194
/// slices of a 32-layer GPT's bucket) and linear in a concat's operands.
void packSlicesAsConcat(ModuleOp module);

/// After bufferization: replaces every (batched) GEMM contraction on f32/f64
/// buffers, up to permutations of its operands and result, by a runtime
/// OpenBLAS call; a zero fill of the result right before it becomes beta = 0
/// (`shardx-contractions-to-blas`).
LogicalResult contractionsToBlasCalls(ModuleOp module);

/// After bufferization: frees each buffer of every function right after
/// its last use (lib/Compiler/Deallocs.cpp). Returns false, with the
/// reason in `why` and the module untouched, where a function is not
/// straight-line in its buffers (then the ownership-based pipeline runs).
bool placeDeallocs(ModuleOp module, std::string *why = nullptr);

/// What identifies this compiler's artifacts besides their input: this
/// build (file, size, time) and each runtime archive artifacts link
/// (`shardx-compile --print-build-id`; the JIT's cache key).
std::string compilerBuildId();
/// What an artifact of the CPU (or the CUDA) target links: the runtime
/// archives, and the libraries they need (lib/Compiler/RuntimeArchives.cpp).
/// The archives are the copies $SHARDX_RUNTIME_ARCHIVE
/// ($SHARDX_CUDA_RUNTIME_ARCHIVE) names, else those beside the running tool
/// (an install prefix's lib/, a wheel's _lib/), else this build's.
SmallVector<std::string> runtimeLibraries(bool cuda);

/// How lowerMaskedScatters orders a scatter's loops.
enum class ScatterOrder {
  /// The indices outermost, a row's columns inside (contiguous): the CPU.
  IndicesOuter,
  /// An scf.parallel over the columns, the indices in order inside each: a
  /// device thread per column, no atomics (the GPU).
  RowsParallel,
};

/// After bufferization: replaces every masked accumulation into rows of a
/// table (the importer's index_put with accumulate, embedding backward and
/// scatter_add: a reduction over the indices of `acc + select(row ==
/// index, value, 0)`) by the scatter it means, which visits each index once
/// instead of once per row (lib/Compiler/ScatterLoops.cpp). Returns how
/// many it replaced.
int64_t lowerMaskedScatters(ModuleOp module, ScatterOrder order);

/// After bufferization: replaces every linalg op on buffers whose reduction
/// loops are all inside its parallel loops by loops that carry the
/// accumulators in registers (scf.for iter_args), a float sum or product
/// marked `reassoc` so that LLVM vectorizes it (`shardx-lower-reductions`).
void lowerInnerReductions(ModuleOp module);

/// Replaces f32 `math.exp`, `math.erf` and `math.tanh` by MLIR's polynomial
/// approximations, which LLVM vectorizes (libm calls stay scalar)
/// (`shardx-approximate-math`).
LogicalResult approximateMath(ModuleOp module);

/// After bf16/f16 arithmetic and math are computed in f32 (upstream's
/// math-extend-to-supported-types and arith-emulate-unsupported-floats, the
/// first half of `shardx-expand-narrow-floats`): expands every conversion
/// from and to bf16/f16 into integer arithmetic (round to nearest even, as
/// PyTorch converts), so that CPU artifacts call no compiler builtin such as
/// `__truncsfbf2`.
LogicalResult expandNarrowFloatConversions(ModuleOp module);


/// The name prefix of outlined kernel functions (outlineKernels).
inline constexpr llvm::StringLiteral kKernelPrefix = "shardx_kernel_";

/// The name prefix of layer functions (`shardx-outline-calls`).
inline constexpr llvm::StringLiteral kCallPrefix = "shardx_call_";

/// What outlineKernels did: linalg ops outlined, unique kernels left.
struct OutlineStats {
  unsigned outlined = 0;
  unsigned unique = 0;
};

/// After bufferization: moves every linalg op on buffers into a private
/// kernel function of its own (its buffers and scalars as arguments, its
/// constants cloned in) called where the op was, and merges structurally
/// identical kernels into one, named `shardx_kernel_<hash of its IR>`
/// (`shardx-outline-kernels`). Code generation then compiles each unique
/// kernel once, in parallel, through the kernel cache (emitArtifact).
FailureOr<OutlineStats> outlineKernels(ModuleOp module);

/// Right before the conversions to the LLVM dialect: every memref argument
/// of an outlined kernel with a static shape and static strides becomes one
/// `!llvm.ptr`, to its buffer's element at the buffer's offset, instead of a
/// descriptor of 3 + 2 * rank scalars; the kernel rebuilds the descriptor
/// from its type and its callers pass the pointer. With `layerFunctions`, a
/// layer function's (`shardx_call_*`) such arguments do too where its body
/// never reads the buffer's allocated pointer, and its static results
/// become their allocated and aligned pointers
/// (`shardx-kernel-pointer-args`).
LogicalResult passKernelBuffersAsPointers(ModuleOp module,
                                          bool layerFunctions);

/// The printed form of a kernel (a function-like symbol op) with its name
/// left out, every printing flag fixed: equal for structurally identical
/// kernels (SSA names are numbered by position, locations not printed).
std::string canonicalKernelText(Operation *kernel);

/// The type a kernel takes a value of `type` as: a strided buffer's offset
/// becomes dynamic (a view of a bucket or a parameter slab has one static
/// offset per place, the same loop nest everywhere); shapes and strides
/// stay static, as the loops' bounds and addressing need them. Both
/// targets' kernels (shardx-outline-kernels, shardx-dynamic-launch-offsets).
Type kernelArgType(Type type);

/// Returns the JSON program description embedded in artifacts (entry points,
/// argument and result types, layouts, mesh) for `module` before lowering:
/// a shardx::exec::ProgramInfo (shardx/Exec/ProgramInfo.h) as its text.
/// Empty, after a diagnostic, when an entry point's element type is not one
/// the runtime has (rt::DType).
std::string describeProgram(ModuleOp module);

/// Lowers `module` (on tensors) and writes the requested output. Emits
/// diagnostics and returns failure on any error.
LogicalResult compileModule(ModuleOp module, const CompileOptions &options);

/// Marks the public functions as entry points: C wrappers and read-only
/// tensor arguments (shared by the targets).
void prepareEntryPoints(ModuleOp module);

/// A timing scope `name` under `parent`, or an inactive one when `parent` is
/// null (timing off): every step of code generation times itself this way.
TimingScope nestTiming(TimingScope *parent, StringRef name);


/// The module attribute that holds the program description
/// (`shardx-record-program-info`) until emitArtifact embeds it.
inline constexpr llvm::StringLiteral kProgramInfoAttr = "shardx.program_info";

/// From a module in the LLVM dialect: embeds the program description (the
/// kProgramInfoAttr attribute, removed) and adds the entry wrappers,
/// translates to LLVM IR and writes what `options.emit` asks for. An artifact
/// is split into one unit per kernel plus the host code, the units found in the
/// kernel cache or compiled in parallel, and linked with `libraries`
/// (lib/Compiler/Artifact.cpp). Kernels in `cached` (kernels already found in
/// the kernel cache by their MLIR and left as declarations,
/// lib/Compiler/ObjectCache.h) are linked from there; those of its `keys` are
/// kept under their MLIR keys.
LogicalResult emitArtifact(ModuleOp module, const CompileOptions &options,
                           ArrayRef<std::string> libraries,
                           const CachedKernels *cached = nullptr);

/// After bufferization: replaces every (batched) GEMM contraction on
/// buffers whose element type is one of `dtypes` (the runtime's names,
/// shardx/Runtime/DType.h; others are left alone) by a call of
/// `<gemm><dtype>` or `<batchedGemm><dtype>` taking (A, B, C, accumulate)
/// as strided views; a zero fill of C right before it becomes
/// accumulate = 0. contractionsToBlasCalls is this with the OpenBLAS names.
/// With `allowWidening`, a GEMM of bf16/f16 operands with an f32 result (what
/// shardx-narrow-gemm-operands makes) calls `<name><dtype>_f32`.
LogicalResult contractionsToGemmCalls(ModuleOp module, StringRef gemm,
                                      StringRef batchedGemm,
                                      ArrayRef<StringRef> dtypes,
                                      bool allowWidening = false);

/// The one gpu.module (then gpu.binary) of the cuda target's kernels.
inline constexpr llvm::StringLiteral kKernelModule = "shardx_kernels";

/// The PTX of the cuda target's kernel module after
/// gpu-module-to-binary{format=isa} (empty when the program has no kernel).
FailureOr<std::string> kernelPtx(ModuleOp module);

/// Success for a CompileOptions::gpuBinary value (auto, fatbin, ptx); else
/// prints an error saying which are.
LogicalResult checkGpuBinaryKind(StringRef kind);

/// The CUDA toolkit's programs that make the cuda target's fat binary.
struct CudaTools {
  std::string ptxas;
  std::string fatbinary;
};

/// ptxas and fatbinary: beside $SHARDX_PTXAS when set (a failure, with
/// `error` saying why, when they are not there), else in the toolkit of
/// `libdevice` (<root>/nvvm/libdevice/), else on the PATH; nullopt when
/// there are none.
FailureOr<std::optional<CudaTools>> findCudaTools(StringRef libdevice,
                                                  std::string &error);

/// Replaces the kernel module's PTX (kernelPtx) by a fat binary of that PTX
/// compiled for `chip` by ptxas and the PTX itself; nothing without
/// kernels. On failure (a tool failed: `error` says how) the PTX stays.
LogicalResult embedKernelFatbin(ModuleOp module, StringRef chip,
                                const CudaTools &tools, std::string &error);

} // namespace mlir::shardx

#endif // SHARDX_COMPILER_COMPILER_H
