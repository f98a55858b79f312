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

#include "shardx/Dialect/ShardX/Transforms/Passes.h"
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
using ::shardx::Layout;

namespace {

struct InsertReshardsPass
    : public mlir::shardx::impl::InsertReshardsPassBase<InsertReshardsPass> {
  void runOnOperation() override {
    if (failed(forEachShardedFunction(
            getOperation(),
            [&](func::FuncOp fn, MeshOp mesh) { return insert(fn, mesh); })))
      signalPassFailure();
  }

  LogicalResult insert(func::FuncOp fn, MeshOp mesh) {
    auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    int64_t meshRank = mesh.getShape().size();
    OpBuilder builder(fn.getContext());
    DenseMap<std::pair<Value, Attribute>, Value> cache;

    auto materialize = [&](Value v, LayoutAttr to, Operation *before) -> Value {
      LayoutAttr from = layoutOrReplicated(v, meshRef, meshRank);
      if (from == to)
        return v;
      auto key = std::make_pair(v, Attribute(to));
      auto it = cache.find(key);
      if (it != cache.end())
        return it->second;
      Value result;
      if (isRematerializable(v)) {
        // Clone the shape/splat chain with the needed layout.
        Operation *def = v.getDefiningOp();
        builder.setInsertionPoint(before);
        if (auto fill = dyn_cast<linalg::FillOp>(def)) {
          Layout whole = to.getLayout();
          for (int64_t a = 0; a < meshRank; ++a)
            whole.setPartial(a, std::nullopt);
          LayoutAttr wholeAttr = LayoutAttr::get(meshRef, whole);
          Operation *empty =
              builder.clone(*fill.getOutputs()[0].getDefiningOp());
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
        if (to.getLayout().hasPartial()) {
          // A splat cannot be Partial: redistribute from the replicated one.
          Layout rep = to.getLayout();
          for (int64_t a = 0; a < meshRank; ++a)
            rep.setPartial(a, std::nullopt);
          setResultLayout(cast<OpResult>(result),
                          LayoutAttr::get(meshRef, rep));
          result = RedistributeOp::create(builder, v.getLoc(), result,
                                          LayoutAttr::get(meshRef, rep), to);
        }
      } else {
        if (auto arg = dyn_cast<BlockArgument>(v))
          builder.setInsertionPointToStart(arg.getOwner());
        else
          builder.setInsertionPointAfter(v.getDefiningOp());
        result = RedistributeOp::create(builder, v.getLoc(), v, from, to);
      }
      cache[key] = result;
      return result;
    };

    for (Operation &op : llvm::make_early_inc_range(fn.getBody().front())) {
      if (auto annotate = dyn_cast<AnnotateOp>(op)) {
        Value v = materialize(annotate.getInput(), annotate.getLayout(), &op);
        annotate.getResult().replaceAllUsesWith(v);
        annotate.erase();
        continue;
      }
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (OpOperand &o : ret->getOpOperands()) {
          if (!isa<RankedTensorType>(o.get().getType()))
            continue;
          LayoutAttr to =
              resultLayout(fn, o.getOperandNumber(),
                           layoutOrReplicated(o.get(), meshRef, meshRank));
          o.set(materialize(o.get(), to, &op));
          fn.setResultAttr(o.getOperandNumber(),
                           ShardXDialect::getLayoutAttrName(), to);
        }
        continue;
      }
      // Tensors read from inside regions (captured) must be whole.
      if (op.getNumRegions() > 0) {
        SmallVector<OpOperand *> captured;
        op.walk([&](Operation *inner) {
          if (inner == &op)
            return;
          for (OpOperand &use : inner->getOpOperands()) {
            Value v = use.get();
            if (isa<RankedTensorType>(v.getType()) &&
                v.getParentRegion()->getParentOp() != &op &&
                !op.isProperAncestor(v.getParentRegion()->getParentOp()))
              captured.push_back(&use);
          }
        });
        auto tableLayout = op.getAttrOfType<LayoutAttr>(kTableLayoutAttrName);
        for (OpOperand *use : captured)
          use->set(materialize(use->get(),
                               tableLayout
                                   ? tableLayout
                                   : LayoutAttr::get(meshRef, Layout(meshRank)),
                               &op));
      }
      if (!op.hasAttr(ShardXDialect::getOperandLayoutsAttrName()))
        continue;
      for (OpOperand &o : op.getOpOperands()) {
        if (!isa<RankedTensorType>(o.get().getType()))
          continue;
        LayoutAttr to = requiredLayout(o);
        if (to)
          o.set(materialize(o.get(), to, &op));
      }
    }
    // Remove rematerialized originals left without uses.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(fn.getBody().front())))
      if (op.use_empty() && op.getNumResults() > 0 &&
          isRematerializable(op.getResult(0)))
        op.erase();
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(fn.getBody().front())))
      if (isa<tensor::EmptyOp>(op) && op.use_empty())
        op.erase();
    return success();
  }
};

} // namespace
