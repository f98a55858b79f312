//===- VerifyLayouts.cpp - The shardx-verify-layouts pass -----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-verify-layouts checks, after shardx-insert-reshards, that every
// operand has the layout its op's strategy needs, that each redistribute
// starts from its operand's layout and that results end in their declared
// layouts: no op computes on a layout its sharding rule does not allow.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_VERIFYLAYOUTSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

/// Checks one function; emits an error at every mismatch.
static LogicalResult verifyFunction(func::FuncOp fn, MeshOp mesh) {
  bool failedAny = false;
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  int64_t meshRank = mesh.getShape().size();
  fn.walk([&](Operation *op) {
    if (Operation *parent = op->getParentOp();
        parent && parent->hasAttr(kTableLayoutAttrName))
      return;
    if (isa<AnnotateOp>(op)) {
      op->emitError("shardx.annotate left after reshard insertion");
      failedAny = true;
      return;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (OpOperand &o : ret->getOpOperands()) {
        if (!isa<RankedTensorType>(o.get().getType()))
          continue;
        auto declared = fn.getResultAttrOfType<LayoutAttr>(
            o.getOperandNumber(), ShardXDialect::getLayoutAttrName());
        LayoutAttr have = layoutOrReplicated(o.get(), meshRef, meshRank);
        if (!declared || declared != have) {
          op->emitError() << "result #" << o.getOperandNumber()
                          << " has layout " << have << " but "
                          << (declared ? "is declared " : "declares none")
                          << (declared ? Attribute(declared) : Attribute());
          failedAny = true;
        }
      }
      return;
    }
    if (auto redistribute = dyn_cast<RedistributeOp>(op)) {
      LayoutAttr have =
          layoutOrReplicated(redistribute.getInput(), meshRef, meshRank);
      if (have != redistribute.getSource()) {
        op->emitError() << "redistributes from " << redistribute.getSource()
                        << " but its operand has layout " << have;
        failedAny = true;
      }
      return;
    }
    if (!op->hasAttr(ShardXDialect::getOperandLayoutsAttrName())) {
      for (Value v : op->getOperands())
        if (isa<RankedTensorType>(v.getType()) &&
            !layoutOrReplicated(v, meshRef, meshRank)
                 .getLayout()
                 .isReplicated()) {
          op->emitError("op without a sharding strategy has a sharded "
                        "operand (run shardx-propagate)");
          failedAny = true;
          return;
        }
      return;
    }
    for (OpOperand &o : op->getOpOperands()) {
      if (!isa<RankedTensorType>(o.get().getType()))
        continue;
      LayoutAttr need = requiredLayout(o);
      LayoutAttr have = layoutOrReplicated(o.get(), meshRef, meshRank);
      if (need && need != have) {
        op->emitError() << "operand #" << o.getOperandNumber() << " has layout "
                        << have << " but the op needs " << need;
        failedAny = true;
      }
    }
  });
  return failure(failedAny);
}

namespace {

struct VerifyLayoutsPass
    : public mlir::shardx::impl::VerifyLayoutsPassBase<VerifyLayoutsPass> {
  void runOnOperation() override {
    // Every function is checked, so that all mismatches are reported.
    bool failedAny = false;
    auto check = [&](func::FuncOp fn, MeshOp mesh) {
      failedAny |= failed(verifyFunction(fn, mesh));
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), check)) || failedAny)
      return signalPassFailure();
    // A check only: the IR is unchanged, so the pass manager skips the
    // verifier after it.
    markAllAnalysesPreserved();
  }
};

} // namespace
