//===- GroupedMatmul.cpp - The importer's grouped matmuls -----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

bool isDim(AffineExpr e, unsigned d) {
  auto dim = dyn_cast<AffineDimExpr>(e);
  return dim && dim.getPosition() == d;
}

bool mapIs(AffineMap map, ArrayRef<unsigned> dims) {
  if (map.getNumResults() != dims.size())
    return false;
  for (auto [e, d] : llvm::zip(map.getResults(), dims))
    if (!isDim(e, d))
      return false;
  return true;
}

/// `yield(add(out, select(index(eLoop) == index_cast(g), x * w, 0)))`, the
/// importer's masked term (`_masked_term`, importer/ops/grouped.py), with
/// `g` block argument `gArg` and `out` the last one. With `offset`, the
/// expert may also be `index(eLoop) + v`, `v` defined outside `op` (what
/// shardx-localize makes of a split expert loop): `*offset` is `v`, or
/// null without one.
bool isMaskedTerm(linalg::GenericOp op, unsigned eLoop, unsigned gArg,
                  Value *offset = nullptr) {
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (yield.getNumOperands() != 1)
    return false;
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || add.getLhs() != body.getArguments().back())
    return false;
  auto select = add.getRhs().getDefiningOp<arith::SelectOp>();
  if (!select || !matchPattern(select.getFalseValue(), m_AnyZeroFloat()))
    return false;
  auto mul = select.getTrueValue().getDefiningOp<arith::MulFOp>();
  if (!mul || mul.getLhs() != body.getArgument(0) ||
      mul.getRhs() != body.getArgument(1))
    return false;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq)
    return false;
  Value expert = cmp.getLhs();
  if (auto add = expert.getDefiningOp<arith::AddIOp>(); add && offset) {
    if (op->isAncestor(add.getRhs().getParentBlock()->getParentOp()))
      return false;
    *offset = add.getRhs();
    expert = add.getLhs();
  }
  auto index = expert.getDefiningOp<linalg::IndexOp>();
  auto cast = cmp.getRhs().getDefiningOp<arith::IndexCastOp>();
  return index && index.getDim() == eLoop && cast &&
         cast.getIn() == body.getArgument(gArg);
}

} // namespace

std::optional<GroupedMatmulForm>
mlir::shardx::matchGroupedMatmulForm(linalg::GenericOp op) {
  return matchGroupedMatmulForm(op, nullptr);
}

std::optional<GroupedMatmulForm>
mlir::shardx::matchGroupedMatmulForm(linalg::GenericOp op, Value *offset) {
  if (offset)
    *offset = Value();
  if (op.getNumDpsInputs() != 3 || op.getNumDpsInits() != 1 ||
      op.getNumResults() != 1)
    return std::nullopt;
  using utils::IteratorType;
  constexpr IteratorType par = IteratorType::parallel,
                         red = IteratorType::reduction;
  SmallVector<IteratorType> it = op.getIteratorTypesArray();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (it == SmallVector<IteratorType>{par, par, red, red} &&
      mapIs(maps[0], {0, 3}) && mapIs(maps[1], {2, 3, 1}) &&
      mapIs(maps[2], {0}) && mapIs(maps[3], {0, 1}) &&
      isMaskedTerm(op, 2, 2, offset))
    return GroupedMatmulForm::Rows;
  if (it == SmallVector<IteratorType>{par, par, par, red} &&
      mapIs(maps[0], {1, 3}) && mapIs(maps[1], {3, 2}) && mapIs(maps[2], {3}) &&
      mapIs(maps[3], {0, 1, 2}) && isMaskedTerm(op, 0, 2, offset))
    return GroupedMatmulForm::Weights;
  return std::nullopt;
}
