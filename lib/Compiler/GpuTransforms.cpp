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
//   ceil(N / 32) threads that each add their partial sum atomically; other ops
//   without a parallel loop (0-d ops, other full reductions) run as one thread
//   of one block;
// - no host function may then still load or store a buffer (a compile
//   error, not a silent host fallback);
// - kernels go through NVVM to PTX (math through libdevice; an unresolved
//   `.extern` is a compile error), embedded in the artifact; the host code
//   calls `mgpu*` entry points that the ShardX CUDA runtime implements
//   (lib/Runtime/cuda), which loads the CUDA driver at run time.
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

using namespace mlir;

namespace {

/// Threads per block of an elementwise kernel.
constexpr int64_t kBlockThreads = 256;
/// The one module that holds every kernel of the program.
constexpr llvm::StringLiteral kKernelModule = "shardx_kernels";

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

/// Whether `op`'s body is `out + term`: it yields an addf whose one use of
/// the output's running value is that add (a sum the GPU transforms may
/// split or reassociate).
bool isSumIntoOutput(linalg::LinalgOp op) {
  BlockArgument acc = op.getRegionOutputArgs()[0];
  auto yield = cast<linalg::YieldOp>(op.getBlock()->getTerminator());
  auto add = yield.getValues()[0].getDefiningOp<arith::AddFOp>();
  return add && acc.hasOneUse() && acc.getUses().begin()->getOwner() == add;
}

/// One iteration of a sum's body at the loop values `ivs`: the inputs
/// loaded there, the body cloned with `acc` as the running sum. Returns
/// the new sum (what the body yields).
Value emitSumTermAt(OpBuilder &b, Location loc, linalg::LinalgOp op,
                    ArrayRef<Value> ivs, Value acc) {
  IRMapping map;
  for (OpOperand *in : op.getDpsInputOperands()) {
    BlockArgument arg = op.getMatchingBlockArgument(in);
    if (!isa<MemRefType>(in->get().getType())) {
      map.map(arg, in->get());
      continue;
    }
    SmallVector<Value> indices;
    AffineMap m = op.getMatchingIndexingMap(in);
    for (AffineExpr e : m.getResults())
      indices.push_back(affine::AffineApplyOp::create(
          b, loc, AffineMap::get(m.getNumDims(), 0, e), ivs));
    map.map(arg, memref::LoadOp::create(b, loc, in->get(), indices));
  }
  map.map(op.getRegionOutputArgs()[0], acc);
  Block *body = op.getBlock();
  for (Operation &inner : body->without_terminator()) {
    if (auto idx = dyn_cast<linalg::IndexOp>(inner)) {
      map.map(idx.getResult(), ivs[idx.getDim()]);
      continue;
    }
    b.clone(inner, map);
  }
  return map.lookup(
      cast<linalg::YieldOp>(body->getTerminator()).getValues()[0]);
}

/// Threads of a parallel full reduction each sum this many elements before
/// their one atomic add.
constexpr int64_t kReduceChunk = 32;

/// A full f32 sum (a linalg.generic or linalg.reduce whose every loop is a
/// reduction, one 0-d output, the body `out + f(inputs)`) becomes a parallel
/// loop over T = ceil(N / kReduceChunk) threads: thread t sums the elements
/// t, t + T, t + 2T, ... of the linearized iteration space (consecutive
/// threads read consecutive elements), then adds its sum to the output
/// atomically. One device thread summing every element (wrapSerialOps)
/// took 10 ms for the 131072 elements of the MLP step's MSE loss on an
/// H100 (ncu).
///
///   linalg.generic {iterator_types = ["reduction", "reduction"]}
///       ins(%x : memref<64x2048xf32>) outs(%out : memref<f32>)
/// becomes
///   scf.parallel (%t) = (0) to (4096) {
///     %s = scf.for %i = 0 to 32 iter_args(%a = 0.0) { a + f(x[lin]) }
///     memref.atomic_rmw addf %s, %out[]
///   }
void parallelizeFullSums(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (!isa<linalg::GenericOp, linalg::ReduceOp>(op))
      return;
    if (op.getNumLoops() == 0 || op.getNumParallelLoops() != 0 ||
        !op.hasPureBufferSemantics() || op.getNumDpsInits() != 1 ||
        op->getParentOfType<scf::ParallelOp>())
      return;
    auto outType = dyn_cast<MemRefType>(op.getDpsInits()[0].getType());
    if (!outType || outType.getRank() != 0 || !outType.getElementType().isF32())
      return;
    for (int64_t range : op.getStaticLoopRanges())
      if (ShapedType::isDynamic(range))
        return;
    if (!isSumIntoOutput(op))
      return;
    ops.push_back(op);
  });
  OpBuilder b(module.getContext());
  for (linalg::LinalgOp op : ops) {
    Location loc = op.getLoc();
    b.setInsertionPoint(op);
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t total = 1;
    for (int64_t r : ranges)
      total *= r;
    int64_t threads = (total + kReduceChunk - 1) / kReduceChunk;
    auto index = [&](int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    Value zeroIdx = index(0), oneIdx = index(1);
    auto loop =
        scf::ParallelOp::create(b, loc, ValueRange{zeroIdx},
                                ValueRange{index(threads)}, ValueRange{oneIdx});
    b.setInsertionPoint(loop.getBody()->getTerminator());
    Value tid = loop.getInductionVars()[0];
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
    auto chunk = scf::ForOp::create(b, loc, index(0), index(kReduceChunk),
                                    index(1), ValueRange{zero});
    b.setInsertionPointToStart(chunk.getBody());
    Value a = chunk.getRegionIterArgs()[0];
    Value lin = arith::AddIOp::create(
        b, loc,
        arith::MulIOp::create(b, loc, chunk.getInductionVar(), index(threads)),
        tid);
    Value inBounds = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                           lin, index(total));
    auto guard = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, inBounds,
                                   /*withElseRegion=*/true);
    scf::YieldOp::create(b, loc, guard.getResults());
    // Out of bounds: the sum so far.
    b.setInsertionPointToStart(guard.elseBlock());
    scf::YieldOp::create(b, loc, a);
    // In bounds: the loop indices of `lin`, the inputs there, the body.
    b.setInsertionPointToStart(guard.thenBlock());
    SmallVector<Value> ivs(ranges.size());
    Value rest = lin;
    for (int64_t d = static_cast<int64_t>(ranges.size()) - 1; d >= 0; --d) {
      ivs[d] = arith::RemUIOp::create(b, loc, rest, index(ranges[d]));
      rest = arith::DivUIOp::create(b, loc, rest, index(ranges[d]));
    }
    scf::YieldOp::create(b, loc, emitSumTermAt(b, loc, op, ivs, a));
    b.setInsertionPointAfter(chunk);
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf,
                                chunk.getResult(0), op.getDpsInits()[0],
                                ValueRange{});
    op.erase();
  }
}

/// A partial f32 sum with few outputs and long reductions runs one thread
/// per output, each summing its whole column: the bias and LayerNorm
/// gradients of a GPT-2 step (768 to 3072 outputs, 8192 rows each) were
/// 2 to 3.4 ms kernels on an H200 that 2 to 12 SMs ran. Such a sum (its
/// parallel loops first, as parallelLoopsFirst leaves them; the body `out +
/// f(inputs)`) becomes two: C chunks of the reduction summed in parallel
/// into a temporary, then each output plus its C partial sums, in order
/// (a reassociation: results change by rounding only).
///
///   linalg.generic {iterator_types = ["parallel", "reduction"]}
///       ins(%g : memref<8192x768xf32>) outs(%b : memref<768xf32>)
/// becomes
///   %t = memref.alloc() : memref<Cx768xf32>
///   scf.parallel (%c, %p) { %s = sum over rows r of chunk c; %t[c, p] = s }
///   scf.parallel (%p) { %b[p] = b[p] + t[0, p] + ... + t[C-1, p] }
void splitColumnSums(ModuleOp module) {
  // Worth it below this many outputs and above this long a reduction; the
  // chunks make about kSplitThreads threads.
  constexpr int64_t kMaxOutputs = 16384, kMinReduction = 1024,
                    kSplitThreads = 65536, kMinChunk = 64;
  SmallVector<linalg::GenericOp> ops;
  module.walk([&](linalg::GenericOp op) {
    if (op.getNumParallelLoops() == 0 || op.getNumReductionLoops() == 0 ||
        !op.hasPureBufferSemantics() || op.getNumDpsInits() != 1 ||
        op->getParentOfType<scf::ParallelOp>())
      return;
    auto outType = dyn_cast<MemRefType>(op.getDpsInits()[0].getType());
    if (!outType || !outType.getElementType().isF32())
      return;
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    unsigned numParallel = op.getNumParallelLoops();
    for (unsigned d = 0; d < iterators.size(); ++d)
      if ((d < numParallel) != (iterators[d] == utils::IteratorType::parallel))
        return; // not parallel-first
    AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
    if (!out.isProjectedPermutation() || out.getNumResults() != numParallel)
      return;
    for (AffineExpr e : out.getResults())
      if (cast<AffineDimExpr>(e).getPosition() >= numParallel)
        return;
    int64_t outputs = 1, reduction = 1;
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    for (unsigned d = 0; d < ranges.size(); ++d) {
      if (ShapedType::isDynamic(ranges[d]))
        return;
      (d < numParallel ? outputs : reduction) *= ranges[d];
    }
    if (outputs == 0 || outputs > kMaxOutputs || reduction < kMinReduction)
      return;
    if (!isSumIntoOutput(op))
      return;
    ops.push_back(op);
  });
  OpBuilder b(module.getContext());
  for (linalg::GenericOp op : ops) {
    Location loc = op.getLoc();
    b.setInsertionPoint(op);
    unsigned numParallel = op.getNumParallelLoops();
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t outputs = 1, reduction = 1;
    for (unsigned d = 0; d < ranges.size(); ++d)
      (d < numParallel ? outputs : reduction) *= ranges[d];
    int64_t chunks = std::clamp<int64_t>(kSplitThreads / outputs, 2,
                                         reduction / kMinChunk);
    int64_t chunk = (reduction + chunks - 1) / chunks;
    chunks = (reduction + chunk - 1) / chunk;
    auto index = [&](int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    Value zeroIdx = index(0), oneIdx = index(1);
    AffineMap outMap = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
    // The temporary: [chunks, parallel ranges...].
    SmallVector<int64_t> tempShape{chunks};
    for (unsigned d = 0; d < numParallel; ++d)
      tempShape.push_back(ranges[d]);
    Value temp = memref::AllocOp::create(
        b, loc, MemRefType::get(tempShape, b.getF32Type()));
    // Stage 1: (c, parallel dims...) in parallel.
    SmallVector<Value> lbs(numParallel + 1, zeroIdx),
        steps(numParallel + 1, oneIdx), ubs{index(chunks)};
    for (unsigned d = 0; d < numParallel; ++d)
      ubs.push_back(index(ranges[d]));
    auto partial = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
    b.setInsertionPoint(partial.getBody()->getTerminator());
    SmallVector<Value> pivs(partial.getInductionVars());
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
    auto loop = scf::ForOp::create(b, loc, index(0), index(chunk), index(1),
                                   ValueRange{zero});
    b.setInsertionPointToStart(loop.getBody());
    Value a = loop.getRegionIterArgs()[0];
    Value lin = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, pivs[0], index(chunk)),
        loop.getInductionVar());
    Value inBounds = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                           lin, index(reduction));
    auto guard = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, inBounds,
                                   /*withElseRegion=*/true);
    scf::YieldOp::create(b, loc, guard.getResults());
    b.setInsertionPointToStart(guard.elseBlock());
    scf::YieldOp::create(b, loc, a);
    b.setInsertionPointToStart(guard.thenBlock());
    SmallVector<Value> ivs(ranges.size());
    for (unsigned d = 0; d < numParallel; ++d)
      ivs[d] = pivs[d + 1];
    Value rest = lin;
    for (int64_t d = static_cast<int64_t>(ranges.size()) - 1;
         d >= static_cast<int64_t>(numParallel); --d) {
      ivs[d] = arith::RemUIOp::create(b, loc, rest, index(ranges[d]));
      rest = arith::DivUIOp::create(b, loc, rest, index(ranges[d]));
    }
    scf::YieldOp::create(b, loc, emitSumTermAt(b, loc, op, ivs, a));
    b.setInsertionPointAfter(loop);
    memref::StoreOp::create(b, loc, loop.getResult(0), temp, pivs);
    // Stage 2: each output plus its partial sums, in chunk order.
    b.setInsertionPointAfter(partial);
    SmallVector<Value> lbs2(numParallel, zeroIdx), steps2(numParallel, oneIdx),
        ubs2(ubs.begin() + 1, ubs.end());
    auto combine = scf::ParallelOp::create(b, loc, lbs2, ubs2, steps2);
    b.setInsertionPoint(combine.getBody()->getTerminator());
    SmallVector<Value> civs(combine.getInductionVars());
    SmallVector<Value> at;
    for (AffineExpr e : outMap.getResults())
      at.push_back(civs[cast<AffineDimExpr>(e).getPosition()]);
    Value outBuf = op.getDpsInits()[0];
    Value init = memref::LoadOp::create(b, loc, outBuf, at);
    auto sum = scf::ForOp::create(b, loc, index(0), index(chunks), index(1),
                                  ValueRange{init});
    b.setInsertionPointToStart(sum.getBody());
    SmallVector<Value> tat{sum.getInductionVar()};
    tat.append(civs.begin(), civs.end());
    Value part = memref::LoadOp::create(b, loc, temp, tat);
    scf::YieldOp::create(
        b, loc,
        ValueRange{arith::AddFOp::create(b, loc, sum.getRegionIterArgs()[0],
                                         part)
                       .getResult()});
    b.setInsertionPointAfter(sum);
    memref::StoreOp::create(b, loc, sum.getResult(0), outBuf, at);
    b.setInsertionPointAfter(combine);
    memref::DeallocOp::create(b, loc, temp);
    op.erase();
  }
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

/// A PTX that calls a function it does not define (a math function missing
/// from libdevice) loads on no driver: a compile error.
LogicalResult checkPtx(ModuleOp module, StringRef ptx) {
  SmallVector<StringRef> lines, unresolved;
  ptx.split(lines, '\n');
  for (StringRef line : lines) {
    line = line.trim();
    if (!line.starts_with(".extern"))
      continue;
    // `.extern .func (.param ...) name(...)`: the name precedes the last
    // parameter list.
    StringRef head = line.rsplit('(').first.rtrim();
    unresolved.push_back(head.rsplit(' ').second.empty()
                             ? line
                             : head.substr(head.find_last_of(" )") + 1));
  }
  if (unresolved.empty())
    return success();
  auto diag = module.emitError("the device code calls functions it does not "
                               "define (not in libdevice?):");
  for (StringRef name : unresolved)
    diag << " " << name;
  return failure();
}

/// The module attribute of shardx-record-staging-signatures.
constexpr llvm::StringLiteral kStagingSignatures = "shardx.staging_signatures";

/// Per public function, the buffers of its calling convention for the
/// runtime's staging: outputs then inputs, each "O|I<rank>:<element bytes>".
DictionaryAttr entrySignatures(ModuleOp module) {
  SmallVector<NamedAttribute> signatures;
  auto describe = [](char kind, Type type) {
    auto shaped = cast<ShapedType>(type);
    unsigned bits = shaped.getElementTypeBitWidth();
    return std::string(1, kind) + std::to_string(shaped.getRank()) + ":" +
           std::to_string((bits + 7) / 8) + " ";
  };
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isPrivate() || fn.isExternal())
      continue;
    std::string sig;
    for (Type t : fn.getFunctionType().getResults())
      if (isa<ShapedType>(t))
        sig += describe('O', t);
    for (Type t : fn.getFunctionType().getInputs())
      if (isa<ShapedType>(t))
        sig += describe('I', t);
    signatures.push_back(NamedAttribute(
        fn.getSymNameAttr(), StringAttr::get(module.getContext(), sig)));
  }
  return DictionaryAttr::get(module.getContext(), signatures);
}

/// For each `_mlir_ciface_<f>(p0, ..., pk)` with a signature, adds
/// `shardx_entry_<f>(argv)`: the launcher's host buffers go to the device
/// (`shardx_rt_cuda_stage_in` returns argv with device descriptors), the
/// program runs on them (through the device entry below), and its results come back as host buffers in the
/// launcher's result descriptors (`shardx_rt_cuda_stage_out`). Also
/// `shardx_entry_<f>_device(deviceArgv)`, the program alone on device
/// descriptors, and `shardx_entry_<f>_resident(argv)`, which stages once
/// and runs the device entry repeatedly (`shardx_rt_cuda_run_resident`).
void addStagingEntryWrappers(ModuleOp module, DictionaryAttr signatures) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto voidType = LLVM::LLVMVoidType::get(ctx);
  auto declare = [&](StringRef name, Type result, ArrayRef<Type> args) {
    if (auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
      return fn;
    b.setInsertionPointToStart(module.getBody());
    return LLVM::LLVMFuncOp::create(b, module.getLoc(), name,
                                    LLVM::LLVMFunctionType::get(result, args));
  };
  LLVM::LLVMFuncOp stageIn =
      declare("shardx_rt_cuda_stage_in", ptr, {ptr, ptr});
  LLVM::LLVMFuncOp stageOut =
      declare("shardx_rt_cuda_stage_out", voidType, {ptr, ptr, ptr});
  LLVM::LLVMFuncOp runResident =
      declare("shardx_rt_cuda_run_resident", voidType, {ptr, ptr, ptr});
  SmallVector<LLVM::LLVMFuncOp> entries;
  for (auto fn : module.getOps<LLVM::LLVMFuncOp>())
    if (fn.getName().starts_with("_mlir_ciface_") && !fn.isExternal() &&
        signatures.contains(fn.getName().drop_front(strlen("_mlir_ciface_"))))
      entries.push_back(fn);
  // A function `void name(ptr)` at the end of the module whose body
  // `build` fills from its argument.
  auto define = [&](const Twine &name, Location loc,
                    llvm::function_ref<void(Value)> build) {
    b.setInsertionPointToEnd(module.getBody());
    auto fn = LLVM::LLVMFuncOp::create(
        b, loc, name.str(), LLVM::LLVMFunctionType::get(voidType, {ptr}));
    b.setInsertionPointToStart(fn.addEntryBlock(b));
    build(fn.getArgument(0));
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    return fn;
  };
  for (LLVM::LLVMFuncOp fn : entries) {
    StringRef name = fn.getName().drop_front(strlen("_mlir_ciface_"));
    Location loc = fn.getLoc();
    std::string sig = signatures.getAs<StringAttr>(name).getValue().str();
    sig.push_back('\0');
    b.setInsertionPointToEnd(module.getBody());
    auto global = LLVM::GlobalOp::create(
        b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), sig.size()),
        /*isConstant=*/true, LLVM::Linkage::Internal,
        ("shardx_signature_" + name).str(), b.getStringAttr(sig));

    // shardx_entry_<f>_device(deviceArgv): the program on device
    // descriptors (argv as stage_in returns it), no copies, no sync.
    auto onDevice =
        define("shardx_entry_" + name + "_device", loc, [&](Value device) {
          SmallVector<Value> args;
          for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i) {
            Value slot = LLVM::GEPOp::create(
                b, loc, ptr, ptr, device, ArrayRef<LLVM::GEPArg>{int32_t(i)});
            args.push_back(LLVM::LoadOp::create(b, loc, ptr, slot));
          }
          LLVM::CallOp::create(b, loc, fn, args);
        });

    // shardx_entry_<f>(argv): staged in, the device entry, staged out.
    define("shardx_entry_" + name, loc, [&](Value argv) {
      Value sigPtr = LLVM::AddressOfOp::create(b, loc, global);
      Value device =
          LLVM::CallOp::create(b, loc, stageIn, ValueRange{argv, sigPtr})
              .getResult();
      LLVM::CallOp::create(b, loc, onDevice, ValueRange{device});
      LLVM::CallOp::create(b, loc, stageOut, ValueRange{argv, device, sigPtr});
    });

    // shardx_entry_<f>_resident(argv): the launcher's ABI, with the inputs
    // staged once and the program run on them as often as
    // shardx_rt_cuda_resident_config asked (shardx-gpu-exec --resident).
    define("shardx_entry_" + name + "_resident", loc, [&](Value argv) {
      Value sigPtr = LLVM::AddressOfOp::create(b, loc, global);
      Value devicePtr = LLVM::AddressOfOp::create(b, loc, onDevice);
      LLVM::CallOp::create(b, loc, runResident,
                           ValueRange{argv, sigPtr, devicePtr});
    });
  }
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
#define GEN_PASS_DEF_SPLITCOLUMNSUMSPASS
#define GEN_PASS_DEF_PARALLELIZEFULLSUMSPASS
#define GEN_PASS_DEF_WRAPSERIALOPSPASS
#define GEN_PASS_DEF_TILEPARALLELLOOPSPASS
#define GEN_PASS_DEF_CHECKNOHOSTACCESSPASS
#define GEN_PASS_DEF_MERGEKERNELMODULESPASS
#define GEN_PASS_DEF_CHECKPTXPASS
#define GEN_PASS_DEF_RECORDSTAGINGSIGNATURESPASS
#define GEN_PASS_DEF_ADDSTAGINGWRAPPERSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct ContractionsToCublasPass
    : mlir::shardx::impl::ContractionsToCublasPassBase<ContractionsToCublasPass> {
  void runOnOperation() override {
    auto suffix = [](Type elt) -> std::optional<std::string> {
      if (elt.isF32())
        return std::string("f32");
      if (elt.isF16())
        return std::string("f16");
      if (elt.isBF16())
        return std::string("bf16");
      return std::nullopt;
    };
    if (failed(mlir::shardx::contractionsToGemmCalls(getOperation(),
                                               "shardx_rt_cuda_gemm_",
                                               "shardx_rt_cuda_gemm_batched_",
                                               suffix)))
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

struct SplitColumnSumsPass
    : mlir::shardx::impl::SplitColumnSumsPassBase<SplitColumnSumsPass> {
  void runOnOperation() override { splitColumnSums(getOperation()); }
};

struct ParallelizeFullSumsPass
    : mlir::shardx::impl::ParallelizeFullSumsPassBase<ParallelizeFullSumsPass> {
  void runOnOperation() override { parallelizeFullSums(getOperation()); }
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

struct RecordStagingSignaturesPass
    : mlir::shardx::impl::RecordStagingSignaturesPassBase<
          RecordStagingSignaturesPass> {
  void runOnOperation() override {
    getOperation()->setAttr(kStagingSignatures,
                            entrySignatures(getOperation()));
  }
};

struct AddStagingWrappersPass
    : mlir::shardx::impl::AddStagingWrappersPassBase<AddStagingWrappersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto signatures = module->getAttrOfType<DictionaryAttr>(kStagingSignatures);
    if (!signatures) {
      module.emitError("shardx-add-staging-wrappers: no '")
          << kStagingSignatures
          << "' (run shardx-record-staging-signatures before bufferization)";
      return signalPassFailure();
    }
    module->removeAttr(kStagingSignatures);
    addStagingEntryWrappers(module, signatures);
  }
};

} // namespace
