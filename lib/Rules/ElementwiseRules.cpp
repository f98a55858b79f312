//===- ElementwiseRules.cpp - Sharding rules of elementwise ops -----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Linearity.h"

#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// (d0, ..., dn) -> (d0, ..., dn), all parallel: every tensor operand and
/// result has the same shape. Instances on scalars, or ops that are not
/// elementwise (arith.constant), have no rule.
template <typename OpTy>
struct ElementwiseRule
    : public ShardingRuleOpInterface::ExternalModel<ElementwiseRule<OpTy>,
                                                    OpTy> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    if (!op->hasTrait<OpTrait::Elementwise>() || op->getNumResults() == 0)
      return failure();
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!type)
      return failure();
    for (Type t : llvm::concat<Type>(llvm::to_vector(op->getOperandTypes()),
                                     llvm::to_vector(op->getResultTypes()))) {
      auto other = dyn_cast<RankedTensorType>(t);
      if (!other || other.getShape() != type.getShape())
        return failure();
    }
    ShardingRule rule;
    SmallVector<SmallVector<int64_t>> identity;
    for (int64_t d = 0; d < type.getRank(); ++d)
      identity.push_back({rule.addFactor(type.getDimSize(d),
                                         ShardingRule::FactorKind::Parallel)});
    rule.operands.assign(op->getNumOperands(), identity);
    rule.results.assign(op->getNumResults(), identity);
    return rule;
  }

  /// Arith: add/sub of partials, scaling or division by a non-partial,
  /// negation. Math functions are not linear.
  bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial) const {
    return isa<arith::ArithDialect>(op->getDialect()) &&
           isArithLinearIn(op, partial);
  }

  /// A splat constant: rebuilt in any layout.
  bool isShapeOnly(Operation *op) const {
    if constexpr (std::is_same_v<OpTy, arith::ConstantOp>) {
      auto dense = dyn_cast<DenseElementsAttr>(cast<OpTy>(op).getValue());
      return dense && dense.isSplat();
    }
    return false;
  }
};

template <typename... Ops> void registerAll(MLIRContext *ctx) {
  (Ops::template attachInterface<ElementwiseRule<Ops>>(*ctx), ...);
}

} // namespace

void mlir::shardx::registerElementwiseShardingRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    registerAll<
#define GET_OP_LIST
#include "mlir/Dialect/Arith/IR/ArithOps.cpp.inc"
        >(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, math::MathDialect *) {
    registerAll<
#define GET_OP_LIST
#include "mlir/Dialect/Math/IR/MathOps.cpp.inc"
        >(ctx);
  });
}
