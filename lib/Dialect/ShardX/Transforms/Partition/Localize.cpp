//===- Localize.cpp - SPMD expansion: global program -> local program -----===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-localize builds, for every sharded function, the program each rank
// runs, as upstream's `shard-partition` does: a new body whose arguments
// have their local types (the shard of the global type under the argument's
// layout, dynamic where ranks differ), into which every op of the global
// body is cloned through an `IRMapping`, in program order. A clone's tensor
// results take the local types of the global op's results (under its
// `shardx.layouts`); one function per op family then gives shape-carrying
// ops local shapes (tensor.empty, expand_shape, extract/insert_slice,
// constants, linalg.generic index offsets and embedding lookups). The casts
// that bracket lowered reshards map to their operands. The global body is
// erased last. A new op that carries a shape gets a case in
// `Localizer::localizeOp`; each case reads layouts and global types from the
// global op and rewrites the local clone.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "LayoutUtils.h"
#include "LocalPieces.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Rules/EmbeddingRule.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

#include "llvm/ADT/TypeSwitch.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_LOCALIZEPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Builds the local body of one sharded function.
class Localizer {
public:
  Localizer(func::FuncOp fn, MeshOp mesh, bool groupedRowRuns)
      : fn(fn), pieces(mesh), rewriter(fn.getContext()),
        groupedRowRuns(groupedRowRuns) {}

  LogicalResult run();

private:
  //===--------------------------------------------------------------------===//
  // Op families. Each takes the global op and its local clone (tensor
  // results already of local types, inserted before which the rewriter
  // builds) and returns the op whose results replace the global op's.
  //===--------------------------------------------------------------------===//

  /// Replaces `clone` with `fresh`.
  Operation *replaceClone(Operation *clone, Operation *fresh) {
    rewriter.eraseOp(clone);
    return fresh;
  }

  // tensor.empty() : tensor<7x4xf32> on [S(0)] -> tensor.empty(%n) :
  // tensor<?x4xf32>, %n this rank's shard size.
  // A replicated tensor of dynamic global shape is its own local tensor:
  // the clone keeps the (local copies of the) global sizes.
  FailureOr<Operation *> localizeEmpty(tensor::EmptyOp op,
                                       tensor::EmptyOp clone) {
    RankedTensorType local = clone.getType();
    if (local.hasStaticShape() || local == op.getType())
      return clone.getOperation();
    SmallVector<Value> sizes =
        pieces.dynamicSizes(rewriter, op.getLoc(), op.getType(), local,
                            pieces.layoutOf(op.getResult()));
    auto fresh = tensor::EmptyOp::create(rewriter, op.getLoc(), local, sizes);
    fresh->setAttrs(clone->getAttrDictionary());
    return replaceClone(clone, fresh);
  }

  // tensor.expand_shape: the output shape becomes the local one (sizes of
  // dynamic local dims from the layout).
  FailureOr<Operation *> localizeExpandShape(tensor::ExpandShapeOp op,
                                             tensor::ExpandShapeOp clone) {
    RankedTensorType local = clone.getResultType();
    if (local.hasStaticShape()) {
      clone.setStaticOutputShape(local.getShape());
      return clone.getOperation();
    }
    if (local == op.getResultType())
      return clone.getOperation();
    SmallVector<Value> sizes =
        pieces.dynamicSizes(rewriter, op.getLoc(), op.getResultType(), local,
                            pieces.layoutOf(op.getResult()));
    SmallVector<OpFoldResult> shape;
    unsigned next = 0;
    for (int64_t d = 0; d < local.getRank(); ++d)
      shape.push_back(
          local.isDynamicDim(d)
              ? OpFoldResult(sizes[next++])
              : OpFoldResult(rewriter.getIndexAttr(local.getDimSize(d))));
    auto fresh = tensor::ExpandShapeOp::create(
        rewriter, op.getLoc(), local, clone.getSrc(),
        clone.getReassociationIndices(), shape);
    fresh->setAttr(ShardXDialect::getLayoutsAttrName(),
                   clone->getAttr(ShardXDialect::getLayoutsAttrName()));
    return replaceClone(clone, fresh);
  }

  // arith.constant dense<1.0> : tensor<8xf32> on [S(0)] -> a splat of the
  // local type; a sharded non-splat constant is an error.
  FailureOr<Operation *> localizeConstant(arith::ConstantOp op,
                                          arith::ConstantOp clone) {
    auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
    if (!dense || dense.getType() == clone.getType())
      return clone.getOperation();
    if (!dense.isSplat())
      return op.emitError("a sharded non-splat constant cannot be expanded");
    clone.setValueAttr(dense.resizeSplat(cast<ShapedType>(clone.getType())));
    return clone.getOperation();
  }

  // tensor.extract_slice: whole dims that are split take the local source
  // size.
  FailureOr<Operation *> localizeExtractSlice(tensor::ExtractSliceOp clone) {
    RankedTensorType local = clone.getResultType();
    Location loc = clone.getLoc();
    SmallVector<OpFoldResult> sizes = clone.getMixedSizes();
    for (int64_t d = 0; d < local.getRank(); ++d)
      sizes[d] = local.isDynamicDim(d)
                     ? OpFoldResult(tensor::DimOp::create(rewriter, loc,
                                                          clone.getSource(), d))
                     : OpFoldResult(rewriter.getIndexAttr(local.getDimSize(d)));
    auto fresh = tensor::ExtractSliceOp::create(
        rewriter, loc, local, clone.getSource(), clone.getMixedOffsets(), sizes,
        clone.getMixedStrides());
    return replaceClone(clone, fresh);
  }

  // tensor.insert_slice: the inserted sizes are the local source's.
  FailureOr<Operation *> localizeInsertSlice(tensor::InsertSliceOp clone) {
    auto src = cast<RankedTensorType>(clone.getSource().getType());
    Location loc = clone.getLoc();
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < src.getRank(); ++d)
      sizes.push_back(
          src.isDynamicDim(d)
              ? OpFoldResult(
                    tensor::DimOp::create(rewriter, loc, clone.getSource(), d))
              : OpFoldResult(rewriter.getIndexAttr(src.getDimSize(d))));
    auto fresh = tensor::InsertSliceOp::create(
        rewriter, loc, clone.getSource(), clone.getDest(),
        clone.getMixedOffsets(), sizes, clone.getMixedStrides());
    return replaceClone(clone, fresh);
  }

  // linalg.generic: an embedding lookup on a split table reads its local
  // piece; `linalg.index` of a sharded loop gets the rank's offset. The
  // lookup first: it matches the column index as the plain linalg.index the
  // offsets then rewrite.
  FailureOr<Operation *> localizeGeneric(linalg::GenericOp op,
                                         linalg::GenericOp clone) {
    if (auto table = op->getAttrOfType<LayoutAttr>(kTableLayoutAttrName))
      if (failed(matchEmbeddingLookup(op)
                     ? localizeLookup(op, clone, table.getLayout())
                     : localizeGather(op, clone, table.getLayout())))
        return failure();
    if (failed(offsetIndices(op, clone)))
      return failure();
    if (std::optional<GroupedMatmulForm> form = matchGroupedMatmulForm(op);
        form && groupedRowRuns)
      return localizeGroupedMatmul(op, clone, *form);
    return clone.getOperation();
  }

  /// A grouped matmul (GroupedMatmul.h) runs over the rows of this rank's
  /// experts only: the rows' groups are nondecreasing, so the rows of
  /// experts `e0 .. e0 + n - 1` are `[lo, hi)`, `lo` the number of groups
  /// below `e0`, `hi` below `e0 + n` (a run-time count in the static
  /// buffer); the others add nothing to the init. The rows form writes its
  /// product into the init's rows `[lo, hi)`, the weights form sums over
  /// those rows. Left as it is where its rows are split.
  //   linalg.generic ins(%x, %w, %g : tensor<16x16xf32>, ...) outs(%z)
  //   -> %xs = tensor.extract_slice %x[%lo, 0] [%n, 16] [1, 1]
  //      %p = linalg.generic ins(%xs, %w, %gs) outs(%zs : tensor<?x32xf32>)
  //      tensor.insert_slice %p into %z[%lo, 0] [%n, 32] [1, 1]
  FailureOr<Operation *> localizeGroupedMatmul(linalg::GenericOp op,
                                               linalg::GenericOp clone,
                                               GroupedMatmulForm form);

  /// The split of loop `loop` of `op` (from the layouts it reads its
  /// operands in) and the loop's global extent; nullopt when it is whole.
  std::optional<std::pair<DimSharding, int64_t>>
  loopSharding(linalg::GenericOp op, int64_t loop);

  /// An embedding lookup on a split table. Rows outside this rank's piece
  /// read row 0 of the local table and yield zero; the column index (the
  /// result's last loop, which offsetIndices then makes global) is made
  /// local again.
  LogicalResult localizeLookup(linalg::GenericOp op, linalg::GenericOp clone,
                               const Layout &table);

  /// Makes index `dim` of `extract` (in `clone`), which reads a dim split by
  /// `sharding` at a loop's `linalg.index` (which offsetIndices then makes
  /// global), local: minus this rank's first index of that dim.
  void localizeExtractIndex(linalg::GenericOp clone, tensor::ExtractOp extract,
                            unsigned dim, const DimSharding &sharding,
                            int64_t extent);

  /// An aligned gather (EmbeddingRule.h) on a split source: the index of
  /// each split dim (a loop's `linalg.index`, which offsetIndices then makes
  /// global) is made local again.
  LogicalResult localizeGather(linalg::GenericOp op, linalg::GenericOp clone,
                               const Layout &source);

  /// Adds the rank's offset to `linalg.index` ops of sharded loops.
  LogicalResult offsetIndices(linalg::GenericOp op, linalg::GenericOp clone);

  //===--------------------------------------------------------------------===//
  // The function
  //===--------------------------------------------------------------------===//

  /// Windowed dims of the op's rule split over a mesh axis (docs/Rules.md,
  /// "Windowed ops"): an operand read through a window gets a shardx.halo;
  /// a padded result pads only at the ends of the group.
  FailureOr<Operation *> localizeWindows(Operation &op, Operation *clone);

  LogicalResult localizeArguments(Block &global, Block &local);
  void recordResults();
  LogicalResult localizeOp(Operation &op);
  void finishSignature();

  func::FuncOp fn;
  /// Local types and this rank's pieces.
  LocalPieces pieces;
  IRRewriter rewriter;
  /// Whether grouped matmuls run over their own experts' rows only.
  bool groupedRowRuns;
  /// Global values -> their local counterparts.
  IRMapping mapping;
  SmallVector<Attribute> argTypes, argLayouts, resultTypes, resultLayouts;
};

LogicalResult Localizer::localizeLookup(linalg::GenericOp op,
                                        linalg::GenericOp clone,
                                        const Layout &table) {
  std::optional<EmbeddingLookup> global = matchEmbeddingLookup(op);
  std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(clone);
  if (!global || !lookup)
    return op.emitError("embedding lookup changed shape during expansion");
  auto tableType = cast<RankedTensorType>(global->table.getType());
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(clone);
  Location loc = clone.getLoc();
  auto extract = cast<tensor::ExtractOp>(lookup->extract);
  if (const DimSharding *cols = table.getDim(1))
    localizeExtractIndex(clone, extract, 1, *cols, tableType.getDimSize(1));
  if (const DimSharding *rows = table.getDim(0)) {
    auto [lo, size] =
        pieces.emitPiece(rewriter, loc, *rows, tableType.getDimSize(0));
    rewriter.setInsertionPoint(extract);
    Value row = extract.getIndices()[0];
    Value rel = arith::SubIOp::create(rewriter, loc, row, lo);
    Value geLo = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::sge,
                                       row, lo);
    Value ltHi = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::slt,
                                       rel, size);
    Value in = arith::AndIOp::create(rewriter, loc, geLo, ltHi);
    Value zeroIdx = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value safe = arith::SelectOp::create(rewriter, loc, in, rel, zeroIdx);
    extract.getIndicesMutable()[0].assign(safe);
    rewriter.setInsertionPointAfter(extract);
    Type elt = extract.getType();
    Value zero = arith::ConstantOp::create(rewriter, loc, elt,
                                           rewriter.getZeroAttr(elt));
    Value masked = arith::SelectOp::create(rewriter, loc, in, extract, zero);
    rewriter.replaceAllUsesExcept(extract.getResult(), masked,
                                  masked.getDefiningOp());
  }
  clone->removeAttr(kTableLayoutAttrName);
  return success();
}

void Localizer::localizeExtractIndex(linalg::GenericOp clone,
                                     tensor::ExtractOp extract, unsigned dim,
                                     const DimSharding &sharding,
                                     int64_t extent) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(clone);
  Value lo = pieces.emitPiece(rewriter, clone.getLoc(), sharding, extent).first;
  rewriter.setInsertionPoint(extract);
  Value index = extract.getIndices()[dim];
  Value local = arith::SubIOp::create(rewriter, extract.getLoc(), index, lo);
  extract.getIndicesMutable()[dim].assign(local);
}

LogicalResult Localizer::localizeGather(linalg::GenericOp op,
                                        linalg::GenericOp clone,
                                        const Layout &source) {
  std::optional<AlignedGather> global = matchAlignedGather(op);
  std::optional<AlignedGather> gather = matchAlignedGather(clone);
  if (!global || !gather)
    return op.emitError("gather changed shape during expansion");
  auto sourceType = cast<RankedTensorType>(global->source.getType());
  OpBuilder::InsertionGuard guard(rewriter);
  auto extract = cast<tensor::ExtractOp>(gather->extract);
  for (const DimSharding &d : source.getDims()) {
    if (global->aligned[d.dim] < 0)
      return op.emitError("gather reads a split source dim at computed "
                          "indices");
    localizeExtractIndex(clone, extract, d.dim, d,
                         sourceType.getDimSize(d.dim));
  }
  clone->removeAttr(kTableLayoutAttrName);
  return success();
}

std::optional<std::pair<DimSharding, int64_t>>
Localizer::loopSharding(linalg::GenericOp op, int64_t loop) {
  // Loop -> (layout dim sharding, global extent) from any operand / result.
  auto linalgOp = cast<linalg::LinalgOp>(op.getOperation());
  std::optional<std::pair<DimSharding, int64_t>> sharding;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type)
      continue;
    AffineMap map = linalgOp.getMatchingIndexingMap(&operand);
    // The layout the op reads the operand in: a reshard's result records
    // none (as in localizeWindows).
    LayoutAttr required = requiredLayout(operand);
    Layout layout =
        required ? required.getLayout() : pieces.layoutOf(operand.get());
    for (auto [k, expr] : llvm::enumerate(map.getResults())) {
      auto d = dyn_cast<AffineDimExpr>(expr);
      if (!d || d.getPosition() != loop)
        continue;
      if (const auto *ds = layout.getDim(k))
        sharding = {*ds, type.getDimSize(k)};
    }
  }
  return sharding;
}

LogicalResult Localizer::offsetIndices(linalg::GenericOp op,
                                       linalg::GenericOp clone) {
  SmallVector<linalg::IndexOp> indices;
  clone.getRegion().walk([&](linalg::IndexOp i) { indices.push_back(i); });
  if (indices.empty())
    return success();
  for (linalg::IndexOp index : indices) {
    std::optional<std::pair<DimSharding, int64_t>> split =
        loopSharding(op, index.getDim());
    if (!split)
      continue;
    auto &[sharding, extent] = *split;
    if (sharding.sizes.empty() &&
        llvm::any_of(sharding.splits,
                     [](const Split &s) { return s.stride != 1; }))
      return op.emitError("linalg.index of a loop with a strided split "
                          "cannot be expanded");
    OpBuilder::InsertionGuard guard(rewriter);
    Location loc = index.getLoc();
    Value offset = pieces.emitPiece(rewriter, loc, sharding, extent).first;
    rewriter.setInsertionPointAfter(index);
    auto add = arith::AddIOp::create(rewriter, loc, index.getResult(), offset);
    rewriter.replaceAllUsesExcept(index.getResult(), add.getResult(), add);
  }
  return success();
}

FailureOr<Operation *>
Localizer::localizeGroupedMatmul(linalg::GenericOp op, linalg::GenericOp clone,
                                 GroupedMatmulForm form) {
  if (loopSharding(op, rowLoop(form)))
    return clone.getOperation();
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(clone);
  Location loc = clone.getLoc();
  // This rank's experts: [first, first + count).
  Value first, count;
  int64_t experts = cast<RankedTensorType>(form == GroupedMatmulForm::Rows
                                               ? op.getDpsInputs()[1].getType()
                                               : op.getResult(0).getType())
                        .getDimSize(0);
  if (auto split = loopSharding(op, expertLoop(form))) {
    std::tie(first, count) =
        pieces.emitPiece(rewriter, loc, split->first, split->second);
  } else {
    first = arith::ConstantIndexOp::create(rewriter, loc, 0);
    // Whole experts of a dynamic count (a local program's weights, e.g.
    // shardx-ragged-dispatch's on uneven experts): all of them.
    count = ShapedType::isDynamic(experts)
                ? tensor::DimOp::create(rewriter, loc,
                                        form == GroupedMatmulForm::Rows
                                            ? clone.getDpsInputs()[1]
                                            : clone.getDpsInits()[0],
                                        0)
                      .getResult()
                : arith::ConstantIndexOp::create(rewriter, loc, experts)
                      .getResult();
  }
  Type i64 = rewriter.getI64Type();
  Value below = arith::IndexCastOp::create(rewriter, loc, i64, first);
  Value end = arith::IndexCastOp::create(
      rewriter, loc, i64, arith::AddIOp::create(rewriter, loc, first, count));
  // lo, hi: the rows whose group is below the first expert, below the end.
  Value groups = clone.getDpsInputs()[2];
  auto scalar = RankedTensorType::get({}, i64);
  Value zero = linalg::FillOp::create(
                   rewriter, loc,
                   ValueRange{arith::ConstantOp::create(
                       rewriter, loc, i64, rewriter.getI64IntegerAttr(0))},
                   ValueRange{tensor::EmptyOp::create(rewriter, loc,
                                                      scalar.getShape(), i64)})
                   .getResult(0);
  MLIRContext *ctx = rewriter.getContext();
  AffineMap row = AffineMap::getMultiDimIdentityMap(1, ctx);
  AffineMap all = AffineMap::get(1, 0, ctx);
  auto bounds = linalg::GenericOp::create(
      rewriter, loc, TypeRange{scalar, scalar}, ValueRange{groups},
      ValueRange{zero, zero}, ArrayRef<AffineMap>{row, all, all},
      ArrayRef<utils::IteratorType>{utils::IteratorType::reduction},
      [&](OpBuilder &b, Location l, ValueRange args) {
        auto countBelow = [&](Value limit, Value acc) {
          Value lt = arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt,
                                           args[0], limit);
          return arith::AddIOp::create(b, l, acc,
                                       arith::ExtUIOp::create(b, l, i64, lt));
        };
        linalg::YieldOp::create(
            b, l,
            ValueRange{countBelow(below, args[1]), countBelow(end, args[2])});
      });
  auto toIndex = [&](Value t) -> Value {
    Value v = tensor::ExtractOp::create(rewriter, loc, t, ValueRange{});
    return arith::IndexCastOp::create(rewriter, loc, rewriter.getIndexType(),
                                      v);
  };
  Value lo = toIndex(bounds.getResult(0));
  Value rows =
      arith::SubIOp::create(rewriter, loc, toIndex(bounds.getResult(1)), lo);
  // The slice of `v` whose dim `rowDim` is [lo, lo + rows).
  auto rowsOf = [&](Value v, int64_t rowDim) -> Value {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<OpFoldResult> offsets(type.getRank(), rewriter.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(rewriter, loc, v);
    SmallVector<OpFoldResult> strides(type.getRank(), rewriter.getIndexAttr(1));
    offsets[rowDim] = lo;
    sizes[rowDim] = rows;
    return tensor::ExtractSliceOp::create(rewriter, loc, v, offsets, sizes,
                                          strides);
  };
  Value x = clone.getDpsInputs()[0], w = clone.getDpsInputs()[1];
  Value init = clone.getDpsInits()[0];
  bool byRows = form == GroupedMatmulForm::Rows;
  SmallVector<Value> inputs = {byRows ? rowsOf(x, 0) : rowsOf(x, 1),
                               byRows ? w : rowsOf(w, 0), rowsOf(groups, 0)};
  Value out = byRows ? rowsOf(init, 0) : init;
  auto fresh = linalg::GenericOp::create(
      rewriter, loc, TypeRange{out.getType()}, inputs, ValueRange{out},
      clone.getIndexingMapsArray(), clone.getIteratorTypesArray());
  rewriter.inlineRegionBefore(clone.getRegion(), fresh.getRegion(),
                              fresh.getRegion().end());
  fresh->setDiscardableAttrs(clone->getDiscardableAttrDictionary());
  Operation *result = fresh;
  if (byRows) {
    auto outType = cast<RankedTensorType>(init.getType());
    SmallVector<OpFoldResult> offsets(outType.getRank(),
                                      rewriter.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes =
        tensor::getMixedSizes(rewriter, loc, fresh.getResult(0));
    SmallVector<OpFoldResult> strides(outType.getRank(),
                                      rewriter.getIndexAttr(1));
    offsets[0] = lo;
    sizes[0] = rows;
    result = tensor::InsertSliceOp::create(rewriter, loc, fresh.getResult(0),
                                           init, offsets, sizes, strides);
  }
  return replaceClone(clone, result);
}

/// The arguments of the local body: each tensor argument's local type. Also
/// records the global types and layouts for `shardx.signature`.
LogicalResult Localizer::localizeArguments(Block &global, Block &local) {
  Builder b(fn.getContext());
  for (BlockArgument arg : global.getArguments()) {
    argTypes.push_back(TypeAttr::get(arg.getType()));
    Type type = arg.getType();
    if (!isa<RankedTensorType>(type)) {
      argLayouts.push_back(b.getUnitAttr());
    } else {
      argLayouts.push_back(
          LayoutAttr::get(pieces.getMeshRef(), pieces.layoutOf(arg)));
      FailureOr<RankedTensorType> localType = pieces.localType(arg, fn);
      if (failed(localType))
        return failure();
      type = *localType;
    }
    mapping.map(arg, local.addArgument(type, arg.getLoc()));
  }
  return success();
}

/// Records the global result types and layouts for `shardx.signature`.
void Localizer::recordResults() {
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i) {
    resultTypes.push_back(TypeAttr::get(fn.getResultTypes()[i]));
    auto l = fn.getResultAttrOfType<LayoutAttr>(
        i, ShardXDialect::getLayoutAttrName());
    resultLayouts.push_back(
        l ? Attribute(l)
          : Attribute(LayoutAttr::get(pieces.getMeshRef(),
                                      Layout(pieces.getMeshRank()))));
  }
}

/// Clones `op` into the local body (at the rewriter's insertion point) and
/// maps its results. ShardX collectives already work on local types; ops
/// with regions (scf) run replicated.
FailureOr<Operation *> Localizer::localizeWindows(Operation &op,
                                                  Operation *clone) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return clone;
  FailureOr<ShardingRule> rule = ruleOp.getShardingRule();
  if (failed(rule) || rule->windows.empty())
    return clone;
  SmallVector<OpOperand *> tensorOperands;
  for (OpOperand &use : op.getOpOperands())
    if (isa<RankedTensorType>(use.get().getType()))
      tensorOperands.push_back(&use);
  Location loc = op.getLoc();
  for (const ShardingRule::WindowedDim &w : rule->windows) {
    Value global =
        w.result ? op.getResult(w.tensor) : tensorOperands[w.tensor]->get();
    // An operand's layout is the one the op reads it in: a reshard's
    // result (a cast of the lowered collective) records none.
    LayoutAttr required =
        w.result ? nullptr : requiredLayout(*tensorOperands[w.tensor]);
    Layout layout = required ? required.getLayout() : pieces.layoutOf(global);
    const DimSharding *ds = layout.getDim(w.dim);
    // An operand window of no halo (2x2 pooling) in torch.chunk's pieces
    // reads only its own rows.
    if (!ds || (!w.result && ds->splits.size() == 1 && ds->sizes.empty() &&
                !w.haloLow() && !w.haloHigh()))
      continue;
    if (ds->splits.size() != 1 || ds->sizes.empty())
      return op.emitError("windowed dim ")
             << w.dim << " is split in a way the halo exchange does not "
             << "support (one mesh axis with the window's sizes)";
    int64_t axis = ds->splits[0].axis, n = pieces.getMeshShape()[axis];
    if (!w.result && !w.halo) // a strided insert's destination: local
      continue;
    // A window of no halo in the window's sizes reads only its own rows.
    if (!w.result && !w.haloLow() && !w.haloHigh())
      continue;
    if (!w.result) {
      // The operand's rows plus the neighbours' edge rows.
      OpOperand &use =
          clone->getOpOperand(tensorOperands[w.tensor]->getOperandNumber());
      auto type = cast<RankedTensorType>(use.get().getType());
      SmallVector<int64_t> shape(type.getShape());
      if (n > 1)
        shape[w.dim] = ShapedType::kDynamic;
      Value halo = HaloOp::create(
          rewriter, loc, RankedTensorType::get(shape, type.getElementType()),
          use.get(), pieces.getMeshRef(), rewriter.getDenseI64ArrayAttr({axis}),
          rewriter.getI64IntegerAttr(w.dim),
          rewriter.getI64IntegerAttr(w.haloLow()),
          rewriter.getI64IntegerAttr(w.haloHigh()),
          rewriter.getDenseI64ArrayAttr(ArrayRef<int64_t>(ds->sizes)));
      use.set(halo);
      continue;
    }
    Value j = AxisIndexOp::create(rewriter, loc, rewriter.getIndexType(),
                                  pieces.getMeshRef(),
                                  rewriter.getDenseI64ArrayAttr({axis}));
    if (auto insert = dyn_cast<tensor::InsertSliceOp>(clone)) {
      // A strided insert: the first member's rows start at the offset, the
      // others' at their shard's first row.
      SmallVector<OpFoldResult> offsets = insert.getMixedOffsets();
      offsets[w.dim] = selectAtMember(rewriter, loc, j, 0, w.low, 0);
      auto local = tensor::InsertSliceOp::create(
          rewriter, loc, insert.getSource(), insert.getDest(), offsets,
          insert.getMixedSizes(), insert.getMixedStrides());
      rewriter.replaceOp(insert, local.getResult());
      clone = local;
      continue;
    }
    // A pad: the first member pads low, the last high, the others not.
    auto pad = cast<tensor::PadOp>(clone);
    SmallVector<OpFoldResult> low = pad.getMixedLowPad(),
                              high = pad.getMixedHighPad();
    low[w.dim] = selectAtMember(rewriter, loc, j, 0, w.low, 0);
    high[w.dim] = selectAtMember(rewriter, loc, j, n - 1, w.high, 0);
    auto local = tensor::PadOp::create(
        rewriter, loc, pad.getResultType(), pad.getSource(), low, high,
        pad.getConstantPaddingValue(), pad.getNofold());
    rewriter.replaceOp(pad, local.getResult());
    clone = local;
  }
  return clone;
}

LogicalResult Localizer::localizeOp(Operation &op) {
  // %l = unrealized_conversion_cast %x (around a lowered reshard) -> %x.
  if (auto cast = dyn_cast<UnrealizedConversionCastOp>(op);
      cast && cast->getNumOperands() == 1 && cast->getNumResults() == 1) {
    mapping.map(cast.getResult(0), mapping.lookup(cast.getOperand(0)));
    return success();
  }
  if (isa<AnnotateOp, RedistributeOp>(op))
    return op.emitError("run shardx-insert-reshards and "
                        "shardx-lower-reshards before shardx-localize");
  Operation *clone = rewriter.clone(op, mapping);
  // ShardX's collectives are built with local types; its computations (the
  // attention ops) take them here like any op.
  if (isa<func::ReturnOp>(op) ||
      (isa_and_nonnull<ShardXDialect>(op.getDialect()) &&
       !isShardXComputation(&op)))
    return success();
  for (auto [global, local] : llvm::zip(op.getResults(), clone->getResults())) {
    if (!isa<RankedTensorType>(global.getType()))
      continue;
    FailureOr<RankedTensorType> type = pieces.localType(global, &op);
    if (failed(type))
      return failure();
    local.setType(*type);
  }
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(clone);
  if (isa<tensor::PadOp, tensor::InsertSliceOp, linalg::LinalgOp>(op)) {
    FailureOr<Operation *> windowed = localizeWindows(op, clone);
    if (failed(windowed))
      return failure();
    clone = *windowed;
  }
  FailureOr<Operation *> result =
      TypeSwitch<Operation *, FailureOr<Operation *>>(&op)
          .Case([&](tensor::EmptyOp g) {
            return localizeEmpty(g, cast<tensor::EmptyOp>(clone));
          })
          .Case([&](tensor::ExpandShapeOp g) {
            return localizeExpandShape(g, cast<tensor::ExpandShapeOp>(clone));
          })
          .Case([&](arith::ConstantOp g) {
            return localizeConstant(g, cast<arith::ConstantOp>(clone));
          })
          .Case([&](tensor::ExtractSliceOp) {
            return localizeExtractSlice(cast<tensor::ExtractSliceOp>(clone));
          })
          .Case([&](tensor::InsertSliceOp) {
            return localizeInsertSlice(cast<tensor::InsertSliceOp>(clone));
          })
          .Case([&](linalg::GenericOp g) {
            return localizeGeneric(g, cast<linalg::GenericOp>(clone));
          })
          .Default([&](Operation *) { return FailureOr<Operation *>(clone); });
  if (failed(result))
    return failure();
  mapping.map(op.getResults(), (*result)->getResults());
  return success();
}

/// The local function type and `shardx.signature` (the global types and
/// layouts of arguments and results).
void Localizer::finishSignature() {
  MLIRContext *context = fn.getContext();
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  fn.setFunctionType(FunctionType::get(context, body.getArgumentTypes(),
                                       ret.getOperandTypes()));
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    fn.removeArgAttr(i, ShardXDialect::getLayoutAttrName());
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
    fn.removeResultAttr(
        i, StringAttr::get(context, ShardXDialect::getLayoutAttrName()));
  Builder b(context);
  NamedAttrList sig;
  sig.append("mesh", pieces.getMeshRef());
  sig.append("arg_types", b.getArrayAttr(argTypes));
  sig.append("arg_layouts", b.getArrayAttr(argLayouts));
  sig.append("result_types", b.getArrayAttr(resultTypes));
  sig.append("result_layouts", b.getArrayAttr(resultLayouts));
  fn->setAttr(ShardXDialect::getSignatureAttrName(),
              sig.getDictionary(context));
}

/// Builds the local body after the global one, then erases the global one
/// (or, on failure, the partial local one: the function is left as it was).
LogicalResult Localizer::run() {
  // Straight-line functions only: the local body is built as one block.
  if (!fn.getBody().hasOneBlock())
    return fn.emitError("cannot expand a sharded function with ")
           << fn.getBody().getBlocks().size()
           << " blocks (control flow between blocks): SPMD expansion "
              "handles one-block functions; structured control flow "
              "(scf.for, scf.if) inside the block runs replicated";
  Block &global = fn.getBody().front();
  auto *local = new Block();
  fn.getBody().push_back(local);
  auto discard = [](Block *block) {
    block->dropAllDefinedValueUses();
    block->erase();
    return failure();
  };
  if (failed(localizeArguments(global, *local)))
    return discard(local);
  recordResults();
  rewriter.setInsertionPointToEnd(local);
  for (Operation &op : global)
    if (failed(localizeOp(op)))
      return discard(local);
  // Layout attributes stay on the clones until the body is complete (the
  // function's own ones until the signature is), then go.
  for (Operation &op : *local) {
    op.removeAttr(ShardXDialect::getLayoutsAttrName());
    op.removeAttr(ShardXDialect::getOperandLayoutsAttrName());
  }
  (void)discard(&global);
  finishSignature();
  // The local program must be type-consistent and free of global shapes.
  WalkResult walk = fn.walk([&](Operation *op) {
    if (isa<AnnotateOp, RedistributeOp>(op)) {
      op->emitError("left after SPMD expansion");
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct LocalizePass
    : public mlir::shardx::impl::LocalizePassBase<LocalizePass> {
  using LocalizePassBase::LocalizePassBase;
  void runOnOperation() override {
    // Functions without layouts run as they are on every rank.
    auto localize = [&](func::FuncOp fn, MeshOp mesh) {
      return Localizer(fn, mesh, groupedRowRuns).run();
    };
    if (failed(forEachShardedFunction(getOperation(), localize)))
      signalPassFailure();
  }
};

} // namespace
