//===- WidenAccumulation.cpp - The shardx-widen-accumulation pass ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-widen-accumulation makes bf16/f16 reductions and contractions
// accumulate in f32 and round once, as PyTorch's low-precision kernels and
// cuBLAS's CUBLAS_COMPUTE_32F do. Without it a bf16 matmul over k = 4096
// sums in bf16 (8 bits of mantissa) and is off by percents.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_WIDENACCUMULATIONPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

/// bf16 and f16: the element types whose accumulation is widened.
bool isLowPrecision(Type type) { return type.isBF16() || type.isF16(); }

/// Whether `op` is a reduction (or, with `contractions`, a contraction) on
/// tensors with one bf16/f16 result whose body this pass can compute in f32.
bool needsWidening(linalg::LinalgOp op, bool contractions) {
  if (!op.hasPureTensorSemantics() || op.getNumDpsInits() != 1 ||
      op->getNumResults() != 1 || op.getNumReductionLoops() == 0 ||
      !isLowPrecision(getElementTypeOrSelf(op->getResult(0).getType())))
    return false;
  if (!contractions && linalg::isaContractionOpInterface(op))
    return false;
  // Generalized named ops have arith bodies; a generic's is checked here.
  if (!isa<linalg::GenericOp>(op))
    return true;
  for (Operation &inner : op.getBlock()->without_terminator()) {
    Dialect *dialect = inner.getDialect();
    if (isa<arith::BitcastOp>(inner) || inner.getNumRegions() != 0)
      return false;
    if (!isa<linalg::IndexOp>(inner) &&
        !isa_and_nonnull<arith::ArithDialect, math::MathDialect>(dialect))
      return false;
  }
  return true;
}

/// An elementwise copy of `value` converted to `element` (arith.extf or
/// arith.truncf), of the same shape.
Value convertTensor(OpBuilder &b, Location loc, Value value, Type element) {
  auto type = cast<RankedTensorType>(value.getType());
  Value empty = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, value), element);
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  bool extend = element.getIntOrFloatBitWidth() >
                type.getElementType().getIntOrFloatBitWidth();
  return linalg::GenericOp::create(
             b, loc, TypeRange{empty.getType()}, ValueRange{value},
             ValueRange{empty}, ArrayRef<AffineMap>{id, id}, iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               Value v =
                   extend ? arith::ExtFOp::create(nb, nloc, element, args[0])
                                .getResult()
                          : arith::TruncFOp::create(nb, nloc, element, args[0])
                                .getResult();
               linalg::YieldOp::create(nb, nloc, v);
             })
      .getResult(0);
}

/// The f32 image of the init `init`: a fill of a constant stays a fill (so
/// a GEMM still sees its zero fill), anything else is extended.
Value widenInit(OpBuilder &b, Location loc, Value init, FloatType wide) {
  if (auto fill = init.getDefiningOp<linalg::FillOp>()) {
    FloatAttr value;
    if (matchPattern(fill.getInputs()[0], m_Constant(&value))) {
      Value empty = tensor::EmptyOp::create(
          b, loc, tensor::getMixedSizes(b, loc, init), wide);
      Value scalar = arith::ConstantOp::create(
          b, loc, b.getFloatAttr(wide, value.getValueAsDouble()));
      return linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
    }
  }
  return convertTensor(b, loc, init, wide);
}

/// Copies the body of `old` into `body` (whose output argument is f32),
/// computing every bf16/f16 value in f32: reads of low-precision operands
/// are extended, the body's extf/truncf between f32 and bf16/f16 vanish.
void widenBody(linalg::GenericOp old, Block &body, FloatType wide) {
  OpBuilder b = OpBuilder::atBlockBegin(&body);
  IRMapping map;
  Block &from = *old.getBody();
  for (auto [o, n] : llvm::zip(from.getArguments(), body.getArguments()))
    map.map(o, n);
  auto widened = [&](Value v) -> Value {
    Value m = map.lookupOrDefault(v);
    if (isLowPrecision(m.getType()))
      return arith::ExtFOp::create(b, m.getLoc(), wide, m);
    return m;
  };
  for (Operation &op : from) {
    if (auto ext = dyn_cast<arith::ExtFOp>(op); ext && ext.getType() == wide) {
      map.map(ext.getResult(), widened(ext.getIn()));
      continue;
    }
    if (auto trunc = dyn_cast<arith::TruncFOp>(op);
        trunc && isLowPrecision(trunc.getType())) {
      map.map(trunc.getResult(), widened(trunc.getIn()));
      continue;
    }
    if (isa<arith::ConstantOp, linalg::IndexOp>(op)) {
      b.clone(op, map);
      continue;
    }
    SmallVector<Value> operands;
    for (Value v : op.getOperands())
      operands.push_back(isa<FloatType>(v.getType()) ? widened(v)
                                                     : map.lookupOrDefault(v));
    Operation *copy = b.clone(op, map);
    copy->setOperands(operands);
    for (OpResult r : copy->getResults())
      if (isLowPrecision(r.getType()))
        r.setType(wide);
    map.map(op.getResults(), copy->getResults());
  }
}

/// Rewrites one op (see the pass description); fails, changing nothing, when
/// a named op cannot be generalized.
LogicalResult widen(IRRewriter &rewriter, linalg::LinalgOp op) {
  rewriter.setInsertionPoint(op);
  linalg::GenericOp generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic) {
    FailureOr<linalg::GenericOp> g = linalg::generalizeNamedOp(rewriter, op);
    if (failed(g))
      return failure();
    generic = *g;
  }
  Location loc = generic.getLoc();
  rewriter.setInsertionPoint(generic);
  Value init = generic.getDpsInits()[0];
  Type low = getElementTypeOrSelf(init.getType());
  FloatType wide = rewriter.getF32Type();
  Value wideInit = widenInit(rewriter, loc, init, wide);
  auto wideOp = linalg::GenericOp::create(
      rewriter, loc, TypeRange{wideInit.getType()}, generic.getDpsInputs(),
      ValueRange{wideInit}, generic.getIndexingMapsArray(),
      generic.getIteratorTypesArray());
  wideOp->setDiscardableAttrs(generic->getDiscardableAttrDictionary());
  SmallVector<Type> argTypes;
  SmallVector<Location> argLocs;
  for (BlockArgument arg : generic.getBody()->getArguments()) {
    argTypes.push_back(arg.getType());
    argLocs.push_back(arg.getLoc());
  }
  argTypes.back() = wide;
  Block *body =
      rewriter.createBlock(&wideOp.getRegion(), {}, argTypes, argLocs);
  widenBody(generic, *body, wide);
  rewriter.setInsertionPointAfter(wideOp);
  Value result = convertTensor(rewriter, loc, wideOp.getResult(0), low);
  rewriter.replaceOp(generic, result);
  return success();
}

struct WidenAccumulationPass
    : public mlir::shardx::impl::WidenAccumulationPassBase<
          WidenAccumulationPass> {
  using WidenAccumulationPassBase::WidenAccumulationPassBase;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation()->walk([&](linalg::LinalgOp op) {
      if (needsWidening(op, contractions))
        ops.push_back(op);
    });
    // Nothing to widen (f32 programs): the IR is unchanged, and saying so
    // spares the pass manager a verifier run over the whole module.
    if (ops.empty())
      return markAllAnalysesPreserved();
    IRRewriter rewriter(&getContext());
    // An op that cannot be generalized (before anything changed) keeps its
    // low-precision accumulation, as without this pass.
    for (linalg::LinalgOp op : ops)
      (void)widen(rewriter, op);
  }
};

} // namespace
