//===- Passes.td - ShardX code generation passes -----------*- tablegen -*-===//
//
// Part of ShardX.
//
// Every step of code generation, after the SPMD pipeline: the targets'
// common bufferization, the CPU loop and kernel passes and the cuda
// target's device transforms. lib/Compiler/Pipelines.cpp strings them into
// the two target pipelines (`shardx-codegen-cpu`, `shardx-codegen-cuda`);
// each also runs alone in shardx-opt (test/Compiler, test/Gpu).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_COMPILER_PASSES_TD
#define SHARDX_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Both targets (lib/Compiler/Program.cpp, CpuOptimize.cpp, Deallocs.cpp)
//===----------------------------------------------------------------------===//

def RecordProgramInfoPass : Pass<"shardx-record-program-info", "ModuleOp"> {
  let summary = "Records the program description an artifact embeds";
  let description = [{
    Describes the program before lowering (entry points, argument and
    result types, layouts, the mesh, the output that holds the index
    checks' code: `describeProgram`) as the module's
    `shardx.program_info` string attribute, which emitArtifact moves into
    the artifact (`shardx_program_info`) and removes. The
    `shardx.index_checks` result attributes it has described are removed.
  }];
}

def PrepareEntryPointsPass : Pass<"shardx-prepare-entry-points", "ModuleOp"> {
  let summary = "Marks the public functions as entry points";
  let description = [{
    Public functions get C interface wrappers (`llvm.emit_c_interface`)
    and read-only tensor arguments (`bufferization.writable = false`).
  }];
}

def DropMeshesPass : Pass<"shardx-drop-meshes", "ModuleOp"> {
  let summary = "Erases the mesh declarations after the collectives are "
                "runtime calls";
  let description = [{
    `shardx.mesh` is compile-time information only; after
    `shardx-convert-to-runtime` nothing refers to it.
  }];
}

def GroupedMatmulLoopsPass
    : Pass<"shardx-grouped-matmul-loops", "ModuleOp"> {
  let summary = "Runs each grouped matmul as a loop over its experts of one "
                "matmul on the expert's rows";
  let description = [{
    The importer's `_grouped_mm` (importer/ops/grouped.py) is a contraction
    over every expert whose terms are masked by the row's group: E times the
    product's work. Each one becomes an `scf.for` over the experts whose
    body runs `linalg.matmul` on that expert's rows, their bounds counted
    from the groups at run time: the rows form `x[R, K] x w[E, K, N]` adds
    `x[lo:hi] w[e]` into rows `lo:hi` of the init; the weights form
    `x[K, R] x w[R, N] -> [E, K, N]` adds `x[:, lo:hi] w[lo:hi]` into
    `init[e]`. Rows past the last group keep their init. Only the order of
    the sums changes. Also shardx-localize's form on an expert-parallel
    rank: rows of a run-time count, the expert loop offset by the rank's
    first expert. Left masked: a run-time count of experts, and groups not
    known to be nondecreasing (the rewrite needs each expert's rows to be
    one run: the importer's `_row_groups`, or a slice of them along the
    rows, are). For the CPU target (the cuda target's host code reads no
    device buffer for the bounds).
  }];
  let dependentDialects = ["arith::ArithDialect", "linalg::LinalgDialect",
                           "scf::SCFDialect", "tensor::TensorDialect"];
}

def DecomposeForCodegenPass
    : Pass<"shardx-decompose-for-codegen", "ModuleOp"> {
  let summary = "Rewrites the tensor and linalg ops that bufferization and "
                "lowering have no path for into ops that have one";
  let description = [{
    The dialects a program may use include ops that one-shot bufferization
    or the lowering to LLVM does not handle: `tensor.gather`,
    `tensor.scatter`, `tensor.bitcast`, `linalg.pack`, `linalg.unpack` and
    the linalg ops with a decomposition (`linalg.softmax`, the Winograd
    transforms). Each becomes ops that compile:

    - `tensor.gather`: a `linalg.generic` over the result that reads each
      element with `tensor.extract` (an index out of the source's range,
      undefined behaviour for the op, reads 0: never outside the buffer);
    - `tensor.scatter`: a loop nest over the indices' batch dims that
      inserts each slice (`tensor.insert_slice`), or with
      `scatter-loops=false` (the cuda target, whose host code runs no
      loops over device buffers) a `linalg.generic` over the destination
      that takes, for each element, the source element whose coordinates
      match (the op's `unique` makes it at most one; this costs
      destination x indices). Out-of-range coordinates, undefined for the
      op, write nothing;
    - `tensor.bitcast`: an elementwise `linalg.generic` of `arith.bitcast`;
    - `linalg.pack` / `linalg.unpack`: pad, reshape and transpose
      (upstream's `lowerPack` / `lowerUnPack`);
    - ops with `AggregatedOpInterface`: their `decomposeOperation`;
    - `shardx.attention`, `attention_dq`, `attention_dkv`: batched GEMMs
      and elementwise ops on 3-D views of their tensors (the query heads
      of a key/value head stacked on the rows), the backward ops
      recomputing the probabilities from the log-sum-exp; where the scores
      of every key would take more than `attention-block-bytes`, over blocks
      of keys (the forward an online softmax across them, as flash
      attention's), so that one block's scores are alive at a time
      (lib/Compiler/DecomposeAttention.cpp). With `attention-kernels` (the
      cuda target) an attention op with `products` (bf16 or f16) whose head
      width is 32, 64 or 128 (and the same for the values) and whose
      positions, if any, are i64 becomes instead a call of the runtime's
      fused kernel, `shardx_rt_cuda_attention[_dq|_dkv]_<bf16|f16>`, on
      contiguous buffers of its tensors (lib/Runtime/cuda/Attention.cpp).
  }];
  let options = [
    Option<"scatterLoops", "scatter-loops", "bool", /*default=*/"true",
           "tensor.scatter as a loop over its indices (false: a masked "
           "linalg.generic over the destination)">,
    Option<"attentionBlockBytes", "attention-block-bytes", "int64_t",
           /*default=*/"33554432",
           "the attention ops over blocks of keys whose [N, M, keys] "
           "scores take at most this many bytes each (an online softmax "
           "across the blocks; 0: every key in one block)">,
    Option<"attentionKernels", "attention-kernels", "bool",
           /*default=*/"false",
           "attention ops with `products` as calls of the cuda runtime's "
           "fused attention kernels where their shapes allow">
  ];
  let dependentDialects = ["arith::ArithDialect", "bufferization::BufferizationDialect",
                           "func::FuncDialect", "linalg::LinalgDialect",
                           "math::MathDialect", "memref::MemRefDialect",
                           "scf::SCFDialect", "tensor::TensorDialect"];
}

def GuardIntegerDivisionPass
    : Pass<"shardx-guard-integer-division", "ModuleOp"> {
  let summary = "Makes integer division and remainder total: a zero divisor, "
                "and -1 dividing the most negative value, divide by 1";
  let description = [{
    `arith.divsi`, `divui`, `remsi`, `remui`, `ceildivsi`, `ceildivui` and
    `floordivsi` by 0, and the signed ones of the most negative value by
    -1, are undefined behaviour, and on x86 they kill the process (SIGFPE).
    A program's integers are data, so the divisor becomes 1 in those cases:
    `x / 0` is `x`, `x % 0` is 0, `MIN / -1` is `MIN` (the two's
    complement wrap; eager PyTorch's CPU kernels trap there too). The importer's programs check for a zero
    divisor first and report eager's error (docs/Importer.md); this pass is
    what keeps any program from crashing. Divisions by a constant other
    than 0 and -1 are left alone.
  }];
  let dependentDialects = ["arith::ArithDialect"];
}

def GuardTensorIndicesPass
    : Pass<"shardx-guard-tensor-indices", "ModuleOp"> {
  let summary = "Makes tensor.extract and tensor.insert total: out of range, "
                "an extract reads 0 and an insert writes nothing";
  let description = [{
    An index outside the tensor is undefined behaviour for `tensor.extract`
    and `tensor.insert`; lowered to loads and stores it reads or writes
    outside a buffer (SIGSEGV, or numbers from other memory). A program's
    indices are data, so each access whose indices are not known to be in
    range checks them (unsigned, so a negative index is out of range): an
    extract reads at index 0 and yields 0 there (a tensor with a dynamic dim
    reads under `scf.if`, since it may be empty), an insert is skipped
    (`scf.if`). Constant indices in range, `linalg.index` of a loop whose
    static range fits the dim, and an index clamped by its own range check
    (`select(%ok, %i, %k)`, `%ok` implying `%i` in range and `%k` in range:
    the decomposed gathers' form and this pass's own) are left alone. The importer's programs make
    their indices safe first and report eager's error (docs/Importer.md);
    this pass is what keeps any program from crashing, as the decomposed
    `tensor.gather` and `tensor.scatter` do (shardx-decompose-for-codegen).
  }];
  let dependentDialects = ["arith::ArithDialect", "scf::SCFDialect",
                           "tensor::TensorDialect"];
}

def FuseTensorOpsPass : Pass<"shardx-fuse-tensor-ops", "ModuleOp"> {
  let summary = "Folds transposes into the ops that read them and into "
                "contractions' results, and fuses elementwise chains";
  let description = [{
    An elementwise op read by several elementwise ops is computed again in
    each where its inputs take fewer bytes than its result and its body is
    arithmetic alone (a bf16 tensor widened to f32, a one-hot row made from
    indices): each reader reads the inputs instead of the written result.
    Copies and fusion alternate until no copy is made. With
    `recompute-math`, an op with a math function is copied too, into the
    readers that read it whole. An elementwise op
    between a reshape and the reshape that undoes it runs on the
    unreshaped tensors, and an element extracted from an elementwise op's
    result is computed from its operands' elements.

    With `max-operand-bytes`, a fusion stops where its op's distinct
    operands would take more bytes as memref descriptors (8 * (3 + 2 *
    rank) each) than that. The cuda target sets it below the PTX ISA's
    bound on a kernel's parameter bytes: without it, a deep model's
    gradient norm (one 0-d sum per parameter, added in a chain) fused into
    one kernel of hundreds of buffers, which no driver loads.
  }];
  let options = [
    Option<"maxOperandBytes", "max-operand-bytes", "int64_t",
           /*default=*/"0",
           "the most bytes of memref descriptors a fused op may read and "
           "write (0: no bound)">,
    Option<"recomputeMath", "recompute-math", "bool", /*default=*/"false",
           "also compute again in each reader an op with a math function "
           "(an erf, an exp) that the reader reads whole, not broadcast "
           "(the cuda target, whose elementwise kernels are bound by "
           "memory)">,
  ];
  let dependentDialects = ["linalg::LinalgDialect", "tensor::TensorDialect"];
}

def RecomputeActivationsPass
    : Pass<"shardx-recompute-activations", "ModuleOp"> {
  let summary = "Computes forward values again before their first backward "
                "reader (activation checkpointing)";
  let description = [{
    Uses the train-step phase the importer records in each op's location
    (`fused<"forward">`, `fused<"backward">`). `selective` copies
    elementwise kernels and reshapes whose inputs live into the backward
    pass anyway (contraction and reduction results are kept); `aggressive`
    also copies contractions and reductions whose inputs the backward pass
    keeps anyway. No copy lengthens a value's life; collectives are never
    repeated. Under every policy (`none` included), the forward ops the
    importer marks as recomputed by a `torch.utils.checkpoint` region
    (`fused<"shardx.checkpoint.K">` in their location) are copied before
    their first backward reader from the region's inputs, which stay alive.
    `budget` copies a greedy choice of `aggressive`'s candidates (most
    modeled bytes saved per iteration recomputed first) that brings the
    function's modeled activation peak (the memory model,
    shardx/Analysis/MemoryModel.h, of the buffer program the target makes
    of it, with contractions as `contractions` says) to at most `budget`
    bytes per rank; it warns when even all of them do not. `plan` applies
    each function's `shardx.recompute` attribute (`selective` or
    `aggressive`, the policy `shardx-auto-shard` chose to fit its memory
    budget; docs/Memory.md), and nothing to a function without one.
    Copies carry `shardx.recomputed`. The results are bit for bit those
    without recomputation. Runs on tensors after fusion.
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"none\"",
           "none, selective, aggressive, budget or plan (each function's "
           "shardx.recompute attribute)">,
    Option<"budget", "budget", "int64_t", /*default=*/"-1",
           "budget: the modeled per-rank activation peak to fit, in bytes">,
    Option<"contractions", "contractions", "std::string",
           /*default=*/"\"blas\"",
           "budget: what the target makes of contractions, blas, cublas or "
           "loops">,
  ];
}

def SplitSharedEmptyTensorsPass
    : Pass<"shardx-split-shared-empty-tensors", "ModuleOp"> {
  let summary = "Gives every user of a shared tensor.empty its own";
  let description = [{
    One-shot bufferization would otherwise copy the buffer of an empty
    tensor that several ops write into. Every reader of a zero fill of an
    empty tensor gets its own, right before it, so that
    `shardx-contractions-to-blas` finds each GEMM's zero fill (beta = 0).
  }];
  let dependentDialects = ["tensor::TensorDialect"];
}

def PackSlicesAsConcatPass : Pass<"shardx-pack-slices-as-concat", "ModuleOp"> {
  let summary = "Writes slices that tile a tensor as one concatenation";
  let dependentDialects = ["tensor::TensorDialect"];
}

def ContractionsToBlasPass : Pass<"shardx-contractions-to-blas", "ModuleOp"> {
  let summary = "Replaces (batched) GEMM contractions on buffers by runtime "
                "BLAS calls taking transposed views and folding zero fills";
  let dependentDialects = ["arith::ArithDialect", "func::FuncDialect",
                           "memref::MemRefDialect", "LLVM::LLVMDialect"];
}

def PlaceDeallocsPass : Pass<"shardx-place-deallocs", "ModuleOp"> {
  let summary = "Frees each buffer of a program function after its last use "
                "(straight-line functions; fails on the others)";
  let dependentDialects = ["memref::MemRefDialect"];
}

def DeallocateBuffersPass : Pass<"shardx-deallocate-buffers", "ModuleOp"> {
  let summary = "Frees every buffer: after its last use where the program "
                "is straight-line, else through MLIR's ownership-based "
                "deallocation";
  let description = [{
    `shardx-place-deallocs`; a program it cannot handle (control flow,
    buffers allocated in nested regions) goes through
    `ownership-based-buffer-deallocation` and its simplification instead.
    Copies of a buffer onto itself (left by bufferization, their two views
    merged by the CSE after it) are erased first.
  }];
  let dependentDialects = ["memref::MemRefDialect", "scf::SCFDialect",
                           "arith::ArithDialect",
                           "bufferization::BufferizationDialect"];
}

def OutlineCallsPass : Pass<"shardx-outline-calls", "ModuleOp"> {
  let summary = "Turns the inlined copies of a region call back into calls "
                "of one function per distinct local body";
  let description = [{
    The first pass of the cpu code generation. `shardx-inline-calls` marks
    the location of every call it inlines (`shardx.call.<k>`), so the ops
    of each inlined region call keep that mark through the SPMD pipeline.
    First each transpose or chunk that another call's ops read gets a copy
    right before each such reader, marked as it is (the reader's function
    then folds it into its GEMM or takes a view, rather than reading a
    copy that the writer's function materialized). Then every maximal run
    of consecutive ops of one call (constants skipped) with at least
    `min-ops` ops becomes a candidate function, taking the values the run
    reads and returning those used after it; constants, empty tensors and
    fills of them are not passed but made again right before each reader. Runs with the same printed body (local
    types, constants and collectives included) are one private function
    `shardx_call_<hash>`, and each run becomes a `func.call` of it, so code
    generation lowers a layer once however deep the model is. A run whose
    body no other run shares stays inline (the first layer, which holds the
    ops CSE shared across layers; a run cut by a collective that
    bucketing merged across calls). The marks are dropped from every
    location. A module without marks is left untouched.
  }];
  let options = [Option<"minOps", "min-ops", "unsigned", "8",
                        "the fewest ops a run needs to become a call">];
  let dependentDialects = ["func::FuncDialect"];
}

def OutlineKernelsPass : Pass<"shardx-outline-kernels", "ModuleOp"> {
  let summary = "Outlines every linalg op on buffers into a kernel function "
                "and merges structurally identical kernels";
  let dependentDialects = ["func::FuncDialect"];
}

def KernelPointerArgsPass
    : Pass<"shardx-kernel-pointer-args", "ModuleOp"> {
  let summary = "Passes each statically shaped buffer of an outlined kernel "
                "as one pointer instead of a memref descriptor";
  let description = [{
    Run on the cpu target right before the memref and func conversions to
    the LLVM dialect. A memref argument lowers to 3 + 2 * rank scalars
    (allocated and aligned pointer, offset, sizes, strides), which every
    call extracts from the caller's descriptor and the callee packs again.
    The sizes and strides of an outlined kernel's buffers are in its type
    (kernels are keyed by their shapes), so each argument of a
    `shardx_kernel_*` function whose memref type has a static shape and
    static strides becomes one `!llvm.ptr`: the element at the buffer's
    offset (the caller adds a dynamic offset to the aligned pointer). The
    kernel rebuilds its descriptor from the type (offset 0 for a dynamic
    one), so its loops address the same elements. With `layer-functions`
    (off in the cpu pipeline), a layer function's (`shardx_call_*`,
    shardx-outline-calls) static arguments become pointers alike where its
    body never reads the allocated pointer: every use, through views
    (casts, reinterpret casts, strided metadata, transposes, subviews,
    reshapes), is a load, a store, a copy, or a call of a kernel or of the
    runtime (`shardx_rt_*`, which reads the aligned pointer only); a
    dealloc, a return, another call or another op keeps that argument's
    descriptor. Its static results with a static offset become their
    allocated and aligned pointers, the caller rebuilding the descriptor.
    Other arguments and results, other functions (entry points, runtime
    calls) and functions used other than by `func.call` keep the
    descriptor ABI.

    ```mlir
    call @shardx_kernel_1(%v) : (memref<4x8xf32, strided<[8, 1], offset: ?>>) -> ()
    func.func private @shardx_kernel_1(%a: memref<4x8xf32, strided<[8, 1], offset: ?>>)
    ```
    becomes
    ```mlir
    %d = builtin.unrealized_conversion_cast %v : memref<...> to !llvm.struct<...>
    %p = llvm.extractvalue %d[1]   %o = llvm.extractvalue %d[2]
    %q = llvm.getelementptr %p[%o] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    call @shardx_kernel_1(%q) : (!llvm.ptr) -> ()
    func.func private @shardx_kernel_1(%q: !llvm.ptr) {
      %d = <descriptor of %q: sizes [4, 8], strides [8, 1], offset 0>
      %a = builtin.unrealized_conversion_cast %d : !llvm.struct<...> to memref<...>
    ```
  }];
  let dependentDialects = ["func::FuncDialect", "LLVM::LLVMDialect"];
  let options = [Option<"layerFunctions", "layer-functions", "bool",
                        /*default=*/"false",
                        "also the layer functions' (shardx_call_*) safe "
                        "arguments and static results">];
}

def FoldDescriptorsPass : Pass<"shardx-fold-descriptors", "ModuleOp"> {
  let summary = "Folds the host code's extractions from memref descriptors "
                "built in the same function";
  let description = [{
    Run on the cpu target after the conversions to the LLVM dialect. The
    memref lowering builds a descriptor (`llvm.insertvalue` of each field)
    for every allocation, view and argument, and each use takes the fields
    it needs apart again (`llvm.extractvalue`): in the 32-layer GPT step's
    host function most of its instructions. The host code is compiled at
    -O0, which keeps every one. In each function other than an outlined
    kernel (kernels are optimized, and keyed, on their own), an
    `llvm.extractvalue` of a field an `llvm.insertvalue` chain set becomes
    that value, and inserts, extracts and constants nothing uses any more
    go.

    ```mlir
    %0 = llvm.insertvalue %p, %poison[1] : !llvm.struct<(ptr, ptr, i64)>
    %1 = llvm.insertvalue %c0, %0[2] : !llvm.struct<(ptr, ptr, i64)>
    %2 = llvm.extractvalue %1[1] : !llvm.struct<(ptr, ptr, i64)>
    llvm.call @f(%2) : (!llvm.ptr) -> ()
    ```
    becomes `llvm.call @f(%p)`.
  }];
}

//===----------------------------------------------------------------------===//
// The cpu target (lib/Compiler/CpuLoops.cpp, NarrowFloats.cpp, ScatterLoops.cpp)
//===----------------------------------------------------------------------===//

def LowerMaskedScattersPass
    : Pass<"shardx-lower-masked-scatters", "ModuleOp"> {
  let summary = "Lowers masked accumulations into table rows (index_put with "
                "accumulate, embedding backward, scatter_add) on buffers to "
                "scatter loops that visit each index once";
  let options = [
    Option<"order", "order", "std::string", /*default=*/"\"cpu\"",
           "cpu: indices outermost, a row's columns inside; gpu: an "
           "scf.parallel over the columns, the indices inside">
  ];
  let dependentDialects = ["affine::AffineDialect", "arith::ArithDialect",
                           "memref::MemRefDialect", "scf::SCFDialect"];
}

def LowerInnerReductionsPass : Pass<"shardx-lower-reductions", "ModuleOp"> {
  let summary = "Lowers linalg reductions on buffers whose reduction loops "
                "are innermost to loops carrying the accumulators in "
                "registers, float sums marked reassoc (CPU target)";
  let dependentDialects = ["affine::AffineDialect", "arith::ArithDialect",
                           "memref::MemRefDialect", "scf::SCFDialect"];
}

def ApproximateMathPass : Pass<"shardx-approximate-math", "ModuleOp"> {
  let summary = "Replaces f32 exp, erf and tanh by polynomial approximations "
                "that LLVM vectorizes (CPU target)";
  let description = [{
    Fused multiply-adds become the LLVM intrinsic, and `math.absi` becomes
    `llvm.intr.abs` (`convert-math-to-libm`, which runs next, marks it
    illegal and has no call for it).
  }];
  let dependentDialects = ["arith::ArithDialect", "LLVM::LLVMDialect",
                           "math::MathDialect", "vector::VectorDialect"];
}

def ExpandNarrowFloatsPass : Pass<"shardx-expand-narrow-floats", "ModuleOp"> {
  let summary = "Computes bf16/f16 in f32 and converts with integer "
                "arithmetic (no compiler builtins in CPU artifacts)";
  let dependentDialects = ["arith::ArithDialect", "math::MathDialect",
                           "vector::VectorDialect"];
}

//===----------------------------------------------------------------------===//
// The cuda target (lib/Compiler/GpuTransforms.cpp)
//===----------------------------------------------------------------------===//

def NarrowGemmOperandsPass
    : Pass<"shardx-narrow-gemm-operands", "ModuleOp"> {
  let summary = "GEMMs of widened bf16/f16 operands read the narrow values "
                "(a bf16/f16 GEMM with an f32 result)";
  let description = [{
    The cuda target's tensor-level step after fusion. A (batched) f32 GEMM
    both of whose operands are `arith.extf` of bf16 (or both of f16) values,
    each computed by an elementwise generic, becomes a GEMM of the narrow
    values with the f32 result, its body widening them: cuBLAS multiplies
    bf16/f16 on tensor cores and accumulates in f32. The result is the
    same up to the order of the sums, as every product of two widened
    bf16/f16 values is exact in f32. A producer that widens one of its
    inputs is read through (its maps composed into the GEMM's); one that
    computes the narrow value first (a rounding, `extf(truncf(x))`) is
    copied with the narrow result. Producers no longer read go.
  }];
  let dependentDialects = ["arith::ArithDialect", "linalg::LinalgDialect",
                           "tensor::TensorDialect"];
}

def ContractionsToCublasPass
    : Pass<"shardx-contractions-to-cublas", "ModuleOp"> {
  let summary = "Replaces f32/f16/bf16 (batched) GEMM contractions on "
                "buffers by calls of the CUDA runtime's cuBLAS GEMMs";
  let dependentDialects = ["arith::ArithDialect", "func::FuncDialect",
                           "memref::MemRefDialect", "LLVM::LLVMDialect"];
}

def PlaceBuffersOnDevicePass
    : Pass<"shardx-place-buffers-on-device", "ModuleOp"> {
  let summary = "Puts every buffer in device memory: allocas become "
                "allocations, copies kernels, constants device copies";
  let dependentDialects = ["arith::ArithDialect", "func::FuncDialect",
                           "linalg::LinalgDialect", "memref::MemRefDialect"];
}

def ParallelLoopsFirstPass : Pass<"shardx-parallel-loops-first", "ModuleOp"> {
  let summary = "Interchanges the loops of a linalg op so that its parallel "
                "loops come first (a device thread per output element)";
  let dependentDialects = ["linalg::LinalgDialect"];
}

def SplitColumnSumsPass : Pass<"shardx-split-column-sums", "ModuleOp"> {
  let summary = "Splits long column sums with few outputs into chunks "
                "summed in parallel, then added";
  let dependentDialects = ["arith::ArithDialect", "memref::MemRefDialect",
                           "scf::SCFDialect"];
}

def ParallelizeFullSumsPass
    : Pass<"shardx-parallelize-full-sums", "ModuleOp"> {
  let summary = "Runs static f32 full sums on many threads, each adding its "
                "partial sum atomically";
  let dependentDialects = ["arith::ArithDialect", "memref::MemRefDialect",
                           "scf::SCFDialect"];
}

def WarpReductionsPass : Pass<"shardx-warp-reductions", "ModuleOp"> {
  let summary = "Runs static reductions over the innermost loops on a warp "
                "per output element (a block for long rows and full "
                "reductions), combined by shuffles";
  let dependentDialects = ["arith::ArithDialect", "gpu::GPUDialect",
                           "memref::MemRefDialect", "scf::SCFDialect"];
}

def WrapSerialOpsPass : Pass<"shardx-wrap-serial-ops", "ModuleOp"> {
  let summary = "Wraps linalg ops without parallel loops in a "
                "one-iteration parallel loop: one device thread";
  let dependentDialects = ["arith::ArithDialect", "scf::SCFDialect"];
}

def TileParallelLoopsPass : Pass<"shardx-tile-parallel-loops", "ModuleOp"> {
  let summary = "Collapses every outermost parallel loop into one dim and "
                "tiles it into blocks of up to 256 iterations";
  let dependentDialects = ["arith::ArithDialect", "scf::SCFDialect"];
}

def CheckNoHostAccessPass : Pass<"shardx-check-no-host-access", "ModuleOp"> {
  let summary = "Fails when a host function still loads or stores a buffer "
                "(every buffer is device memory)";
}

def DynamicLaunchOffsetsPass
    : Pass<"shardx-dynamic-launch-offsets", "ModuleOp"> {
  let summary = "Passes the strided views a gpu.launch reads with dynamic "
                "offsets, so that views at different places of one buffer "
                "share a kernel";
  let description = [{
    A view of a gradient bucket or of a slab at a static offset has that
    offset in its type, so each place's copy outlined a kernel of its own,
    which `shardx-merge-kernel-modules` could not merge: about 30 of a GPT
    layer's kernels, compiled again per layer. Each such view that the
    launch body only loads from, stores to or updates atomically is cast,
    before the launch, to the same type with a dynamic offset; the kernel
    then reads the offset from the descriptor it is passed, as the cpu
    target's kernels do (`shardx-outline-kernels`). Shapes and strides stay
    static.
  }];
  let dependentDialects = ["memref::MemRefDialect"];
}

def MergeKernelModulesPass
    : Pass<"shardx-merge-kernel-modules", "ModuleOp"> {
  let summary = "Moves every outlined kernel into one gpu.module and merges "
                "structurally identical kernels";
  let dependentDialects = ["gpu::GPUDialect"];
}

def CheckPtxPass : Pass<"shardx-check-ptx", "ModuleOp"> {
  let summary = "Fails when the kernels' PTX calls a function it does not "
                "define, or a kernel takes more parameter bytes than its PTX "
                "ISA allows (after gpu-module-to-binary{format=isa})";
}

def RecordStagingSignaturesPass
    : Pass<"shardx-record-staging-signatures", "ModuleOp"> {
  let summary = "Records each entry point's buffers for the CUDA runtime's "
                "host staging";
  let description = [{
    Before bufferization: per public function, its outputs then inputs, each
    `O|I<rank>:<element bytes>`, in the module's
    `shardx.staging_signatures` dictionary, which
    `shardx-add-staging-wrappers` reads and removes.
  }];
}

def AddStagingWrappersPass
    : Pass<"shardx-add-staging-wrappers", "ModuleOp"> {
  let summary = "Adds the cuda target's entry points: staged in and out, "
                "on device descriptors, and resident";
  let description = [{
    After lowering to the LLVM dialect: for each `_mlir_ciface_<f>` with a
    recorded signature, `shardx_entry_<f>` (host buffers staged to the
    device and back), `shardx_entry_<f>_device` and
    `shardx_entry_<f>_resident`.
  }];
  let dependentDialects = ["LLVM::LLVMDialect"];
}

#endif // SHARDX_COMPILER_PASSES_TD
