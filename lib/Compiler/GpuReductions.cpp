//===- GpuReductions.cpp - The cuda target's reduction transforms ---------===//
//
// Part of ShardX.
//
// Passes of the cuda target (shardx-codegen-cuda) that reshape reductions
// for the device: long column sums with few outputs split into chunks
// summed in parallel, static f32 full sums run on many threads that each
// add their partial sum atomically, and reductions over the innermost
// loops (row reductions, other full reductions) run on a warp per row
// combined by shuffles (a block for long rows and full reductions).
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
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_SPLITCOLUMNSUMSPASS
#define GEN_PASS_DEF_PARALLELIZEFULLSUMSPASS
#define GEN_PASS_DEF_WARPREDUCTIONSPASS
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

/// The identity of a combining op's kind in `type` (combine(identity, x)
/// is x exactly), or null for an op the warp reductions do not know.
TypedAttr combinerIdentity(Operation *combiner, Type type) {
  if (auto ft = dyn_cast<FloatType>(type)) {
    const llvm::fltSemantics &sem = ft.getFloatSemantics();
    auto f = [&](const APFloat &v) -> TypedAttr {
      return FloatAttr::get(ft, v);
    };
    return llvm::TypeSwitch<Operation *, TypedAttr>(combiner)
        // -0.0: -0 + x is x for every x, +0 included.
        .Case([&](arith::AddFOp) { return f(APFloat::getZero(sem, true)); })
        .Case([&](arith::MulFOp) { return f(APFloat::getOne(sem)); })
        .Case([&](arith::MaximumFOp) { return f(APFloat::getInf(sem, true)); })
        .Case([&](arith::MinimumFOp) { return f(APFloat::getInf(sem)); })
        // NaN: maxnum/minnum(NaN, x) is x, NaN only when x is NaN.
        .Case<arith::MaxNumFOp, arith::MinNumFOp>(
            [&](Operation *) { return f(APFloat::getQNaN(sem)); })
        .Default([](Operation *) { return TypedAttr(); });
  }
  auto it = dyn_cast<IntegerType>(type);
  if (!it)
    return {};
  unsigned w = it.getWidth();
  auto i = [&](const APInt &v) -> TypedAttr { return IntegerAttr::get(it, v); };
  return llvm::TypeSwitch<Operation *, TypedAttr>(combiner)
      .Case<arith::AddIOp, arith::OrIOp, arith::XOrIOp, arith::MaxUIOp>(
          [&](Operation *) { return i(APInt::getZero(w)); })
      .Case([&](arith::MulIOp) { return i(APInt(w, 1)); })
      .Case<arith::AndIOp, arith::MinUIOp>(
          [&](Operation *) { return i(APInt::getAllOnes(w)); })
      .Case([&](arith::MaxSIOp) { return i(APInt::getSignedMinValue(w)); })
      .Case([&](arith::MinSIOp) { return i(APInt::getSignedMaxValue(w)); })
      .Default([](Operation *) { return TypedAttr(); });
}

/// The op that combines `op`'s running value with its term: the body
/// yields `combine(out, term)` (or `combine(term, out)`) of a kind with an
/// identity, and that is the running value's one use. Null otherwise.
Operation *rowCombiner(linalg::LinalgOp op) {
  BlockArgument acc = op.getRegionOutputArgs()[0];
  auto yield = cast<linalg::YieldOp>(op.getBlock()->getTerminator());
  Operation *c = yield.getValues()[0].getDefiningOp();
  if (!c || c->getBlock() != op.getBlock() || c->getNumOperands() != 2 ||
      c->getNumResults() != 1 || !c->hasOneUse() || !acc.hasOneUse() ||
      acc.getUses().begin()->getOwner() != c ||
      c->getResult(0).getType() != acc.getType() ||
      c->getOperand(0) == c->getOperand(1))
    return nullptr;
  if (!combinerIdentity(c, acc.getType()))
    return nullptr;
  return c;
}

/// `combine(acc, term)` as `combiner` does it (its operand order, its
/// attributes).
Value emitCombine(OpBuilder &b, Operation *combiner, Value acc, Value term,
                  Value origAcc) {
  IRMapping map;
  Value origTerm = combiner->getOperand(0) == origAcc
                       ? combiner->getOperand(1)
                       : combiner->getOperand(0);
  map.map(origAcc, acc);
  map.map(origTerm, term);
  return b.clone(*combiner, map)->getResult(0);
}

/// `v` of lane `lane ^ offset` (all 32 lanes of the warp take part): values
/// narrower than 32 bits travel zero-extended in an i32, 64-bit ones as two
/// i32 halves.
Value shuffleXor(OpBuilder &b, Location loc, Value v, int32_t offset) {
  Type t = v.getType();
  unsigned bits = t.getIntOrFloatBitWidth();
  Type i32 = b.getI32Type();
  auto shfl = [&](Value x) {
    return gpu::ShuffleOp::create(b, loc, x, offset, 32, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  if (bits == 32 && t.isF32())
    return shfl(v);
  Type it = b.getIntegerType(bits);
  Value x = isa<FloatType>(t) ? arith::BitcastOp::create(b, loc, it, v) : v;
  Value r;
  if (bits == 32) {
    r = shfl(x);
  } else if (bits < 32) {
    Value wide = arith::ExtUIOp::create(b, loc, i32, x);
    r = arith::TruncIOp::create(b, loc, it, shfl(wide));
  } else { // 64
    Value lo = arith::TruncIOp::create(b, loc, i32, x);
    Value hi = arith::TruncIOp::create(
        b, loc, i32,
        arith::ShRUIOp::create(
            b, loc, x, arith::ConstantIntOp::create(b, loc, it, 32)));
    Value rlo = arith::ExtUIOp::create(b, loc, it, shfl(lo));
    Value rhi = arith::ShLIOp::create(
        b, loc, arith::ExtUIOp::create(b, loc, it, shfl(hi)),
        arith::ConstantIntOp::create(b, loc, it, 32));
    r = arith::OrIOp::create(b, loc, rlo, rhi);
  }
  return isa<FloatType>(t) ? arith::BitcastOp::create(b, loc, t, r).getResult()
                           : r;
}

/// A reduction runs on one warp per row when it reduces at least this many
/// elements, and on a block of kRowBlockWarps warps per row from
/// kBlockRowLength elements on (and for full reductions).
constexpr int64_t kWarp = 32, kMinRowLength = 32, kBlockRowLength = 4096,
                  kRowsPerBlock = 8, kRowBlockWarps = 8, kFullBlockWarps = 32;

/// Whether `op` is a reduction the warp reductions take: static ranges, its
/// parallel loops first, its one output indexed by every parallel loop, at
/// least kMinRowLength elements per output, a combining body, and every
/// buffer read along the reduction read along its innermost loop with unit
/// stride (consecutive lanes read consecutive elements).
bool isWarpReducible(linalg::LinalgOp op) {
  if (!isa<linalg::GenericOp, linalg::ReduceOp>(op))
    return false;
  if (op.getNumReductionLoops() == 0 || !op.hasPureBufferSemantics() ||
      op.getNumDpsInits() != 1 || op->getParentOfType<scf::ParallelOp>() ||
      op->getParentOfType<gpu::LaunchOp>())
    return false;
  unsigned numLoops = op.getNumLoops(), numParallel = op.getNumParallelLoops();
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  for (unsigned d = 0; d < numLoops; ++d)
    if ((d < numParallel) != (iterators[d] == utils::IteratorType::parallel))
      return false;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  int64_t reduction = 1;
  for (unsigned d = 0; d < numLoops; ++d) {
    if (ShapedType::isDynamic(ranges[d]))
      return false;
    if (d >= numParallel)
      reduction *= ranges[d];
  }
  if (reduction < kMinRowLength)
    return false;
  OpOperand *init = op.getDpsInitOperand(0);
  auto outType = dyn_cast<MemRefType>(init->get().getType());
  if (!outType)
    return false;
  Type elem = outType.getElementType();
  if (!(elem.isF16() || elem.isBF16() || elem.isF32() || elem.isF64() ||
        elem.isInteger(1) || elem.isInteger(8) || elem.isInteger(16) ||
        elem.isInteger(32) || elem.isInteger(64)))
    return false;
  AffineMap out = op.getMatchingIndexingMap(init);
  if (!out.isProjectedPermutation() || out.getNumResults() != numParallel)
    return false;
  for (AffineExpr e : out.getResults())
    if (cast<AffineDimExpr>(e).getPosition() >= numParallel)
      return false;
  for (OpOperand *in : op.getDpsInputOperands()) {
    if (in->get() == init->get())
      return false;
    auto type = dyn_cast<MemRefType>(in->get().getType());
    if (!type)
      continue;
    AffineMap m = op.getMatchingIndexingMap(in);
    bool readsAlongReduction = false;
    for (unsigned d = numParallel; d < numLoops; ++d)
      readsAlongReduction |= m.isFunctionOfDim(d);
    if (!readsAlongReduction)
      continue;
    if (m.getNumResults() == 0)
      return false;
    auto last = dyn_cast<AffineDimExpr>(m.getResults().back());
    if (!last || last.getPosition() != numLoops - 1)
      return false;
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(type.getStridesAndOffset(strides, offset)) || strides.empty() ||
        strides.back() != 1)
      return false;
  }
  return rowCombiner(op) != nullptr;
}

/// Every reduction that isWarpReducible takes runs on one warp per output
/// element ("row"), or a block per row for long rows and full reductions:
/// lane l of a row's W warps combines the row's elements l, l + 32W,
/// l + 64W, ... (from the kind's identity), the lanes of a warp then combine
/// their values in a butterfly of gpu.shuffle xor (16, 8, 4, 2, 1); with
/// several warps per row, each warp's value goes through shared memory to
/// the first warp, which combines them in the same way. Lane 0 combines the
/// row's value into the output element. A full reduction of at least
/// kGridReduceLength elements runs in two launches: up to kGridBlocks
/// blocks of 8 warps each combine a grid-strided part into a temporary,
/// then one block of 32 warps combines the temporary into the output. A
/// reassociation of the serial order: sums and products change by rounding
/// only, max/min not at all. One thread per row took ~190 ms of a
/// GPT-2-small step on an H200 (LayerNorm, softmax, cross-entropy and their
/// gradients).
///
///   linalg.generic {iterator_types = ["parallel", "reduction"]}
///       ins(%x : memref<512x768xf32>) outs(%m : memref<512xf32>)
///       { maximumf }
/// becomes
///   gpu.launch blocks(64) threads(32, 8) {
///     row = bid.x * 8 + tid.y
///     part = scf.for k = tid.x to 768 step 32 (a = -inf) { max(a, x[row, k]) }
///     part = max(part, shuffle xor part 16) ... (8, 4, 2, 1)
///     if tid.x == 0 { m[row] = max(m[row], part) }
///   }
constexpr int64_t kGridReduceLength = 1 << 16, kGridBlocks = 1024,
                  kGridChunk = 16;

/// One launch of the warp reductions: `blocks` blocks of 32 x (`warps` or
/// `rowsPerBlock`) threads, `rows` rows of `length` elements. `term(b, row,
/// k, acc)` combines element k of row `row` into acc; `write(b, row,
/// value)` runs on lane 0 with the row's value. With `gridStride` (warps >
/// 1, one row a block), block r starts at r * 32W and every thread steps by
/// blocks * 32W (a full reduction's first stage; `row` is the block).
void emitWarpLaunch(
    OpBuilder &b, Location loc, int64_t blocks, int64_t warps,
    int64_t rowsPerBlock, int64_t rows, int64_t length, bool gridStride,
    Type elem, TypedAttr identity, Operation *combiner, Value origAcc,
    function_ref<Value(OpBuilder &, Value, Value, Value)> term,
    function_ref<void(OpBuilder &, Value, Value)> write) {
  OpBuilder::InsertionGuard outer(b);
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  SmallVector<Type> shared;
  if (warps > 1)
    shared.push_back(MemRefType::get(
        {warps}, elem, MemRefLayoutAttrInterface(),
        gpu::AddressSpaceAttr::get(b.getContext(),
                                   gpu::AddressSpace::Workgroup)));
  Value one = index(1);
  // Threads: x the lane, y the warp of the row (warps > 1) or the row in
  // the block.
  auto launch = gpu::LaunchOp::create(
      b, loc, index(blocks), one, one, index(kWarp),
      index(warps > 1 ? warps : rowsPerBlock), one,
      /*dynamicSharedMemorySize=*/nullptr, /*asyncTokenType=*/nullptr,
      /*asyncDependencies=*/{}, /*workgroupAttributions=*/shared);
  Block &body = launch.getBody().front();
  b.setInsertionPointToStart(&body);
  gpu::TerminatorOp::create(b, loc);
  b.setInsertionPointToStart(&body);
  Value lane = launch.getThreadIds().x, tidY = launch.getThreadIds().y;
  Value bid = launch.getBlockIds().x;
  Value row = bid, first = lane;
  int64_t step = kWarp * warps;
  if (warps > 1)
    first = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, tidY, index(kWarp)), lane);
  else
    row = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, bid, index(rowsPerBlock)), tidY);
  if (gridStride) {
    first = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, bid, index(step)), first);
    step *= blocks;
  }
  // Rows past the end (the last block's, warp-uniform: a warp is one row).
  if (rows % rowsPerBlock != 0) {
    Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                          row, index(rows));
    auto guard = scf::IfOp::create(b, loc, inRange, /*withElse=*/false);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
  }
  Value init = arith::ConstantOp::create(b, loc, identity);
  auto loop = scf::ForOp::create(b, loc, first, index(length), index(step),
                                 ValueRange{init});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    scf::YieldOp::create(b, loc,
                         term(b, row, loop.getInductionVar(),
                              loop.getRegionIterArgs()[0]));
  }
  auto butterfly = [&](Value v) {
    for (int32_t offset = kWarp / 2; offset >= 1; offset /= 2)
      v = emitCombine(b, combiner, v, shuffleXor(b, loc, v, offset), origAcc);
    return v;
  };
  Value part = butterfly(loop.getResult(0));
  Value zeroIdx = index(0);
  Value isLane0 =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, zeroIdx);
  if (warps > 1) {
    // Each warp's value to shared memory; the first warp combines them.
    Value buf = launch.getWorkgroupAttributions()[0];
    auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(store.thenBlock()->getTerminator());
      memref::StoreOp::create(b, loc, part, buf, ValueRange{tidY});
    }
    gpu::BarrierOp::create(b, loc);
    Value firstWarp =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tidY, zeroIdx);
    auto combineWarps = scf::IfOp::create(b, loc, firstWarp, /*withElse=*/false);
    b.setInsertionPoint(combineWarps.thenBlock()->getTerminator());
    Value hasWarp = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                          lane, index(warps));
    auto read = scf::IfOp::create(b, loc, TypeRange{elem}, hasWarp,
                                  /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(read.thenBlock());
      scf::YieldOp::create(
          b, loc,
          ValueRange{memref::LoadOp::create(b, loc, buf, ValueRange{lane})
                         .getResult()});
      b.setInsertionPointToStart(read.elseBlock());
      scf::YieldOp::create(
          b, loc,
          ValueRange{arith::ConstantOp::create(b, loc, identity).getResult()});
    }
    part = butterfly(read.getResult(0));
  }
  auto writeIf = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
  b.setInsertionPoint(writeIf.thenBlock()->getTerminator());
  write(b, row, part);
}

void warpReductions(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (isWarpReducible(op))
      ops.push_back(op);
  });
  OpBuilder b(module.getContext());
  for (linalg::LinalgOp op : ops) {
    Location loc = op.getLoc();
    b.setInsertionPoint(op);
    unsigned numParallel = op.getNumParallelLoops(), numLoops = op.getNumLoops();
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t rows = 1, length = 1;
    for (unsigned d = 0; d < numLoops; ++d)
      (d < numParallel ? rows : length) *= ranges[d];
    auto index = [&](OpBuilder &ib, int64_t v) -> Value {
      return arith::ConstantIndexOp::create(ib, loc, v);
    };
    Value outBuf = op.getDpsInits()[0];
    Type elem = cast<MemRefType>(outBuf.getType()).getElementType();
    Operation *combiner = rowCombiner(op);
    BlockArgument origAcc = op.getRegionOutputArgs()[0];
    TypedAttr identity = combinerIdentity(combiner, elem);
    AffineMap outMap = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
    // The loop values of row `row`'s parallel loops.
    auto rowIvs = [&](OpBuilder &ib, Value row) {
      SmallVector<Value> ivs(numLoops);
      Value rest = row;
      for (int64_t d = static_cast<int64_t>(numParallel) - 1; d >= 0; --d) {
        ivs[d] = arith::RemUIOp::create(ib, loc, rest, index(ib, ranges[d]));
        rest = arith::DivUIOp::create(ib, loc, rest, index(ib, ranges[d]));
      }
      return ivs;
    };
    // Element k of row `row` combined into acc (the op's body).
    auto term = [&](OpBuilder &ib, Value row, Value k, Value acc) {
      SmallVector<Value> ivs = rowIvs(ib, row);
      for (int64_t d = numLoops - 1; d >= static_cast<int64_t>(numParallel);
           --d) {
        ivs[d] = arith::RemUIOp::create(ib, loc, k, index(ib, ranges[d]));
        k = arith::DivUIOp::create(ib, loc, k, index(ib, ranges[d]));
      }
      return emitSumTermAt(ib, loc, op, ivs, acc);
    };
    // out[row] = combine(out[row], value).
    auto writeOut = [&](OpBuilder &ib, Value row, Value value) {
      SmallVector<Value> ivs = rowIvs(ib, row), at;
      for (AffineExpr e : outMap.getResults())
        at.push_back(ivs[cast<AffineDimExpr>(e).getPosition()]);
      Value old = memref::LoadOp::create(ib, loc, outBuf, at);
      memref::StoreOp::create(
          ib, loc, emitCombine(ib, combiner, old, value, origAcc), outBuf, at);
    };
    if (numParallel == 0 && length >= kGridReduceLength) {
      // Two launches: blocks of 8 warps into a temporary, then one block.
      int64_t blocks = std::min<int64_t>(
          kGridBlocks, (length + kWarp * kRowBlockWarps * kGridChunk - 1) /
                           (kWarp * kRowBlockWarps * kGridChunk));
      Value temp =
          memref::AllocOp::create(b, loc, MemRefType::get({blocks}, elem));
      emitWarpLaunch(
          b, loc, blocks, kRowBlockWarps, 1, blocks, length,
          /*gridStride=*/true, elem, identity, combiner, origAcc,
          [&](OpBuilder &ib, Value, Value k, Value acc) {
            return term(ib, index(ib, 0), k, acc);
          },
          [&](OpBuilder &ib, Value block, Value value) {
            memref::StoreOp::create(ib, loc, value, temp, ValueRange{block});
          });
      emitWarpLaunch(
          b, loc, 1, kFullBlockWarps, 1, 1, blocks, /*gridStride=*/false,
          elem, identity, combiner, origAcc,
          [&](OpBuilder &ib, Value, Value k, Value acc) {
            Value v = memref::LoadOp::create(ib, loc, temp, ValueRange{k});
            return emitCombine(ib, combiner, acc, v, origAcc);
          },
          writeOut);
      memref::DeallocOp::create(b, loc, temp);
      op.erase();
      continue;
    }
    // Warps per row and rows per block.
    int64_t warps = 1, rowsPerBlock = std::min(rows, kRowsPerBlock);
    if (numParallel == 0) {
      warps = kFullBlockWarps;
      rowsPerBlock = 1;
    } else if (length >= kBlockRowLength) {
      warps = kRowBlockWarps;
      rowsPerBlock = 1;
    }
    int64_t blocks = (rows + rowsPerBlock - 1) / rowsPerBlock;
    emitWarpLaunch(b, loc, blocks, warps, rowsPerBlock, rows, length,
                   /*gridStride=*/false, elem, identity, combiner, origAcc,
                   term, writeOut);
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


struct WarpReductionsPass
    : mlir::shardx::impl::WarpReductionsPassBase<WarpReductionsPass> {
  void runOnOperation() override { warpReductions(getOperation()); }
};

} // namespace
