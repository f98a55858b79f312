//===- GpuTransforms.cpp - The cuda target's device transforms ------------===//
//
// Part of ShardX.
//
// The passes of the "cuda" target (shardx-codegen-cuda, lib/Compiler/
// Pipelines.cpp). The program is fused and bufferized as on the CPU; then
//
// - (batched) GEMM contractions become calls of `shardx_rt_cuda_gemm_*`
//   (cuBLAS at run time), transposed operands as views;
// - every buffer lives on the device: allocations become `gpu.alloc`
//   (the runtime's caching allocator), copies become kernels, constants
//   read by kernels are copied to the device once per use;
// - every other linalg op becomes parallel loops, collapsed to one dim and
//   tiled (blocks of up to 256 consecutive iterations), mapped to blocks and
//   threads and
//   outlined into one `gpu.module` (partial reductions with their
//   parallel loops first: a thread per output element); full f32 sums run on
//   ceil(N / 32) threads that each add their partial sum atomically;
//   reductions over the innermost loops run on a warp per row (a block
//   for long rows and other full reductions), combined by shuffles; other ops
//   without a parallel loop (0-d ops, other full reductions) run as one thread
//   of one block;
// - no host function may then still load or store a buffer (a compile
//   error, not a silent host fallback);
// - kernels go through NVVM to PTX (math through libdevice; an unresolved
//   `.extern` or a kernel taking more parameter bytes than its PTX may is
//   a compile error), embedded in the artifact (with the chip's code
//   that ptxas makes, as a fat binary: GpuBinary.cpp); the host code
//   calls `mgpu*` entry points that the ShardX CUDA runtime implements
//   (lib/Runtime/cuda), which loads the CUDA driver at run time.
//
// The reduction transforms are in GpuReductions.cpp, the staged entry points in
// GpuEntryPoints.cpp.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace {

/// Threads per block of an elementwise kernel.
constexpr int64_t kBlockThreads = 256;
using mlir::shardx::kKernelModule;

/// Whether every use of `value` (through casts) is an argument of a
/// collective's runtime call, which reads it on the host (axes, exchange
/// descriptors). A GEMM call reads its operands on the device.
bool onlyReadByCollectiveCalls(Value value) {
  for (Operation *user : value.getUsers()) {
    if (auto call = dyn_cast<func::CallOp>(user);
        call && call.getCallee().starts_with("shardx_rt_cg_"))
      continue;
    if (auto cast = dyn_cast<memref::CastOp>(user))
      if (onlyReadByCollectiveCalls(cast.getResult()))
        continue;
    return false;
  }
  return true;
}

/// Puts every buffer on the device: allocations stay memref.alloc (the
/// memref-to-LLVM lowering calls `_mlir_memref_to_llvm_alloc/free`, which
/// the CUDA runtime implements with its caching allocator), allocas become
/// allocs, copies become linalg.copy (a kernel), and a constant that the
/// program reads is copied from its host global into a device buffer.
LogicalResult placeBuffersOnDevice(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (isa<memref::AllocaOp, memref::CopyOp, memref::GetGlobalOp>(op))
      ops.push_back(op);
  });
  auto index = b.getIndexType();
  func::FuncOp memcpy;
  for (Operation *op : ops) {
    b.setInsertionPoint(op);
    Location loc = op->getLoc();
    if (auto copy = dyn_cast<memref::CopyOp>(op)) {
      linalg::CopyOp::create(b, loc, copy.getSource(), copy.getTarget());
      copy.erase();
      continue;
    }
    if (auto alloca = dyn_cast<memref::AllocaOp>(op)) {
      auto alloc = memref::AllocOp::create(
          b, loc, alloca.getType(), alloca.getDynamicSizes(),
          alloca.getSymbolOperands(), alloca.getAlignmentAttr());
      alloca.getResult().replaceAllUsesWith(alloc.getResult());
      // An alloca's scope ends with its block.
      b.setInsertionPoint(alloca->getBlock()->getTerminator());
      memref::DeallocOp::create(b, loc, alloc.getResult());
      alloca.erase();
      continue;
    }
    auto global = cast<memref::GetGlobalOp>(op);
    if (onlyReadByCollectiveCalls(global.getResult()))
      continue;
    auto type = cast<MemRefType>(global.getType());
    if (!type.hasStaticShape() || !type.getLayout().isIdentity())
      return global.emitError("the cuda target needs constants of static "
                              "shape and identity layout");
    if (!memcpy) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      memcpy =
          func::FuncOp::create(b, module.getLoc(), "shardx_rt_cuda_memcpy",
                               b.getFunctionType({index, index, index}, {}));
      memcpy.setPrivate();
    }
    b.setInsertionPointAfter(global);
    auto alloc = memref::AllocOp::create(b, loc, type);
    global.getResult().replaceAllUsesWith(alloc.getResult());
    int64_t bytes =
        type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
    Value dst = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, alloc);
    Value src = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, global);
    func::CallOp::create(
        b, loc, memcpy,
        ValueRange{dst, src, arith::ConstantIndexOp::create(b, loc, bytes)});
    b.setInsertionPoint(global->getBlock()->getTerminator());
    memref::DeallocOp::create(b, loc, alloc.getResult());
  }
  return success();
}


/// Puts the parallel loops of every partial reduction outermost (generic
/// form, loops interchanged), so that convert-linalg-to-parallel-loops
/// makes one scf.parallel of them with the reductions as scf.for inside:
/// one kernel whose threads each reduce their own elements. With a
/// reduction loop first, the reduction ran as a host loop launching one
/// kernel per step: the bias gradient of the MLP step (sum over the batch,
/// ["reduction", "parallel"]) was 64 launches, the block's over batch x
/// seq 1024, most of the block step's time on an H100.
///
///   linalg.generic {iterator_types = ["reduction", "parallel"]}
///       ins(%g : memref<64x2048xf32>) outs(%b : memref<2048xf32>)
/// becomes
///   linalg.generic {iterator_types = ["parallel", "reduction"]}
///       (indexing maps (d0, d1) -> (d1, d0) and (d0, d1) -> (d0))
LogicalResult parallelLoopsFirst(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (op.getNumParallelLoops() == 0 || op.getNumReductionLoops() == 0 ||
        !op.hasPureBufferSemantics() || op->getParentOfType<scf::ParallelOp>())
      return;
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    bool seenReduction = false;
    for (utils::IteratorType it : iterators) {
      if (it == utils::IteratorType::parallel && seenReduction) {
        ops.push_back(op);
        return;
      }
      seenReduction |= it == utils::IteratorType::reduction;
    }
  });
  IRRewriter rewriter(module.getContext());
  for (linalg::LinalgOp op : ops) {
    SmallVector<unsigned> order;
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    for (unsigned i = 0, e = iterators.size(); i < e; ++i)
      if (iterators[i] == utils::IteratorType::parallel)
        order.push_back(i);
    for (unsigned i = 0, e = iterators.size(); i < e; ++i)
      if (iterators[i] != utils::IteratorType::parallel)
        order.push_back(i);
    rewriter.setInsertionPoint(op);
    auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
    if (!generic) {
      FailureOr<linalg::GenericOp> g = linalg::generalizeNamedOp(rewriter, op);
      if (failed(g))
        continue; // Stays as it is: correct, only slower.
      generic = *g;
    }
    if (failed(linalg::interchangeGenericOp(rewriter, generic, order)))
      return generic.emitError("cannot put the parallel loops first");
  }
  return success();
}

/// A linalg op without parallel loops (a 0-d op, a full reduction) runs in
/// a one-iteration parallel loop: one device thread, not the host.
void wrapSerialOps(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (op.getNumParallelLoops() == 0 &&
        !op->getParentOfType<scf::ParallelOp>())
      ops.push_back(op);
  });
  OpBuilder b(module.getContext());
  for (linalg::LinalgOp op : ops) {
    b.setInsertionPoint(op);
    Location loc = op.getLoc();
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    auto loop = scf::ParallelOp::create(b, loc, ValueRange{zero},
                                        ValueRange{one}, ValueRange{one});
    op->moveBefore(loop.getBody()->getTerminator());
  }
}

/// Collapses every outermost parallel loop into one dim and tiles it: a
/// block of up to kBlockThreads consecutive iterations, so that a warp
/// reads consecutive elements of row-major buffers and no dim beyond the
/// three hardware ones runs sequentially in a thread.
void tileParallelLoops(ModuleOp module) {
  auto outermost = [&] {
    SmallVector<scf::ParallelOp> loops;
    module.walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>())
        loops.push_back(loop);
    });
    return loops;
  };
  // collapseParallelLoops replaces the loop: collapse all, then find them.
  IRRewriter rewriter(module.getContext());
  for (scf::ParallelOp loop : outermost()) {
    if (loop.getNumLoops() < 2)
      continue;
    std::vector<unsigned> all;
    for (unsigned i = 0, e = loop.getNumLoops(); i < e; ++i)
      all.push_back(i);
    rewriter.setInsertionPoint(loop);
    collapseParallelLoops(rewriter, loop, {all});
  }
  for (scf::ParallelOp loop : outermost()) {
    int64_t size = kBlockThreads;
    std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()[0]);
    std::optional<int64_t> ub = getConstantIntValue(loop.getUpperBound()[0]);
    std::optional<int64_t> step = getConstantIntValue(loop.getStep()[0]);
    if (lb && ub && step == 1 && *ub - *lb < kBlockThreads)
      size = std::max<int64_t>(1, *ub - *lb);
    scf::tileParallelLoop(loop, {size}, /*noMinMaxBounds=*/true);
  }
}

/// Moves every outlined kernel into one gpu.module (one PTX, loaded once),
/// each kernel named after the module it came from; structurally identical
/// kernels (the same printed IR but for the name, as lib/Compiler/
/// OutlineKernels.cpp compares CPU kernels) become one, so the layers of a
/// model launch one set of kernels and NVVM compiles each once.
LogicalResult mergeKernelModules(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  SmallVector<gpu::GPUModuleOp> modules(module.getOps<gpu::GPUModuleOp>());
  if (modules.empty())
    return success();
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module.getBody());
  auto merged = gpu::GPUModuleOp::create(b, module.getLoc(), kKernelModule);
  llvm::StringMap<StringAttr> byText;      // canonical text -> kernel name
  llvm::DenseMap<StringAttr, StringAttr> rename; // module name -> kernel
  for (gpu::GPUModuleOp m : modules) {
    for (Operation &op : llvm::make_early_inc_range(*m.getBody())) {
      auto fn = dyn_cast<gpu::GPUFuncOp>(op);
      if (!fn)
        return op.emitError("unexpected op in an outlined kernel module");
      auto [it, inserted] =
          byText.try_emplace(mlir::shardx::canonicalKernelText(fn),
                             m.getNameAttr());
      rename[m.getNameAttr()] = it->second;
      if (!inserted) {
        fn.erase();
        continue;
      }
      fn->moveBefore(merged.getBody(), merged.getBody()->end());
      fn.setName(m.getName());
    }
  }
  module.walk([&](gpu::LaunchFuncOp launch) {
    StringAttr kernel = rename.lookup(launch.getKernelModuleName());
    launch.setKernelAttr(
        SymbolRefAttr::get(ctx, kKernelModule, {FlatSymbolRefAttr::get(kernel)}));
  });
  for (gpu::GPUModuleOp m : modules)
    m.erase();
  return success();
}

/// Casts each strided view with a static offset that a gpu.launch body only
/// loads from, stores to or updates atomically (a bucket's slot, a slab's
/// parameter) to the
/// type with a dynamic offset, before the launch, and reads the cast in the
/// body: the outlined kernel takes the offset from the descriptor, and the
/// copies into every slot of a bucket are one kernel.
void dynamicLaunchOffsets(ModuleOp module) {
  OpBuilder b(module.getContext());
  module.walk([&](gpu::LaunchOp launch) {
    llvm::SetVector<Value> captured;
    getUsedValuesDefinedAbove(launch.getBody(), captured);
    for (Value value : captured) {
      Type dynamic = mlir::shardx::kernelArgType(value.getType());
      if (dynamic == value.getType())
        continue;
      auto inside = [&](OpOperand &use) {
        return launch->isProperAncestor(use.getOwner());
      };
      bool onlyAccessed = llvm::all_of(value.getUses(), [&](OpOperand &use) {
        return !inside(use) ||
               isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp>(
                   use.getOwner());
      });
      if (!onlyAccessed)
        continue;
      b.setInsertionPoint(launch);
      Value cast = memref::CastOp::create(b, launch.getLoc(), dynamic, value);
      value.replaceUsesWithIf(cast, inside);
    }
  });
}

/// Fails when a host function still reads or writes a buffer: every buffer
/// is device memory.
LogicalResult checkNoHostAccess(ModuleOp module) {
  WalkResult result = module.walk<WalkOrder::PreOrder>([](Operation *op) {
    if (isa<gpu::GPUModuleOp, gpu::LaunchOp>(op))
      return WalkResult::skip();
    if (isa<memref::LoadOp, memref::StoreOp, memref::CopyOp,
            affine::AffineLoadOp, affine::AffineStoreOp, vector::LoadOp,
            vector::StoreOp, vector::TransferReadOp, vector::TransferWriteOp,
            linalg::LinalgOp>(op)) {
      op->emitError("the cuda target left '")
          << op->getName()
          << "' on the host, where every buffer is device memory";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

/// The name a PTX `.extern` line declares: `.extern .func name`, or with a
/// result, `.extern .func (.param .b32 func_retval0) name`, the parameters
/// following on the line or the next ones. The line itself where it has no
/// name.
StringRef externName(StringRef line) {
  StringRef rest = line.drop_front(strlen(".extern")).ltrim();
  if (rest.consume_front(".func"))
    rest = rest.ltrim();
  if (rest.starts_with("(")) {
    size_t close = rest.find(')');
    if (close == StringRef::npos)
      return line;
    rest = rest.drop_front(close + 1).ltrim();
  }
  StringRef name = rest.take_until(
      [](char c) { return c == '(' || c == ' ' || c == '\t' || c == ';'; });
  return name.empty() ? line : name;
}

/// The bytes a `.param` declaration of an entry takes and its alignment:
/// `.param .u64 .ptr .align 1 p` (a pointer: 8), `.param .f32 p`,
/// `.param .align 8 .b8 p[24]` (an aggregate: 24). 0 if it is not one.
std::pair<uint64_t, uint64_t> paramBytes(StringRef line) {
  if (!line.consume_front(".param"))
    return {0, 1};
  SmallVector<StringRef> words;
  line.split(words, ' ', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  uint64_t scalar = 0, align = 0, count = 1;
  bool ptr = false;
  for (size_t i = 0; i < words.size(); ++i) {
    StringRef w = words[i].trim().rtrim(',');
    if (w == ".ptr") {
      ptr = true;
    } else if (w == ".align" && i + 1 < words.size()) {
      words[++i].trim().getAsInteger(10, align);
    } else if (w.size() >= 3 && w.front() == '.' &&
               StringRef("busf").contains(w[1])) {
      // The type: .b8 .u16 .s32 .f64 ... (a state space such as .global
      // is no number of bits and is skipped).
      unsigned bits = 0;
      if (!w.drop_front(2).getAsInteger(10, bits))
        scalar = bits / 8;
    } else if (size_t open = w.find('['); open != StringRef::npos) {
      w.slice(open + 1, w.find(']')).getAsInteger(10, count);
    }
  }
  // A pointer's `.align N` is its pointee's; it is aligned as its type.
  uint64_t natural = std::max<uint64_t>(scalar, 1);
  return {scalar * count, ptr || !align ? natural : align};
}

/// The most bytes of parameters a kernel may take: 4352 before PTX ISA 8.1,
/// 32764 from 8.1 on sm_70 and later (the PTX ISA's limit; ptxas and the
/// driver's PTX JIT refuse more).
uint64_t maxParamBytes(StringRef ptx) {
  unsigned major = 0, minor = 0, sm = 0;
  for (StringRef line : llvm::split(ptx, '\n')) {
    line = line.trim();
    if (line.consume_front(".version")) {
      auto [ma, mi] = line.trim().split('.');
      ma.getAsInteger(10, major);
      mi.take_while(llvm::isDigit).getAsInteger(10, minor);
    } else if (line.consume_front(".target")) {
      StringRef arch = line.trim();
      if (arch.consume_front("sm_"))
        arch.take_while(llvm::isDigit).getAsInteger(10, sm);
    }
  }
  bool large = (major > 8 || (major == 8 && minor >= 1)) && sm >= 70;
  return large ? 32764 : mlir::shardx::kPtx80KernelParamBytes;
}

/// A PTX that calls a function it does not define (a math function missing
/// from libdevice), or has a kernel whose parameters exceed the PTX ISA's
/// limit (a fusion that reads hundreds of buffers), loads on no driver: a
/// compile error, not a failure when the driver loads it.
LogicalResult checkPtx(ModuleOp module, StringRef ptx) {
  SmallVector<StringRef> lines, unresolved;
  ptx.split(lines, '\n');
  uint64_t limit = maxParamBytes(ptx);
  bool tooLarge = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    StringRef line = lines[i].trim();
    if (line.starts_with(".extern")) {
      unresolved.push_back(externName(line));
      continue;
    }
    size_t entry = line.find(".entry ");
    if (entry == StringRef::npos)
      continue;
    StringRef name =
        line.drop_front(entry + strlen(".entry ")).take_until([](char c) {
          return c == '(' || c == ' ';
        });
    uint64_t bytes = 0, params = 0;
    for (++i; i < lines.size(); ++i) {
      StringRef param = lines[i].trim();
      if (param.starts_with(")"))
        break;
      auto [size, align] = paramBytes(param);
      if (!size)
        continue;
      bytes = llvm::alignTo(bytes, align) + size;
      ++params;
    }
    if (bytes <= limit)
      continue;
    module.emitError() << "kernel " << name << " takes " << params
                       << " parameters of " << bytes << " bytes, more than the "
                       << limit
                       << " bytes its PTX may pass (the driver would not "
                          "load it)";
    tooLarge = true;
  }
  if (!unresolved.empty()) {
    auto diag = module.emitError("the device code calls functions it does not "
                                 "define (not in libdevice?):");
    for (StringRef name : unresolved)
      diag << " " << name;
  }
  return failure(tooLarge || !unresolved.empty());
}

} // namespace

/// The PTX of the kernel module (after gpu-module-to-binary, format=isa).
FailureOr<std::string> mlir::shardx::kernelPtx(ModuleOp module) {
  auto binary = module.lookupSymbol<gpu::BinaryOp>(kKernelModule);
  if (!binary)
    return std::string();
  auto objects = binary.getObjects();
  if (objects.size() != 1)
    return binary.emitError("expected one object in the kernel binary"),
           failure();
  auto object = cast<gpu::ObjectAttr>(objects[0]);
  return object.getObject().getValue().str();
}

namespace mlir::shardx {
#define GEN_PASS_DEF_CONTRACTIONSTOCUBLASPASS
#define GEN_PASS_DEF_PLACEBUFFERSONDEVICEPASS
#define GEN_PASS_DEF_PARALLELLOOPSFIRSTPASS
#define GEN_PASS_DEF_WRAPSERIALOPSPASS
#define GEN_PASS_DEF_TILEPARALLELLOOPSPASS
#define GEN_PASS_DEF_CHECKNOHOSTACCESSPASS
#define GEN_PASS_DEF_DYNAMICLAUNCHOFFSETSPASS
#define GEN_PASS_DEF_MERGEKERNELMODULESPASS
#define GEN_PASS_DEF_CHECKPTXPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct ContractionsToCublasPass
    : mlir::shardx::impl::ContractionsToCublasPassBase<ContractionsToCublasPass> {
  void runOnOperation() override {
    if (failed(mlir::shardx::contractionsToGemmCalls(
            getOperation(), "shardx_rt_cuda_gemm_",
            "shardx_rt_cuda_gemm_batched_", {"f32", "f16", "bf16"},
            /*allowWidening=*/true)))
      signalPassFailure();
  }
};

struct PlaceBuffersOnDevicePass
    : mlir::shardx::impl::PlaceBuffersOnDevicePassBase<PlaceBuffersOnDevicePass> {
  void runOnOperation() override {
    if (failed(placeBuffersOnDevice(getOperation())))
      signalPassFailure();
  }
};

struct ParallelLoopsFirstPass
    : mlir::shardx::impl::ParallelLoopsFirstPassBase<ParallelLoopsFirstPass> {
  void runOnOperation() override {
    if (failed(parallelLoopsFirst(getOperation())))
      signalPassFailure();
  }
};



struct WrapSerialOpsPass
    : mlir::shardx::impl::WrapSerialOpsPassBase<WrapSerialOpsPass> {
  void runOnOperation() override { wrapSerialOps(getOperation()); }
};

struct TileParallelLoopsPass
    : mlir::shardx::impl::TileParallelLoopsPassBase<TileParallelLoopsPass> {
  void runOnOperation() override { tileParallelLoops(getOperation()); }
};

struct CheckNoHostAccessPass
    : mlir::shardx::impl::CheckNoHostAccessPassBase<CheckNoHostAccessPass> {
  void runOnOperation() override {
    if (failed(checkNoHostAccess(getOperation())))
      signalPassFailure();
  }
};

struct DynamicLaunchOffsetsPass
    : mlir::shardx::impl::DynamicLaunchOffsetsPassBase<
          DynamicLaunchOffsetsPass> {
  void runOnOperation() override { dynamicLaunchOffsets(getOperation()); }
};

struct MergeKernelModulesPass
    : mlir::shardx::impl::MergeKernelModulesPassBase<MergeKernelModulesPass> {
  void runOnOperation() override {
    if (failed(mergeKernelModules(getOperation())))
      signalPassFailure();
  }
};

struct CheckPtxPass : mlir::shardx::impl::CheckPtxPassBase<CheckPtxPass> {
  void runOnOperation() override {
    FailureOr<std::string> ptx = mlir::shardx::kernelPtx(getOperation());
    if (failed(ptx) || failed(checkPtx(getOperation(), *ptx)))
      signalPassFailure();
  }
};



} // namespace
