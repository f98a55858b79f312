//===- CpuLoops.cpp - Loops LLVM can vectorize, for the CPU target --------===//
//
// Part of ShardX.
//
// Two rewrites that let LLVM's loop vectorizer see the loops of the CPU
// target (it runs at -O2/-O3, `emitArtifact`):
//
// - `shardx-approximate-math`: f32 `math.exp`, `math.erf` and `math.tanh`
//   become MLIR's polynomial approximations (arith/math ops that vectorize)
//   instead of libm calls, which keep every loop that calls them scalar.
// - `shardx-lower-reductions`: a linalg op on buffers whose reduction loops
//   are all inside its parallel loops (a softmax or layer-norm row
//   reduction) becomes loops that keep each accumulator in a register
//   (`scf.for` iter_args): loaded before the reduction loops, stored after.
//   `convert-linalg-to-loops` loads and stores the accumulator in every
//   iteration, a store LLVM cannot move out (it cannot prove that the
//   buffers do not alias). A float add or multiply combining an accumulator
//   is marked `reassoc`, which lets LLVM vectorize the sum (in a different
//   order: results change by rounding only).
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace {

/// The buffer a view is a view of (through subviews, casts, transposes,
/// reshapes).
Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

/// Whether `op` is a reduction that lowerReduction takes: on buffers, every
/// reduction loop after every parallel loop, outputs indexed by parallel
/// loops only, no `linalg.index`, and no input in the buffer of an output
/// (the accumulators live in registers while the inputs are read).
bool isInnerReduction(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumReductionLoops() == 0 ||
      op->getNumRegions() != 1 || !op.getBlock())
    return false;
  unsigned numParallel = op.getNumParallelLoops();
  for (auto [i, it] : llvm::enumerate(op.getIteratorTypesArray()))
    if ((i < numParallel) != (it == utils::IteratorType::parallel))
      return false;
  if (!op.getBlock()->getOps<linalg::IndexOp>().empty())
    return false;
  for (Operation &inner : op.getBlock()->without_terminator())
    if (!isMemoryEffectFree(&inner))
      return false;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    for (unsigned d = numParallel; d < map.getNumDims(); ++d)
      if (map.isFunctionOfDim(d))
        return false;
    for (Value in : op.getDpsInputs())
      if (isa<MemRefType>(in.getType()) &&
          rootBuffer(in) == rootBuffer(init.get()))
        return false;
  }
  return true;
}

/// The indices that `map` gives at loop indices `ivs`, the leading loops
/// (`map` uses no later one).
SmallVector<Value> elementIndices(OpBuilder &b, Location loc, AffineMap map,
                                  ValueRange ivs) {
  SmallVector<Value> indices;
  for (AffineExpr e : map.getResults()) {
    if (auto dim = dyn_cast<AffineDimExpr>(e)) {
      indices.push_back(ivs[dim.getPosition()]);
      continue;
    }
    indices.push_back(affine::AffineApplyOp::create(
        b, loc, AffineMap::get(ivs.size(), 0, e), ivs));
  }
  return indices;
}

/// Marks the float add or multiply that combines the accumulator `acc` into
/// `yielded` as reassociable, so LLVM vectorizes the reduction.
void markReassociable(Value yielded, Value acc) {
  Operation *combiner = yielded.getDefiningOp();
  if (!isa_and_nonnull<arith::AddFOp, arith::MulFOp>(combiner) ||
      !llvm::is_contained(combiner->getOperands(), acc))
    return;
  auto fmf = cast<arith::ArithFastMathInterface>(combiner);
  combiner->setAttr(
      fmf.getFastMathAttrName(),
      arith::FastMathFlagsAttr::get(combiner->getContext(),
                                    fmf.getFastMathFlagsAttr().getValue() |
                                        arith::FastMathFlags::reassoc));
}

/// Replaces `op` (isInnerReduction) by a loop nest over its parallel dims
/// that loads each output element, carries it through the reduction loops
/// and stores it once.
void lowerReduction(linalg::LinalgOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Range> ranges = op.createLoopRanges(b, loc);
  unsigned numParallel = op.getNumParallelLoops();
  SmallVector<Value> lbs, ubs, steps;
  for (Range r : ranges) {
    lbs.push_back(getValueOrCreateConstantIndexOp(b, loc, r.offset));
    ubs.push_back(getValueOrCreateConstantIndexOp(b, loc, r.size));
    steps.push_back(getValueOrCreateConstantIndexOp(b, loc, r.stride));
  }
  auto parallel = [&](ArrayRef<Value> v) { return v.take_front(numParallel); };
  auto reduction = [&](ArrayRef<Value> v) { return v.drop_front(numParallel); };
  Block *body = op.getBlock();
  unsigned numInputs = op.getNumDpsInputs();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());

  auto reduce = [&](OpBuilder &b, Location loc, ValueRange parIvs) {
    SmallVector<Value> inits;
    for (OpOperand &init : op.getDpsInitsMutable())
      inits.push_back(memref::LoadOp::create(
          b, loc, init.get(),
          elementIndices(b, loc, op.getMatchingIndexingMap(&init), parIvs)));
    auto step = [&](OpBuilder &b, Location loc, ValueRange redIvs,
                    ValueRange accs) -> scf::ValueVector {
      SmallVector<Value> ivs(parIvs);
      ivs.append(redIvs.begin(), redIvs.end());
      IRMapping map;
      for (OpOperand *in : op.getDpsInputOperands()) {
        Value arg = body->getArgument(in->getOperandNumber());
        if (!isa<MemRefType>(in->get().getType())) {
          map.map(arg, in->get());
          continue;
        }
        map.map(arg, memref::LoadOp::create(
                         b, loc, in->get(),
                         elementIndices(b, loc, op.getMatchingIndexingMap(in),
                                        ivs)));
      }
      for (auto [k, acc] : llvm::enumerate(accs))
        map.map(body->getArgument(numInputs + k), acc);
      for (Operation &inner : body->without_terminator())
        b.clone(inner, map);
      scf::ValueVector results;
      for (auto [k, v] : llvm::enumerate(yield.getOperands())) {
        results.push_back(map.lookupOrDefault(v));
        markReassociable(results.back(), accs[k]);
      }
      return results;
    };
    scf::LoopNest nest = scf::buildLoopNest(
        b, loc, reduction(lbs), reduction(ubs), reduction(steps), inits, step);
    for (auto [init, result] : llvm::zip(op.getDpsInitsMutable(), nest.results))
      memref::StoreOp::create(
          b, loc, result, init.get(),
          elementIndices(b, loc, op.getMatchingIndexingMap(&init), parIvs));
  };
  scf::buildLoopNest(b, loc, parallel(lbs), parallel(ubs), parallel(steps),
                     reduce);
  op->erase();
}

} // namespace

LogicalResult mlir::shardx::approximateMath(ModuleOp module) {
  RewritePatternSet patterns(module.getContext());
  populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
    return name == math::ExpOp::getOperationName() ||
           name == math::ErfOp::getOperationName() ||
           name == math::TanhOp::getOperationName();
  });
  if (failed(applyPatternsGreedily(module, std::move(patterns))))
    return module.emitError("approximating math functions did not converge");
  // The approximations are chains of fused multiply-adds: the LLVM
  // intrinsic (an instruction that vectorizes), not libm's `fmaf`, which
  // convert-math-to-libm would call. Both are exact, so results are alike.
  module.walk([](math::FmaOp fma) {
    OpBuilder b(fma);
    fma.replaceAllUsesWith(
        LLVM::FMAOp::create(b, fma.getLoc(), fma.getA(), fma.getB(), fma.getC())
            .getResult());
    fma.erase();
  });
  // convert-math-to-libm marks math.absi illegal and has no libm call for
  // it: the LLVM intrinsic (the least integer stays itself, as in eager).
  module.walk([](math::AbsIOp abs) {
    OpBuilder b(abs);
    abs.replaceAllUsesWith(LLVM::AbsOp::create(b, abs.getLoc(), abs.getType(),
                                               abs.getOperand(),
                                               /*is_int_min_poison=*/false)
                               .getResult());
    abs.erase();
  });
  return success();
}

void mlir::shardx::lowerInnerReductions(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (isInnerReduction(op))
      ops.push_back(op);
  });
  for (linalg::LinalgOp op : ops)
    lowerReduction(op);
}

namespace mlir::shardx {
#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#define GEN_PASS_DEF_LOWERINNERREDUCTIONSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct ApproximateMathPass
    : shardx::impl::ApproximateMathPassBase<ApproximateMathPass> {
  void runOnOperation() override {
    if (failed(shardx::approximateMath(getOperation())))
      signalPassFailure();
  }
};

struct LowerInnerReductionsPass
    : shardx::impl::LowerInnerReductionsPassBase<LowerInnerReductionsPass> {
  void runOnOperation() override {
    shardx::lowerInnerReductions(getOperation());
  }
};

} // namespace
