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
  // A whole table is looked up in the index's layout (data parallelism:
  // each rank looks up its own tokens).
  if (!unitStrides(rows) || !unitStrides(cols))
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

SmallVector<OpOperand *> mlir::shardx::capturedTensorUses(Operation *op) {
  SmallVector<OpOperand *> uses;
  op->walk([&](Operation *inner) {
    if (inner == op)
      return;
    for (OpOperand &use : inner->getOpOperands()) {
      Value v = use.get();
      if (isa<RankedTensorType>(v.getType()) &&
          !op->isAncestor(v.getParentRegion()->getParentOp()))
        uses.push_back(&use);
    }
  });
  return uses;
}

std::optional<AlignedGather> mlir::shardx::matchAlignedGather(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || !generic.hasPureTensorSemantics() ||
      generic.getNumDpsInits() != 1 || generic->getNumResults() != 1 ||
      generic.getNumReductionLoops() != 0 || matchEmbeddingLookup(op))
    return std::nullopt;
  for (AffineMap map : generic.getIndexingMapsArray())
    if (!map.isProjectedPermutation())
      return std::nullopt;
  Block *body = generic.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  auto extract = yield.getOperand(0).getDefiningOp<tensor::ExtractOp>();
  if (!extract || extract->getParentOp() != op)
    return std::nullopt;
  Value source = extract.getTensor();
  if (op->isAncestor(source.getParentRegion()->getParentOp()))
    return std::nullopt;
  // The extract is the only read of a tensor captured from above (the
  // source's layout is the captured read's).
  SmallVector<OpOperand *> captured = capturedTensorUses(op);
  if (captured.size() != 1 || captured.front()->getOwner() != extract)
    return std::nullopt;
  auto sourceType = cast<RankedTensorType>(source.getType());
  SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
  AlignedGather gather{source, extract, {}};
  for (auto [k, index] : llvm::enumerate(extract.getIndices())) {
    auto loop = index.getDefiningOp<linalg::IndexOp>();
    int64_t size = sourceType.getDimSize(k);
    if (loop && !ShapedType::isDynamic(size) && ranges[loop.getDim()] == size)
      gather.aligned.push_back(loop.getDim());
    else
      gather.aligned.push_back(-1);
  }
  return gather;
}

/// The aligned gather's layouts when its source is in `source` and its
/// operands in `layoutOf`'s layouts (the file comment of the header).
static std::optional<CapturingOpShardings> shardAlignedGather(
    linalg::GenericOp op, const AlignedGather &gather, const Layout &source,
    function_ref<const Layout &(Value)> layoutOf, int64_t meshRank) {
  if (source.hasPartial())
    return std::nullopt;
  // Loop -> its split: the source's first.
  unsigned loops = op.getNumLoops();
  SmallVector<std::optional<DimSharding>> loopSplit(loops);
  uint64_t used = 0;
  for (const DimSharding &d : source.getDims()) {
    int64_t loop = gather.aligned[d.dim];
    if (loop < 0 || loopSplit[loop] ||
        llvm::any_of(d.splits, [](const Split &s) { return s.stride != 1; }))
      return std::nullopt;
    loopSplit[loop] = d;
    used |= axisMask(d);
  }
  // Then the operands' splits of other loops, on axes still free (unit
  // strides: the body may read the loop's `linalg.index`, which a strided
  // split cannot offset).
  for (OpOperand *in : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(in);
    for (const DimSharding &d : layoutOf(in->get()).getDims()) {
      unsigned loop = cast<AffineDimExpr>(map.getResult(d.dim)).getPosition();
      if (loopSplit[loop] || (axisMask(d) & used) ||
          llvm::any_of(d.splits, [](const Split &s) { return s.stride != 1; }))
        continue;
      loopSplit[loop] = d;
      used |= axisMask(d);
    }
  }
  auto layoutFor = [&](AffineMap map) {
    Layout l(meshRank);
    for (auto [k, expr] : llvm::enumerate(map.getResults()))
      if (const std::optional<DimSharding> &d =
              loopSplit[cast<AffineDimExpr>(expr).getPosition()]) {
        for (const Split &s : d->splits)
          l.addSplit(k, s);
        if (!d->sizes.empty())
          l.setSizes(k, d->sizes);
      }
    return l;
  };
  CapturingOpShardings out;
  for (OpOperand &operand : op->getOpOperands())
    out.operands.push_back(layoutFor(op.getMatchingIndexingMap(&operand)));
  out.results.push_back(out.operands.back());
  out.captured = source;
  return out;
}

std::optional<CapturingOpShardings>
mlir::shardx::shardCapturingOp(Operation *op,
                               function_ref<const Layout &(Value)> layoutOf,
                               int64_t meshRank, bool partialTables) {
  std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
  if (!lookup) {
    std::optional<AlignedGather> gather = matchAlignedGather(op);
    if (!gather)
      return std::nullopt;
    return shardAlignedGather(cast<linalg::GenericOp>(op), *gather,
                              layoutOf(gather->source), layoutOf, meshRank);
  }
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
