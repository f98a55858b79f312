//===- InsertReshards.cpp - The shardx-insert-reshards pass ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-insert-reshards materializes the reshards the strategies chosen by
// shardx-propagate need (VerifyLayouts.cpp checks the result).
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Rules/EmbeddingRule.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_INSERTRESHARDSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Inserts the reshards of one function: every operand gets the layout its
/// op's strategy needs, annotations become redistributes, and results get
/// their final layouts. A (value, layout) pair is materialized once.
class ReshardInserter {
public:
  ReshardInserter(func::FuncOp fn, MeshOp mesh)
      : fn(fn), meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        meshRank(mesh.getShape().size()), builder(fn.getContext()) {}

  void run() {
    for (Operation &op : llvm::make_early_inc_range(fn.getBody().front())) {
      if (auto annotate = dyn_cast<AnnotateOp>(op)) {
        Value v = materialize(annotate.getInput(), annotate.getLayout(), &op);
        annotate.getResult().replaceAllUsesWith(v);
        annotate.erase();
        continue;
      }
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        reshardResults(ret);
        continue;
      }
      if (op.getNumRegions() > 0)
        reshardCaptured(op);
      if (!op.hasAttr(ShardXDialect::getOperandLayoutsAttrName()))
        continue;
      for (OpOperand &o : op.getOpOperands()) {
        if (!isa<RankedTensorType>(o.get().getType()))
          continue;
        if (LayoutAttr to = requiredLayout(o))
          o.set(materialize(o.get(), to, &op));
      }
    }
    eraseDeadOriginals();
  }

private:
  /// `v` in layout `to`, for a use at `before`: `v` itself, a clone of its
  /// shape-only chain, or a redistribute.
  Value materialize(Value v, LayoutAttr to, Operation *before) {
    LayoutAttr from = layoutOrReplicated(v, meshRef, meshRank);
    if (from == to)
      return v;
    auto key = std::make_pair(v, Attribute(to));
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;
    Value result;
    if (isRematerializable(v)) {
      builder.setInsertionPoint(before);
      result = rematerialize(v, to);
    } else {
      if (auto arg = dyn_cast<BlockArgument>(v))
        builder.setInsertionPointToStart(arg.getOwner());
      else
        builder.setInsertionPointAfter(v.getDefiningOp());
      result = RedistributeOp::create(builder, v.getLoc(), v, from, to);
    }
    cache[key] = result;
    return result;
  }

  /// `layout` with no Partial axis.
  LayoutAttr withoutPartials(LayoutAttr layout) {
    Layout whole = layout.getLayout();
    for (int64_t a = 0; a < meshRank; ++a)
      whole.setPartial(a, std::nullopt);
    return LayoutAttr::get(meshRef, whole);
  }

  /// Clones the shape/splat chain defining `v` with layout `to`, at the
  /// builder's insertion point.
  Value rematerialize(Value v, LayoutAttr to) {
    Operation *def = v.getDefiningOp();
    Value result;
    if (auto fill = dyn_cast<linalg::FillOp>(def)) {
      LayoutAttr wholeAttr = withoutPartials(to);
      Operation *empty = builder.clone(*fill.getOutputs()[0].getDefiningOp());
      setResultLayout(cast<OpResult>(empty->getResult(0)), wholeAttr);
      IRMapping map;
      map.map(fill.getOutputs()[0], empty->getResult(0));
      Operation *clone = builder.clone(*fill, map);
      clone->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                     builder.getArrayAttr({wholeAttr}));
      setResultLayout(cast<OpResult>(clone->getResult(0)), wholeAttr);
      result = clone->getResult(0);
    } else {
      Operation *clone = builder.clone(*def);
      setResultLayout(cast<OpResult>(clone->getResult(0)), to);
      result = clone->getResult(0);
    }
    if (!to.getLayout().hasPartial())
      return result;
    // A splat cannot be Partial: redistribute from the replicated one.
    LayoutAttr rep = withoutPartials(to);
    setResultLayout(cast<OpResult>(result), rep);
    return RedistributeOp::create(builder, v.getLoc(), result, rep, to);
  }

  /// Gives each returned tensor its declared (or current) layout.
  void reshardResults(func::ReturnOp ret) {
    for (OpOperand &o : ret->getOpOperands()) {
      if (!isa<RankedTensorType>(o.get().getType()))
        continue;
      LayoutAttr to =
          resultLayout(fn, o.getOperandNumber(),
                       layoutOrReplicated(o.get(), meshRef, meshRank));
      o.set(materialize(o.get(), to, ret));
      fn.setResultAttr(o.getOperandNumber(), ShardXDialect::getLayoutAttrName(),
                       to);
    }
  }

  /// Tensors read from inside `op`'s regions (captured) must be whole, or
  /// in the layout `op` reads them in (`shardx.table_layout`, set by a rule
  /// that reads a captured tensor: the embedding lookup's).
  void reshardCaptured(Operation &op) {
    SmallVector<OpOperand *> captured = capturedTensorUses(&op);
    auto tableLayout = op.getAttrOfType<LayoutAttr>(kTableLayoutAttrName);
    for (OpOperand *use : captured)
      use->set(materialize(use->get(),
                           tableLayout
                               ? tableLayout
                               : LayoutAttr::get(meshRef, Layout(meshRank)),
                           &op));
  }

  /// Removes rematerialized originals, then empties, left without uses.
  void eraseDeadOriginals() {
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(fn.getBody().front())))
      if (op.use_empty() && op.getNumResults() > 0 &&
          isRematerializable(op.getResult(0)))
        op.erase();
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(fn.getBody().front())))
      if (isa<tensor::EmptyOp>(op) && op.use_empty())
        op.erase();
  }

  func::FuncOp fn;
  FlatSymbolRefAttr meshRef;
  int64_t meshRank;
  OpBuilder builder;
  DenseMap<std::pair<Value, Attribute>, Value> cache;
};

struct InsertReshardsPass
    : public mlir::shardx::impl::InsertReshardsPassBase<InsertReshardsPass> {
  void runOnOperation() override {
    auto insert = [](func::FuncOp fn, MeshOp mesh) {
      ReshardInserter(fn, mesh).run();
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), insert)))
      signalPassFailure();
  }
};

} // namespace
