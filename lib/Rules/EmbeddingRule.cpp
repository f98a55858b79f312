//===- EmbeddingRule.cpp - The sharding rule of embedding lookups ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Rules/EmbeddingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::axisMask;
using ::shardx::DimSharding;
using ::shardx::Layout;
using ::shardx::ReduceOp;
using ::shardx::Split;

std::optional<EmbeddingLookup>
mlir::shardx::matchEmbeddingLookup(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1 || generic->getNumResults() != 1 ||
      generic.getNumReductionLoops() != 0)
    return std::nullopt;
  Block *body = generic.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  auto extract = yield.getOperand(0).getDefiningOp<tensor::ExtractOp>();
  if (!extract || extract->getParentOp() != op ||
      extract.getIndices().size() != 2)
    return std::nullopt;
  Value table = extract.getTensor();
  if (op->isAncestor(table.getParentRegion()->getParentOp()))
    return std::nullopt;
  auto cast = extract.getIndices()[0].getDefiningOp<arith::IndexCastOp>();
  auto col = extract.getIndices()[1].getDefiningOp<linalg::IndexOp>();
  unsigned loops = generic.getNumLoops();
  if (!cast || cast.getIn() != body->getArgument(0) || !col ||
      col.getDim() != loops - 1)
    return std::nullopt;
  // The index reads the loops before the table's column, as the result's
  // leading dims: a gather along dim 0 (`torch.gather`, whose index also
  // reads the column loop) is no lookup, since a split of the table's
  // columns would split the index's last dim as well.
  AffineMap indexMap = generic.getIndexingMapsArray()[0];
  AffineMap outMap = generic.getIndexingMapsArray()[1];
  if (!outMap.isIdentity() ||
      indexMap != AffineMap::getMultiDimIdentityMap(loops, op->getContext())
                      .getMajorSubMap(loops - 1))
    return std::nullopt;
  return EmbeddingLookup{table, extract};
}

std::optional<EmbeddingShardings>
mlir::shardx::shardEmbeddingLookup(const Layout &table, const Layout &index,
                                   int64_t resultRank, int64_t meshRank,
                                   bool partialTables) {
  const DimSharding *rows = table.getDim(0); // factor v
  const DimSharding *cols = table.getDim(1); // factor d
  auto unitStrides = [](const DimSharding *d) {
    return !d || llvm::all_of(d->splits,
                              [](const Split &s) { return s.stride == 1; });
  };
  // A table pending a sum (or an average) is looked up as it is: the rows
  // a lookup picks are linear in the table, so the result pends the same
  // reduction, the index whole on its axes. Max, min and prod are refused
  // (the table is reduced first), as the other rules take only linear
  // reductions through (Linearity.h).
  uint64_t partialAxes = 0;
  const auto &partials = table.getPartials();
  for (size_t axis = 0; axis < partials.size(); ++axis) {
    if (!partials[axis])
      continue;
    if (!partialTables ||
        (*partials[axis] != ReduceOp::Sum && *partials[axis] != ReduceOp::Avg))
      return std::nullopt;
    partialAxes |= uint64_t(1) << axis;
  }
  if (!(rows || cols || partialAxes) || !unitStrides(rows) ||
      !unitStrides(cols))
    return std::nullopt;
  // Factors b...: the index's splits, unless they share an axis with the
  // table's (the table leads).
  uint64_t tableAxes =
      (rows ? axisMask(*rows) : 0) | (cols ? axisMask(*cols) : 0) | partialAxes;
  Layout idx = index;
  bool disjoint = !idx.hasPartial();
  for (const auto &d : idx.getDims())
    disjoint &= !(axisMask(d) & tableAxes);
  if (!disjoint)
    idx = Layout(meshRank);
  Layout result(meshRank);
  for (const auto &d : idx.getDims()) {
    for (const Split &s : d.splits)
      result.addSplit(d.dim, s);
    if (!d.sizes.empty())
      result.setSizes(d.dim, d.sizes);
  }
  // Factor d: the result's last dim.
  int64_t last = resultRank - 1;
  if (cols) {
    for (const Split &s : cols->splits)
      result.addSplit(last, s);
    if (!cols->sizes.empty())
      result.setSizes(last, cols->sizes);
  }
  // Factor v: the masked lookup's pending sum.
  Layout init = result;
  if (rows)
    for (const Split &s : rows->splits)
      result.setPartial(s.axis, ReduceOp::Sum);
  // The table's pending reductions.
  for (size_t axis = 0; axis < partials.size(); ++axis)
    if (partials[axis])
      result.setPartial(axis, *partials[axis]);
  return EmbeddingShardings{std::move(idx), std::move(init), std::move(result)};
}

std::optional<CapturingOpShardings>
mlir::shardx::shardCapturingOp(Operation *op,
                               function_ref<const Layout &(Value)> layoutOf,
                               int64_t meshRank, bool partialTables) {
  std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
  if (!lookup)
    return std::nullopt;
  const Layout &table = layoutOf(lookup->table);
  auto generic = cast<linalg::GenericOp>(op);
  int64_t rank =
      cast<RankedTensorType>(generic->getResult(0).getType()).getRank();
  std::optional<EmbeddingShardings> s =
      shardEmbeddingLookup(table, layoutOf(generic.getDpsInputs()[0]), rank,
                           meshRank, partialTables);
  if (!s)
    return std::nullopt;
  CapturingOpShardings out;
  out.operands = {std::move(s->index), std::move(s->init)};
  out.results = {std::move(s->result)};
  out.captured = table;
  return out;
}
