//===- GpuReductions.cpp - The cuda target's sum transforms -----------------===//
//
// Part of ShardX.
//
// Passes of the cuda target (shardx-codegen-cuda) that reshape sums for the
// device: long column sums with few outputs split into chunks summed in
// parallel, static f32 full sums run on many threads that each add their
// partial sum atomically.
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

namespace mlir::shardx {
#define GEN_PASS_DEF_SPLITCOLUMNSUMSPASS
#define GEN_PASS_DEF_PARALLELIZEFULLSUMSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

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

struct SplitColumnSumsPass
    : mlir::shardx::impl::SplitColumnSumsPassBase<SplitColumnSumsPass> {
  void runOnOperation() override { splitColumnSums(getOperation()); }
};


struct ParallelizeFullSumsPass
    : mlir::shardx::impl::ParallelizeFullSumsPassBase<ParallelizeFullSumsPass> {
  void runOnOperation() override { parallelizeFullSums(getOperation()); }
};


} // namespace
