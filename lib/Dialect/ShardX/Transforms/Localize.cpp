//===- Localize.cpp - SPMD expansion: global program -> local program -----===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"
#include "ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_LOCALIZEPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::Layout;

namespace {

struct Localizer {
  func::FuncOp fn;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  std::vector<int64_t> meshShape;
  int64_t meshRank;
  /// Global types of values already given their local type.
  DenseMap<Value, RankedTensorType> globalTypes;

  Layout layoutOf(Value v) {
    if (LayoutAttr a = getRecordedLayout(v))
      return a.getLayout();
    return Layout(meshRank);
  }

  FailureOr<RankedTensorType> localType(Value v, Operation *where) {
    auto global = cast<RankedTensorType>(v.getType());
    Layout layout = layoutOf(v);
    if (layout.isReplicated() && !layout.hasPartial())
      return global;
    if (!global.hasStaticShape()) {
      where->emitError("cannot expand a sharded tensor of dynamic global "
                       "shape ")
          << global;
      return failure();
    }
    RankedTensorType local = getLocalType(global, layout, meshShape);
    for (int64_t d = 0; d < local.getRank(); ++d)
      if (local.isDynamicDim(d))
        if (const auto *ds = layout.getDim(d))
          if (ds->sizes.empty() &&
              llvm::any_of(ds->splits, [](const ::shardx::Split &s) {
                return s.stride != 1;
              })) {
            where->emitError() << "uneven strided shards of " << global
                               << " under " << LayoutAttr::get(meshRef, layout)
                               << " cannot be expanded";
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
        Value hit = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j,
                                          cst(i));
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
  LogicalResult localizeLookup(linalg::GenericOp op, const Layout &table) {
    std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
    if (!lookup)
      return op.emitError("embedding lookup changed shape during expansion");
    auto it = globalTypes.find(lookup->table);
    RankedTensorType global =
        it != globalTypes.end()
            ? it->second
            : cast<RankedTensorType>(lookup->table.getType());
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto extract = cast<tensor::ExtractOp>(lookup->extract);
    if (const ::shardx::DimSharding *cols = table.getDim(1)) {
      auto [lo, size] = emitPiece(b, loc, *cols, global.getDimSize(1));
      b.setInsertionPoint(extract);
      Value col = extract.getIndices()[1];
      extract.getIndicesMutable()[1].assign(
          arith::SubIOp::create(b, loc, col, lo));
      b.setInsertionPoint(op);
    }
    if (const ::shardx::DimSharding *rows = table.getDim(0)) {
      auto [lo, size] = emitPiece(b, loc, *rows, global.getDimSize(0));
      b.setInsertionPoint(extract);
      Value row = extract.getIndices()[0];
      Value rel = arith::SubIOp::create(b, loc, row, lo);
      Value geLo = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                         row, lo);
      Value ltHi = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                         rel, size);
      Value in = arith::AndIOp::create(b, loc, geLo, ltHi);
      Value zeroIdx = arith::ConstantIndexOp::create(b, loc, 0);
      Value safe = arith::SelectOp::create(b, loc, in, rel, zeroIdx);
      extract.getIndicesMutable()[0].assign(safe);
      b.setInsertionPointAfter(extract);
      Type elt = extract.getType();
      Value zero = arith::ConstantOp::create(b, loc, elt, b.getZeroAttr(elt));
      Value masked = arith::SelectOp::create(b, loc, in, extract, zero);
      extract.getResult().replaceAllUsesExcept(masked,
                                               masked.getDefiningOp());
    }
    op->removeAttr(kTableLayoutAttrName);
    return success();
  }

  /// Adds the rank's offset to `linalg.index` ops of sharded loops.
  LogicalResult offsetIndices(linalg::GenericOp op) {
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
            auto it = globalTypes.find(global);
            extent = (it != globalTypes.end()
                          ? it->second
                          : cast<RankedTensorType>(global.getType()))
                         .getDimSize(k);
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
      OpBuilder b(op);
      Location loc = index.getLoc();
      Value offset = emitPiece(b, loc, *sharding, extent).first;
      b.setInsertionPointAfter(index);
      auto add = arith::AddIOp::create(b, loc, index.getResult(), offset);
      index.getResult().replaceAllUsesExcept(add.getResult(), add);
    }
    return success();
  }

  LogicalResult run() {
    Block &body = fn.getBody().front();
    Builder b(fn.getContext());
    SmallVector<Attribute> argTypes, argLayouts, resultTypes, resultLayouts;
    // Arguments.
    for (BlockArgument arg : body.getArguments()) {
      argTypes.push_back(TypeAttr::get(arg.getType()));
      if (!isa<RankedTensorType>(arg.getType())) {
        argLayouts.push_back(b.getUnitAttr());
        continue;
      }
      argLayouts.push_back(LayoutAttr::get(meshRef, layoutOf(arg)));
      FailureOr<RankedTensorType> local = localType(arg, fn);
      if (failed(local))
        return failure();
      globalTypes[arg] = cast<RankedTensorType>(arg.getType());
      arg.setType(*local);
    }
    for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i) {
      resultTypes.push_back(TypeAttr::get(fn.getResultTypes()[i]));
      auto l = fn.getResultAttrOfType<LayoutAttr>(
          i, ShardXDialect::getLayoutAttrName());
      resultLayouts.push_back(l ? Attribute(l)
                                : Attribute(LayoutAttr::get(
                                      meshRef, Layout(meshRank))));
    }
    // Ops, in order.
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (auto cast = dyn_cast<UnrealizedConversionCastOp>(op)) {
        if (cast->getNumOperands() == 1 && cast->getNumResults() == 1) {
          cast.getResult(0).replaceAllUsesWith(cast.getOperand(0));
          cast.erase();
          continue;
        }
      }
      if (isa<AnnotateOp, RedistributeOp>(op))
        return op.emitError("run shardx-insert-reshards and "
                            "shardx-lower-reshards before shardx-localize");
      if (isa<func::ReturnOp>(op))
        continue;
      // Collectives already work on local types.
      if (op.getDialect() && op.getDialect()->getNamespace() == "shardx")
        continue;
      SmallVector<RankedTensorType> globals;
      for (OpResult r : op.getResults()) {
        if (!isa<RankedTensorType>(r.getType()))
          continue;
        globals.push_back(cast<RankedTensorType>(r.getType()));
        FailureOr<RankedTensorType> local = localType(r, &op);
        if (failed(local))
          return failure();
        globalTypes[r] = globals.back();
        r.setType(*local);
      }
      if (auto empty = dyn_cast<tensor::EmptyOp>(op)) {
        RankedTensorType local = empty.getType();
        if (!local.hasStaticShape()) {
          OpBuilder ob(&op);
          Layout layout = layoutOf(empty.getResult());
          SmallVector<Value> sizes =
              dynamicSizes(ob, op.getLoc(), globals[0], local, layout);
          auto fresh = tensor::EmptyOp::create(ob, op.getLoc(), local, sizes);
          fresh->setAttrs(op.getAttrDictionary());
          globalTypes[fresh.getResult()] = globals[0];
          empty.getResult().replaceAllUsesWith(fresh.getResult());
          op.erase();
          continue;
        }
      }
      if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op)) {
        RankedTensorType local = expand.getResultType();
        if (!local.hasStaticShape()) {
          OpBuilder ob(&op);
          Layout layout = layoutOf(expand.getResult());
          SmallVector<Value> sizes =
              dynamicSizes(ob, op.getLoc(), globals[0], local, layout);
          SmallVector<OpFoldResult> shape;
          unsigned next = 0;
          for (int64_t d = 0; d < local.getRank(); ++d)
            shape.push_back(local.isDynamicDim(d)
                                ? OpFoldResult(sizes[next++])
                                : OpFoldResult(ob.getIndexAttr(
                                      local.getDimSize(d))));
          auto fresh = tensor::ExpandShapeOp::create(
              ob, op.getLoc(), local, expand.getSrc(),
              expand.getReassociationIndices(), shape);
          fresh->setAttr(ShardXDialect::getLayoutsAttrName(),
                         op.getAttr(ShardXDialect::getLayoutsAttrName()));
          globalTypes[fresh.getResult()] = globals[0];
          expand.getResult().replaceAllUsesWith(fresh.getResult());
          op.erase();
          continue;
        }
        expand.setStaticOutputShape(expand.getResultType().getShape());
      } else if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
        auto dense = dyn_cast<DenseElementsAttr>(cst.getValue());
        if (dense && dense.getType() != cst.getType()) {
          if (!dense.isSplat())
            return op.emitError("a sharded non-splat constant cannot be "
                                "expanded");
          cst.setValueAttr(
              dense.resizeSplat(cast<ShapedType>(cst.getType())));
        }
      } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
        // Whole dims that are split take the local source size.
        OpBuilder ob(&op);
        RankedTensorType local = slice.getResultType();
        SmallVector<OpFoldResult> sizes = slice.getMixedSizes();
        for (int64_t d = 0; d < local.getRank(); ++d)
          sizes[d] = local.isDynamicDim(d)
                         ? OpFoldResult(tensor::DimOp::create(
                               ob, op.getLoc(), slice.getSource(), d))
                         : OpFoldResult(ob.getIndexAttr(local.getDimSize(d)));
        auto fresh = tensor::ExtractSliceOp::create(
            ob, op.getLoc(), local, slice.getSource(), slice.getMixedOffsets(),
            sizes, slice.getMixedStrides());
        slice.getResult().replaceAllUsesWith(fresh.getResult());
        op.erase();
        continue;
      } else if (auto insert = dyn_cast<tensor::InsertSliceOp>(op)) {
        OpBuilder ob(&op);
        auto src = cast<RankedTensorType>(insert.getSource().getType());
        SmallVector<OpFoldResult> sizes;
        for (int64_t d = 0; d < src.getRank(); ++d)
          sizes.push_back(src.isDynamicDim(d)
                              ? OpFoldResult(tensor::DimOp::create(
                                    ob, op.getLoc(), insert.getSource(), d))
                              : OpFoldResult(ob.getIndexAttr(src.getDimSize(d))));
        auto fresh = tensor::InsertSliceOp::create(
            ob, op.getLoc(), insert.getSource(), insert.getDest(),
            insert.getMixedOffsets(), sizes, insert.getMixedStrides());
        insert.getResult().replaceAllUsesWith(fresh.getResult());
        op.erase();
        continue;
      } else if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
        // The lookup first: it matches the column index as the plain
        // linalg.index the offsets then rewrite.
        if (auto table = op.getAttrOfType<LayoutAttr>(kTableLayoutAttrName))
          if (failed(localizeLookup(generic, table.getLayout())))
            return failure();
        if (failed(offsetIndices(generic)))
          return failure();
      } else if (op.getNumRegions() > 0 &&
                 !isa<linalg::LinalgOp>(op) &&
                 llvm::any_of(op.getOperandTypes(), [](Type t) {
                   return isa<RankedTensorType>(t);
                 })) {
        // Ops with regions (scf) run replicated: their types do not change.
      }
      // Layout attributes stay until every op is rewritten: later ops read
      // their operands' layouts (linalg.index offsets).
    }
    for (Operation &op : body) {
      op.removeAttr(ShardXDialect::getLayoutsAttrName());
      op.removeAttr(ShardXDialect::getOperandLayoutsAttrName());
    }
    // Results and the signature.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    fn.setFunctionType(FunctionType::get(fn.getContext(),
                                         body.getArgumentTypes(),
                                         ret.getOperandTypes()));
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
      fn.removeArgAttr(i, ShardXDialect::getLayoutAttrName());
    for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
      fn.removeResultAttr(
          i, StringAttr::get(fn.getContext(), ShardXDialect::getLayoutAttrName()));
    NamedAttrList sig;
    sig.append("mesh", meshRef);
    sig.append("arg_types", b.getArrayAttr(argTypes));
    sig.append("arg_layouts", b.getArrayAttr(argLayouts));
    sig.append("result_types", b.getArrayAttr(resultTypes));
    sig.append("result_layouts", b.getArrayAttr(resultLayouts));
    fn->setAttr(ShardXDialect::getSignatureAttrName(),
                sig.getDictionary(fn.getContext()));
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
};

struct LocalizePass
    : public mlir::shardx::impl::LocalizePassBase<LocalizePass> {
  void runOnOperation() override {
    auto run = [](func::FuncOp fn, MeshOp mesh) {
      Localizer l{fn, mesh, FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                  std::vector<int64_t>(mesh.getShape().begin(),
                                       mesh.getShape().end()),
                  static_cast<int64_t>(mesh.getShape().size()),
                  DenseMap<Value, RankedTensorType>()};
      return l.run();
    };
    // Functions without layouts run as they are on every rank.
    if (failed(forEachShardedFunction(getOperation(), run)))
      signalPassFailure();
  }
};

} // namespace
