//===- TensorRules.cpp - Sharding rules of tensor ops ---------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Reshapes: one factor per dim of the expanded side; each dim of the
/// collapsed side is the product of its reassociation group's factors,
/// major to minor. (A shard of a minor factor of a merged dim is a strided
/// shard of the merged dim.)
template <typename OpTy>
struct ReshapeRule
    : public ShardingRuleOpInterface::ExternalModel<ReshapeRule<OpTy>, OpTy> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto reshape = cast<OpTy>(op);
    constexpr bool expands = std::is_same_v<OpTy, tensor::ExpandShapeOp>;
    RankedTensorType expanded =
        expands ? reshape.getResultType() : reshape.getSrcType();
    ShardingRule rule;
    SmallVector<SmallVector<int64_t>> expandedDims, collapsedDims;
    for (int64_t d = 0; d < expanded.getRank(); ++d)
      expandedDims.push_back({rule.addFactor(
          expanded.getDimSize(d), ShardingRule::FactorKind::Parallel)});
    for (ReassociationIndices group : reshape.getReassociationIndices()) {
      SmallVector<int64_t> factors;
      for (int64_t d : group)
        // Size-1 dims of the group carry no data split.
        if (expanded.getDimSize(d) != 1)
          factors.push_back(expandedDims[d][0]);
      collapsedDims.push_back(factors);
    }
    rule.operands.push_back(expands ? collapsedDims : expandedDims);
    rule.results.push_back(expands ? expandedDims : collapsedDims);
    return rule;
  }
};

/// tensor.empty: its result dims are parallel factors (dynamic sizes are
/// index operands, not tensors).
struct EmptyRule
    : public ShardingRuleOpInterface::ExternalModel<EmptyRule,
                                                    tensor::EmptyOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    ShardingRule rule;
    SmallVector<SmallVector<int64_t>> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      dims.push_back({rule.addFactor(type.getDimSize(d),
                                     ShardingRule::FactorKind::Parallel)});
    rule.results.push_back(dims);
    return rule;
  }
};

} // namespace

void mlir::shardx::registerTensorShardingRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    tensor::ExpandShapeOp::attachInterface<ReshapeRule<tensor::ExpandShapeOp>>(
        *ctx);
    tensor::CollapseShapeOp::attachInterface<
        ReshapeRule<tensor::CollapseShapeOp>>(*ctx);
    tensor::EmptyOp::attachInterface<EmptyRule>(*ctx);
  });
}
