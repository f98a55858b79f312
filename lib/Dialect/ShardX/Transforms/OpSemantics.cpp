//===- OpSemantics.cpp - What propagation knows of op bodies --------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "OpSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::ReduceOp;

/// The combiner of a linalg op's reduction, when its yield is
/// `combine(out, x)`.
std::optional<ReduceOp> mlir::shardx::getCombiner(linalg::LinalgOp op) {
  if (op->getNumResults() != 1 || op.getNumDpsInits() != 1)
    return std::nullopt;
  Block *body = op.getBlock();
  auto yield = dyn_cast<linalg::YieldOp>(body->getTerminator());
  if (!yield || yield.getNumOperands() != 1)
    return std::nullopt;
  Operation *def = yield.getOperand(0).getDefiningOp();
  if (!def || def->getNumOperands() != 2)
    return std::nullopt;
  Value out = body->getArguments().back();
  if (def->getOperand(0) != out && def->getOperand(1) != out)
    return std::nullopt;
  if (isa<arith::AddFOp, arith::AddIOp>(def))
    return ReduceOp::Sum;
  if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MaxSIOp>(def))
    return ReduceOp::Max;
  if (isa<arith::MinimumFOp, arith::MinNumFOp, arith::MinSIOp>(def))
    return ReduceOp::Min;
  if (isa<arith::MulFOp, arith::MulIOp>(def))
    return ReduceOp::Prod;
  return std::nullopt;
}

/// Whether `value` is a linalg.fill (of anything) with the identity of
/// `combiner`.
bool mlir::shardx::isIdentityFill(Value value, ReduceOp combiner) {
  auto fill = value.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  Value scalar = fill.getInputs()[0];
  FloatAttr f;
  IntegerAttr i;
  if (matchPattern(scalar, m_Constant(&f))) {
    double v = f.getValueAsDouble();
    switch (combiner) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return v == 0.0;
    case ReduceOp::Prod:
      return v == 1.0;
    case ReduceOp::Max:
      return std::isinf(v) && v < 0;
    case ReduceOp::Min:
      return std::isinf(v) && v > 0;
    }
  }
  if (matchPattern(scalar, m_Constant(&i))) {
    const APInt &v = i.getValue();
    switch (combiner) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return v.isZero();
    case ReduceOp::Prod:
      return v.isOne();
    case ReduceOp::Max:
      return v.isMinSignedValue();
    case ReduceOp::Min:
      return v.isMaxSignedValue();
    }
  }
  return false;
}

static bool isZeroConstant(Value v) {
  FloatAttr f;
  IntegerAttr i;
  if (matchPattern(v, m_Constant(&f)))
    return f.getValueAsDouble() == 0.0;
  if (matchPattern(v, m_Constant(&i)))
    return i.getValue().isZero();
  return false;
}

/// Linearity of scalar code in a set of "partial" values: Linear (a linear
/// function of them), Constant (independent of them) or Other.
namespace {
enum class Lin { Constant, Linear, Other };
} // namespace

static Lin linearity(Value v, DenseMap<Value, Lin> &memo) {
  auto it = memo.find(v);
  if (it != memo.end())
    return it->second;
  Lin result = Lin::Constant;
  Operation *def = v.getDefiningOp();
  if (def) {
    SmallVector<Lin> in;
    for (Value o : def->getOperands())
      in.push_back(linearity(o, memo));
    auto all = [&](Lin l) { return llvm::all_of(in, [&](Lin x) { return x == l; }); };
    bool anyOther = llvm::is_contained(in, Lin::Other);
    bool anyLinear = llvm::is_contained(in, Lin::Linear);
    if (anyOther)
      result = Lin::Other;
    else if (!anyLinear)
      result = Lin::Constant;
    else if (isa<arith::AddFOp, arith::SubFOp, arith::AddIOp, arith::SubIOp>(def))
      result = all(Lin::Linear) ? Lin::Linear : Lin::Other;
    else if (isa<arith::MulFOp, arith::MulIOp>(def))
      result = (in[0] == Lin::Linear) != (in[1] == Lin::Linear) ? Lin::Linear
                                                                 : Lin::Other;
    else if (isa<arith::DivFOp>(def))
      result = in[0] == Lin::Linear && in[1] == Lin::Constant ? Lin::Linear
                                                               : Lin::Other;
    else if (isa<arith::NegFOp, arith::ExtFOp, arith::TruncFOp>(def))
      result = Lin::Linear;
    else if (auto sel = dyn_cast<arith::SelectOp>(def)) {
      Lin t = in[1], f = in[2];
      bool tOk = t == Lin::Linear || isZeroConstant(sel.getTrueValue());
      bool fOk = f == Lin::Linear || isZeroConstant(sel.getFalseValue());
      result = in[0] == Lin::Constant && tOk && fOk ? Lin::Linear : Lin::Other;
    } else
      result = Lin::Other;
  }
  memo[v] = result;
  return result;
}

/// Whether the op computes its results as a linear function of the tensor
/// operands in `partial` (operand indices), treating its init as an
/// accumulator.
bool mlir::shardx::isLinearIn(Operation *op,
                              const llvm::SmallBitVector &partial) {
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(op))
    return true;
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
    DenseMap<Value, Lin> memo;
    Block *body = linalgOp.getBlock();
    for (OpOperand &operand : op->getOpOperands()) {
      if (!isa<RankedTensorType>(operand.get().getType()))
        continue;
      BlockArgument arg = linalgOp.getMatchingBlockArgument(&operand);
      bool isInit = linalgOp.isDpsInit(&operand);
      memo[arg] = partial.test(operand.getOperandNumber()) || isInit
                      ? Lin::Linear
                      : Lin::Constant;
    }
    // Scalar inputs are constants.
    for (BlockArgument arg : body->getArguments())
      memo.try_emplace(arg, Lin::Constant);
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    for (Value v : yield.getOperands())
      if (linearity(v, memo) != Lin::Linear)
        return false;
    return true;
  }
  if (op->getNumRegions() == 0 && op->getNumResults() == 1 &&
      op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    DenseMap<Value, Lin> memo;
    SmallVector<Lin> in;
    for (OpOperand &operand : op->getOpOperands())
      in.push_back(partial.test(operand.getOperandNumber()) ? Lin::Linear
                                                            : Lin::Constant);
    if (isa<arith::AddFOp, arith::SubFOp>(op))
      return in[0] == Lin::Linear && in[1] == Lin::Linear;
    if (isa<arith::MulFOp>(op))
      return (in[0] == Lin::Linear) != (in[1] == Lin::Linear);
    if (isa<arith::DivFOp>(op))
      return in[0] == Lin::Linear && in[1] == Lin::Constant;
    if (isa<arith::NegFOp>(op))
      return true;
  }
  return false;
}

/// Values that are only a shape or a splat: rematerialized in any layout.
bool mlir::shardx::isRematerializable(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (isa<tensor::EmptyOp>(def))
    return true;
  if (auto fill = dyn_cast<linalg::FillOp>(def))
    return fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() != nullptr;
  if (auto cst = dyn_cast<arith::ConstantOp>(def))
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue()))
      return dense.isSplat();
  return false;
}
