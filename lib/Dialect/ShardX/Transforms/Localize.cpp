//===- Localize.cpp - SPMD expansion: global program -> local program -----===//
//
// Part of ShardX.
//
// Every tensor value of a sharded function takes its local type, in program
// order: `LocalTypeConverter` (a context-aware TypeConverter: the layout is
// the value's, its producer's `shardx.layouts`, not its type's) maps the
// global type to the rank's shard type, dynamic where ranks differ. After an
// op's results are converted,
// one rewrite pattern per op family gives it local shapes (tensor.empty,
// expand_shape, extract/insert_slice, constants, linalg.generic index
// offsets and embedding lookups, the casts around lowered reshards). A new
// op that carries a shape gets a pattern in `populateLocalizePatterns`.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"
#include "Partition.h"
#include "ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/PatternApplicator.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_LOCALIZEPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::Layout;

namespace {

/// The state the localization patterns of one function share: the mesh,
/// the type conversion, and the global types of converted values.
struct LocalizeState {
  func::FuncOp fn;
  FlatSymbolRefAttr meshRef;
  std::vector<int64_t> meshShape;
  int64_t meshRank;
  /// Global types of values already given their local type.
  DenseMap<Value, RankedTensorType> globalTypes;
  /// Set by a pattern that emitted an error.
  bool failed = false;

  /// The global type of `v`, converted or not.
  RankedTensorType globalTypeOf(Value v) {
    auto it = globalTypes.find(v);
    return it != globalTypes.end() ? it->second
                                   : cast<RankedTensorType>(v.getType());
  }

  /// Emits `message` at `op` and marks the function failed.
  InFlightDiagnostic error(Operation *op, const Twine &message) {
    failed = true;
    return op->emitError(message);
  }

  Layout layoutOf(Value v) {
    if (LayoutAttr a = getRecordedLayout(v))
      return a.getLayout();
    return Layout(meshRank);
  }

  FailureOr<RankedTensorType> localType(Value v, Operation *where) {
    auto global = cast<RankedTensorType>(v.getType());
    LayoutAttr attr = getRecordedLayout(v);
    if (!attr)
      return global;
    const Layout &layout = attr.getLayout();
    if (layout.isReplicated() && !layout.hasPartial())
      return global;
    if (!global.hasStaticShape()) {
      where->emitError("cannot expand a sharded tensor of dynamic global "
                       "shape ")
          << global;
      return failure();
    }
    RankedTensorType local = attr.getLocalType(global, meshShape);
    for (int64_t d = 0; d < local.getRank(); ++d)
      if (local.isDynamicDim(d))
        if (const auto *ds = layout.getDim(d))
          if (ds->sizes.empty() &&
              llvm::any_of(ds->splits, [](const ::shardx::Split &s) {
                return s.stride != 1;
              })) {
            where->emitError()
                << "uneven strided shards of " << global << " under "
                << attr << " cannot be expanded";
            return failure();
          }
    return local;
  }

  /// The offset and size (index values) of this rank's piece of a dim of
  /// global size `size` split by `ds` (stride-1 splits or explicit sizes).
  std::pair<Value, Value> emitPiece(OpBuilder &b, Location loc,
                                    const ::shardx::DimSharding &ds,
                                    int64_t size) {
    auto cst = [&](int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    if (!ds.sizes.empty()) {
      SmallVector<int64_t> axes;
      for (const ::shardx::Split &s : ds.splits)
        axes.push_back(s.axis);
      Value j = AxisIndexOp::create(b, loc, b.getIndexType(), meshRef,
                                    b.getDenseI64ArrayAttr(axes));
      Value offset = cst(0), length = cst(ds.sizes[0]);
      int64_t prefix = 0;
      for (auto [i, sz] : llvm::enumerate(ds.sizes)) {
        Value hit =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j, cst(i));
        offset = arith::SelectOp::create(b, loc, hit, cst(prefix), offset);
        length = arith::SelectOp::create(b, loc, hit, cst(sz), length);
        prefix += sz;
      }
      return {offset, length};
    }
    // Nested torch.chunk: ceil-sized chunks, major split first.
    Value offset = cst(0), length = cst(size);
    for (const ::shardx::Split &s : ds.splits) {
      int64_t n = meshShape[s.axis];
      Value j = AxisIndexOp::create(b, loc, b.getIndexType(), meshRef,
                                    b.getDenseI64ArrayAttr({s.axis}));
      Value chunk = arith::CeilDivUIOp::create(b, loc, length, cst(n));
      Value lo = arith::MinUIOp::create(
          b, loc, arith::MulIOp::create(b, loc, j, chunk), length);
      Value hi = arith::MinUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, lo, chunk), length);
      offset = arith::AddIOp::create(b, loc, offset, lo);
      length = arith::SubIOp::create(b, loc, hi, lo);
    }
    return {offset, length};
  }

  /// The dynamic sizes of `local` (the local type of `global` under
  /// `layout`), in dim order.
  SmallVector<Value> dynamicSizes(OpBuilder &b, Location loc,
                                  RankedTensorType global,
                                  RankedTensorType local,
                                  const Layout &layout) {
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < local.getRank(); ++d)
      if (local.isDynamicDim(d))
        sizes.push_back(
            emitPiece(b, loc, *layout.getDim(d), global.getDimSize(d)).second);
    return sizes;
  }

  /// An embedding lookup on a split table. Rows outside this rank's piece
  /// read row 0 of the local table and yield zero; the column index (the
  /// result's last loop, which offsetIndices then makes global) is made
  /// local again.
  LogicalResult localizeLookup(RewriterBase &b, linalg::GenericOp op,
                               const Layout &table) {
    std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
    if (!lookup)
      return op.emitError("embedding lookup changed shape during expansion");
    RankedTensorType global = globalTypeOf(lookup->table);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    Location loc = op.getLoc();
    auto extract = cast<tensor::ExtractOp>(lookup->extract);
    if (const ::shardx::DimSharding *cols = table.getDim(1)) {
      auto [lo, size] = emitPiece(b, loc, *cols, global.getDimSize(1));
      b.setInsertionPoint(extract);
      Value col = extract.getIndices()[1];
      Value local = arith::SubIOp::create(b, loc, col, lo);
      b.modifyOpInPlace(extract,
                        [&] { extract.getIndicesMutable()[1].assign(local); });
      b.setInsertionPoint(op);
    }
    if (const ::shardx::DimSharding *rows = table.getDim(0)) {
      auto [lo, size] = emitPiece(b, loc, *rows, global.getDimSize(0));
      b.setInsertionPoint(extract);
      Value row = extract.getIndices()[0];
      Value rel = arith::SubIOp::create(b, loc, row, lo);
      Value geLo =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, row, lo);
      Value ltHi =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, rel, size);
      Value in = arith::AndIOp::create(b, loc, geLo, ltHi);
      Value zeroIdx = arith::ConstantIndexOp::create(b, loc, 0);
      Value safe = arith::SelectOp::create(b, loc, in, rel, zeroIdx);
      b.modifyOpInPlace(extract,
                        [&] { extract.getIndicesMutable()[0].assign(safe); });
      b.setInsertionPointAfter(extract);
      Type elt = extract.getType();
      Value zero = arith::ConstantOp::create(b, loc, elt, b.getZeroAttr(elt));
      Value masked = arith::SelectOp::create(b, loc, in, extract, zero);
      b.replaceAllUsesExcept(extract.getResult(), masked,
                             masked.getDefiningOp());
    }
    b.modifyOpInPlace(op, [&] { op->removeAttr(kTableLayoutAttrName); });
    return success();
  }

  /// Adds the rank's offset to `linalg.index` ops of sharded loops.
  LogicalResult offsetIndices(RewriterBase &b, linalg::GenericOp op) {
    SmallVector<linalg::IndexOp> indices;
    op.getRegion().walk([&](linalg::IndexOp i) { indices.push_back(i); });
    if (indices.empty())
      return success();
    // Loop -> (layout dim sharding, global extent) from any operand / result.
    auto linalgOp = cast<linalg::LinalgOp>(op.getOperation());
    for (linalg::IndexOp index : indices) {
      int64_t loop = index.getDim();
      std::optional<::shardx::DimSharding> sharding;
      int64_t extent = 0;
      for (OpOperand &operand : op->getOpOperands()) {
        if (!isa<RankedTensorType>(operand.get().getType()))
          continue;
        AffineMap map = linalgOp.getMatchingIndexingMap(&operand);
        Value global = operand.get();
        Layout layout = layoutOf(global);
        for (auto [k, expr] : llvm::enumerate(map.getResults())) {
          auto d = dyn_cast<AffineDimExpr>(expr);
          if (!d || d.getPosition() != loop)
            continue;
          if (const auto *ds = layout.getDim(k)) {
            sharding = *ds;
            extent = globalTypeOf(global).getDimSize(k);
          }
        }
      }
      if (!sharding)
        continue;
      if (sharding->sizes.empty() &&
          llvm::any_of(sharding->splits,
                       [](const ::shardx::Split &s) { return s.stride != 1; }))
        return op.emitError("linalg.index of a loop with a strided split "
                            "cannot be expanded");
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(op);
      Location loc = index.getLoc();
      Value offset = emitPiece(b, loc, *sharding, extent).first;
      b.setInsertionPointAfter(index);
      auto add = arith::AddIOp::create(b, loc, index.getResult(), offset);
      b.replaceAllUsesExcept(index.getResult(), add.getResult(), add);
    }
    return success();
  }
};

/// Global -> local tensor types as a context-aware TypeConverter: a tensor
/// value converts to its shard under its producer's layout (an argument's
/// from the function signature; errors at the producer); other types stay.
class LocalTypeConverter : public TypeConverter {
public:
  explicit LocalTypeConverter(LocalizeState &state) {
    addConversion([](Type type) { return type; });
    addConversion([&state](Value value) -> std::optional<Type> {
      if (!isa<RankedTensorType>(value.getType()))
        return std::nullopt;
      Operation *where = value.getDefiningOp();
      if (!where)
        where = cast<BlockArgument>(value).getOwner()->getParentOp();
      FailureOr<RankedTensorType> local = state.localType(value, where);
      if (failed(local))
        return Type();
      return Type(*local);
    });
  }
};

//===----------------------------------------------------------------------===//
// Patterns, one per op family. Each runs on an op whose tensor results
// already have their local types (globals in LocalizeState::globalTypes).
//===----------------------------------------------------------------------===//

/// The base of the patterns: the shared state of the function.
template <typename OpT> struct LocalizePattern : OpRewritePattern<OpT> {
  LocalizePattern(MLIRContext *context, LocalizeState &state)
      : OpRewritePattern<OpT>(context), state(state) {}
  LocalizeState &state;
};

// %l = unrealized_conversion_cast %x (around a lowered reshard) -> %x.
struct DropCastPattern : LocalizePattern<UnrealizedConversionCastOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(UnrealizedConversionCastOp op,
                                PatternRewriter &rewriter) const override {
    if (op->getNumOperands() != 1 || op->getNumResults() != 1)
      return failure();
    rewriter.replaceOp(op, op.getOperand(0));
    return success();
  }
};

// tensor.empty() : tensor<7x4xf32> on [S(0)] -> tensor.empty(%n) :
// tensor<?x4xf32>, %n this rank's shard size.
struct EmptyPattern : LocalizePattern<tensor::EmptyOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(tensor::EmptyOp op,
                                PatternRewriter &rewriter) const override {
    RankedTensorType local = op.getType();
    if (local.hasStaticShape())
      return failure();
    RankedTensorType global = state.globalTypeOf(op.getResult());
    SmallVector<Value> sizes = state.dynamicSizes(
        rewriter, op.getLoc(), global, local, state.layoutOf(op.getResult()));
    auto fresh = tensor::EmptyOp::create(rewriter, op.getLoc(), local, sizes);
    fresh->setAttrs(op->getAttrDictionary());
    state.globalTypes[fresh.getResult()] = global;
    rewriter.replaceOp(op, fresh.getResult());
    return success();
  }
};

// tensor.expand_shape: the output shape becomes the local one (sizes of
// dynamic local dims from the layout).
struct ExpandShapePattern : LocalizePattern<tensor::ExpandShapeOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(tensor::ExpandShapeOp op,
                                PatternRewriter &rewriter) const override {
    RankedTensorType local = op.getResultType();
    if (local.hasStaticShape()) {
      rewriter.modifyOpInPlace(
          op, [&] { op.setStaticOutputShape(local.getShape()); });
      return success();
    }
    RankedTensorType global = state.globalTypeOf(op.getResult());
    SmallVector<Value> sizes = state.dynamicSizes(
        rewriter, op.getLoc(), global, local, state.layoutOf(op.getResult()));
    SmallVector<OpFoldResult> shape;
    unsigned next = 0;
    for (int64_t d = 0; d < local.getRank(); ++d)
      shape.push_back(
          local.isDynamicDim(d)
              ? OpFoldResult(sizes[next++])
              : OpFoldResult(rewriter.getIndexAttr(local.getDimSize(d))));
    auto fresh =
        tensor::ExpandShapeOp::create(rewriter, op.getLoc(), local, op.getSrc(),
                                      op.getReassociationIndices(), shape);
    fresh->setAttr(ShardXDialect::getLayoutsAttrName(),
                   op->getAttr(ShardXDialect::getLayoutsAttrName()));
    state.globalTypes[fresh.getResult()] = global;
    rewriter.replaceOp(op, fresh.getResult());
    return success();
  }
};

// arith.constant dense<1.0> : tensor<8xf32> on [S(0)] -> a splat of the
// local type; a sharded non-splat constant is an error.
struct ConstantPattern : LocalizePattern<arith::ConstantOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(arith::ConstantOp op,
                                PatternRewriter &rewriter) const override {
    auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
    if (!dense || dense.getType() == op.getType())
      return failure();
    if (!dense.isSplat()) {
      state.error(op, "a sharded non-splat constant cannot be expanded");
      return failure();
    }
    rewriter.modifyOpInPlace(op, [&] {
      op.setValueAttr(dense.resizeSplat(cast<ShapedType>(op.getType())));
    });
    return success();
  }
};

// tensor.extract_slice: whole dims that are split take the local source
// size.
struct ExtractSlicePattern : LocalizePattern<tensor::ExtractSliceOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(tensor::ExtractSliceOp op,
                                PatternRewriter &rewriter) const override {
    RankedTensorType local = op.getResultType();
    SmallVector<OpFoldResult> sizes = op.getMixedSizes();
    for (int64_t d = 0; d < local.getRank(); ++d)
      sizes[d] = local.isDynamicDim(d)
                     ? OpFoldResult(tensor::DimOp::create(rewriter, op.getLoc(),
                                                          op.getSource(), d))
                     : OpFoldResult(rewriter.getIndexAttr(local.getDimSize(d)));
    auto fresh = tensor::ExtractSliceOp::create(
        rewriter, op.getLoc(), local, op.getSource(), op.getMixedOffsets(),
        sizes, op.getMixedStrides());
    rewriter.replaceOp(op, fresh.getResult());
    return success();
  }
};

// tensor.insert_slice: the inserted sizes are the local source's.
struct InsertSlicePattern : LocalizePattern<tensor::InsertSliceOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(tensor::InsertSliceOp op,
                                PatternRewriter &rewriter) const override {
    auto src = cast<RankedTensorType>(op.getSource().getType());
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < src.getRank(); ++d)
      sizes.push_back(
          src.isDynamicDim(d)
              ? OpFoldResult(tensor::DimOp::create(rewriter, op.getLoc(),
                                                   op.getSource(), d))
              : OpFoldResult(rewriter.getIndexAttr(src.getDimSize(d))));
    auto fresh = tensor::InsertSliceOp::create(
        rewriter, op.getLoc(), op.getSource(), op.getDest(),
        op.getMixedOffsets(), sizes, op.getMixedStrides());
    rewriter.replaceOp(op, fresh.getResult());
    return success();
  }
};

// linalg.generic: an embedding lookup on a split table reads its local
// piece; `linalg.index` of a sharded loop gets the rank's offset.
struct GenericPattern : LocalizePattern<linalg::GenericOp> {
  using LocalizePattern::LocalizePattern;
  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    // The lookup first: it matches the column index as the plain
    // linalg.index the offsets then rewrite.
    if (auto table = op->getAttrOfType<LayoutAttr>(kTableLayoutAttrName))
      if (failed(state.localizeLookup(rewriter, op, table.getLayout()))) {
        state.failed = true;
        return failure();
      }
    if (failed(state.offsetIndices(rewriter, op))) {
      state.failed = true;
      return failure();
    }
    return success();
  }
};

void populateLocalizePatterns(RewritePatternSet &patterns,
                              LocalizeState &state) {
  patterns
      .add<ConstantPattern, DropCastPattern, EmptyPattern, ExpandShapePattern,
           ExtractSlicePattern, GenericPattern, InsertSlicePattern>(
          patterns.getContext(), state);
}

//===----------------------------------------------------------------------===//
// The function: signature, ops in program order, signature attribute
//===----------------------------------------------------------------------===//

class Localizer {
public:
  Localizer(func::FuncOp fn, MeshOp mesh)
      : state{fn, FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
              std::vector<int64_t>(mesh.getShape().begin(),
                                   mesh.getShape().end()),
              static_cast<int64_t>(mesh.getShape().size()),
              DenseMap<Value, RankedTensorType>()} {}

  LogicalResult run();

private:
  LogicalResult localizeArguments();
  void recordResults();
  LogicalResult localizeResults(Operation &op);
  LogicalResult localizeBody();
  void finishSignature();

  LocalizeState state;
  LocalTypeConverter typeConverter{state};
  SmallVector<Attribute> argTypes, argLayouts, resultTypes, resultLayouts;
};

/// Gives every tensor argument its local type, recording the global types
/// and layouts for `shardx.signature`.
LogicalResult Localizer::localizeArguments() {
  Builder b(state.fn.getContext());
  for (BlockArgument arg : state.fn.getBody().front().getArguments()) {
    argTypes.push_back(TypeAttr::get(arg.getType()));
    if (!isa<RankedTensorType>(arg.getType())) {
      argLayouts.push_back(b.getUnitAttr());
      continue;
    }
    argLayouts.push_back(LayoutAttr::get(state.meshRef, state.layoutOf(arg)));
    Type local = typeConverter.convertType(arg);
    if (!local)
      return failure();
    state.globalTypes[arg] = cast<RankedTensorType>(arg.getType());
    arg.setType(local);
  }
  return success();
}

/// Records the global result types and layouts for `shardx.signature`.
void Localizer::recordResults() {
  func::FuncOp fn = state.fn;
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i) {
    resultTypes.push_back(TypeAttr::get(fn.getResultTypes()[i]));
    auto l = fn.getResultAttrOfType<LayoutAttr>(
        i, ShardXDialect::getLayoutAttrName());
    resultLayouts.push_back(
        l ? Attribute(l)
          : Attribute(LayoutAttr::get(state.meshRef, Layout(state.meshRank))));
  }
}

/// Gives every tensor result of `op` its local type.
LogicalResult Localizer::localizeResults(Operation &op) {
  for (OpResult r : op.getResults()) {
    if (!isa<RankedTensorType>(r.getType()))
      continue;
    auto global = cast<RankedTensorType>(r.getType());
    Type local = typeConverter.convertType(r);
    if (!local)
      return failure();
    state.globalTypes[r] = global;
    r.setType(local);
  }
  return success();
}

/// The ops in program order: results converted, then the op family's
/// pattern. ShardX collectives already work on local types; ops with
/// regions (scf) run replicated. Layout attributes stay until every op is
/// rewritten: later ops read their operands' layouts (linalg.index offsets).
LogicalResult Localizer::localizeBody() {
  MLIRContext *context = state.fn.getContext();
  RewritePatternSet patterns(context);
  populateLocalizePatterns(patterns, state);
  FrozenRewritePatternSet frozen(std::move(patterns));
  PatternApplicator applicator(frozen);
  applicator.applyDefaultCostModel();
  PatternRewriter rewriter(context);
  Block &body = state.fn.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isa<UnrealizedConversionCastOp>(op)) {
      rewriter.setInsertionPoint(&op);
      if (succeeded(applicator.matchAndRewrite(&op, rewriter)))
        continue;
    }
    if (isa<AnnotateOp, RedistributeOp>(op))
      return op.emitError("run shardx-insert-reshards and "
                          "shardx-lower-reshards before shardx-localize");
    if (isa<func::ReturnOp>(op) ||
        isa_and_nonnull<ShardXDialect>(op.getDialect()))
      continue;
    if (failed(localizeResults(op)))
      return failure();
    rewriter.setInsertionPoint(&op);
    (void)applicator.matchAndRewrite(&op, rewriter);
    if (state.failed)
      return failure();
  }
  for (Operation &op : body) {
    op.removeAttr(ShardXDialect::getLayoutsAttrName());
    op.removeAttr(ShardXDialect::getOperandLayoutsAttrName());
  }
  return success();
}

/// The local function type and `shardx.signature` (the global types and
/// layouts of arguments and results).
void Localizer::finishSignature() {
  func::FuncOp fn = state.fn;
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
  sig.append("mesh", state.meshRef);
  sig.append("arg_types", b.getArrayAttr(argTypes));
  sig.append("arg_layouts", b.getArrayAttr(argLayouts));
  sig.append("result_types", b.getArrayAttr(resultTypes));
  sig.append("result_layouts", b.getArrayAttr(resultLayouts));
  fn->setAttr(ShardXDialect::getSignatureAttrName(),
              sig.getDictionary(context));
}

LogicalResult Localizer::run() {
  if (failed(localizeArguments()))
    return failure();
  recordResults();
  if (failed(localizeBody()))
    return failure();
  finishSignature();
  // The local program must be type-consistent and free of global shapes.
  WalkResult walk = state.fn.walk([&](Operation *op) {
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
  void runOnOperation() override {
    if (failed(localize(getOperation())))
      signalPassFailure();
  }
};

} // namespace

LogicalResult mlir::shardx::localize(ModuleOp module) {
  // Functions without layouts run as they are on every rank.
  return forEachShardedFunction(module, [](func::FuncOp fn, MeshOp mesh) {
    return Localizer(fn, mesh).run();
  });
}
