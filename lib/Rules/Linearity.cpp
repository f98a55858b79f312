//===- Linearity.cpp - Which operands an op is linear in ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Linearity.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::shardx;

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

bool mlir::shardx::isBodyLinearIn(linalg::LinalgOp op,
                                  const llvm::SmallBitVector &partial) {
  DenseMap<Value, Lin> memo;
  Block *body = op.getBlock();
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType()))
      continue;
    BlockArgument arg = op.getMatchingBlockArgument(&operand);
    bool isInit = op.isDpsInit(&operand);
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

bool mlir::shardx::isArithLinearIn(Operation *op,
                                   const llvm::SmallBitVector &partial) {
  if (op->getNumRegions() != 0 || op->getNumResults() != 1)
    return false;
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
  return false;
}
