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
    // A size-1 dim of a group has no counterpart on the collapsed side: its
    // factor needs replication (split, it would leave ranks without data
    // the other side has, or give them data it lacks).
    for (int64_t d = 0; d < expanded.getRank(); ++d) {
      int64_t size = expanded.getDimSize(d);
      expandedDims.push_back({rule.addFactor(
          size, size == 1 ? ShardingRule::FactorKind::NeedReplication
                          : ShardingRule::FactorKind::Parallel)});
    }
    for (ReassociationIndices group : reshape.getReassociationIndices()) {
      SmallVector<int64_t> factors;
      for (int64_t d : group) {
        // The upstream verifier reads the indices as 32-bit integers: an
        // index of 2^32 passes it as 0 (found by fuzzing).
        if (d < 0 || d >= expanded.getRank())
          return failure();
        if (expanded.getDimSize(d) != 1)
          factors.push_back(expandedDims[d][0]);
      }
      collapsedDims.push_back(factors);
    }
    rule.operands.push_back(expands ? collapsedDims : expandedDims);
    rule.results.push_back(expands ? expandedDims : collapsedDims);
    return rule;
  }

  /// Data movement: a pending sum stays one.
  bool isLinearIn(Operation *, const llvm::SmallBitVector &) const {
    return true;
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

  /// Only a shape: rebuilt in any layout.
  bool isShapeOnly(Operation *) const { return true; }
};

using FactorKind = ShardingRule::FactorKind;
using DimFactors = SmallVector<SmallVector<int64_t>>;

/// Adds one dim of two tensors an op relates: a dim kept whole is one
/// shared parallel factor; otherwise each side gets its own factor, which
/// needs replication.
void addDimPair(ShardingRule &rule, bool whole, int64_t aSize, int64_t bSize,
                DimFactors &a, DimFactors &b) {
  if (whole) {
    int64_t f = rule.addFactor(aSize, FactorKind::Parallel);
    a.push_back({f});
    b.push_back({f});
    return;
  }
  a.push_back({rule.addFactor(aSize, FactorKind::NeedReplication)});
  b.push_back({rule.addFactor(bSize, FactorKind::NeedReplication)});
}

/// tensor.cast: a dim static and equal on both sides is one parallel
/// factor; a dim that changes between static and dynamic needs replication
/// (its local size could not be expressed).
struct CastRule
    : public ShardingRuleOpInterface::ExternalModel<CastRule, tensor::CastOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto castOp = cast<tensor::CastOp>(op);
    auto src = dyn_cast<RankedTensorType>(castOp.getSource().getType());
    auto res = dyn_cast<RankedTensorType>(castOp.getType());
    if (!src || !res)
      return failure();
    ShardingRule rule;
    DimFactors a, b;
    for (int64_t d = 0; d < src.getRank(); ++d)
      addDimPair(rule,
                 !src.isDynamicDim(d) && src.getDimSize(d) == res.getDimSize(d),
                 src.getDimSize(d), res.getDimSize(d), a, b);
    rule.operands.push_back(a);
    rule.results.push_back(b);
    return rule;
  }

  /// Data movement: a pending sum stays one.
  bool isLinearIn(Operation *, const llvm::SmallBitVector &) const {
    return true;
  }
};

/// One tensor whose every dim needs replication.
DimFactors wholeDims(ShardingRule &rule, RankedTensorType type) {
  DimFactors dims;
  for (int64_t size : type.getShape())
    dims.push_back({rule.addFactor(size, FactorKind::NeedReplication)});
  return dims;
}

/// tensor.extract: every rank reads the element, so the tensor is whole
/// (and a pending Partial is reduced first).
struct ExtractRule
    : public ShardingRuleOpInterface::ExternalModel<ExtractRule,
                                                    tensor::ExtractOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto extract = cast<tensor::ExtractOp>(op);
    ShardingRule rule;
    rule.operands.push_back(wholeDims(rule, extract.getTensor().getType()));
    return rule;
  }
};

/// tensor.from_elements: built from scalars every rank has: whole.
struct FromElementsRule
    : public ShardingRuleOpInterface::ExternalModel<FromElementsRule,
                                                    tensor::FromElementsOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto from = cast<tensor::FromElementsOp>(op);
    ShardingRule rule;
    rule.results.push_back(wholeDims(rule, from.getType()));
    return rule;
  }
};

/// tensor.extract_slice (static, not rank-reducing): a dim taken whole is one
/// parallel factor of source and result; a sliced dim needs replication.
struct ExtractSliceRule
    : public ShardingRuleOpInterface::ExternalModel<ExtractSliceRule,
                                                    tensor::ExtractSliceOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    RankedTensorType src = slice.getSourceType(), res = slice.getResultType();
    if (src.getRank() != res.getRank() || !slice.hasUnitStride() ||
        ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
        ShapedType::isDynamicShape(slice.getStaticSizes()))
      return failure();
    ShardingRule rule;
    DimFactors srcDims, resDims;
    for (int64_t d = 0; d < src.getRank(); ++d)
      addDimPair(rule,
                 slice.getStaticOffsets()[d] == 0 &&
                     slice.getStaticSizes()[d] == src.getDimSize(d),
                 src.getDimSize(d), res.getDimSize(d), srcDims, resDims);
    rule.operands.push_back(srcDims);
    rule.results.push_back(resDims);
    return rule;
  }
};

/// tensor.insert_slice (static, not rank-reducing): a dim the source covers
/// whole is one parallel factor of source, destination and result; a dim
/// inserted at a stride s > 1 (the stride-dilated output gradient of a
/// strided convolution) is one too, the destination's and result's a
/// windowed dim of stride s (docs/Rules.md, "Windowed ops"): each shard of
/// the destination holds the rows its source shard goes to.
struct InsertSliceRule
    : public ShardingRuleOpInterface::ExternalModel<InsertSliceRule,
                                                    tensor::InsertSliceOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    RankedTensorType src = insert.getSourceType(), dst = insert.getDestType();
    if (src.getRank() != dst.getRank() ||
        ShapedType::isDynamicShape(insert.getStaticOffsets()) ||
        ShapedType::isDynamicShape(insert.getStaticSizes()) ||
        ShapedType::isDynamicShape(insert.getStaticStrides()))
      return failure();
    ShardingRule rule;
    DimFactors srcDims, dstDims;
    for (int64_t d = 0; d < dst.getRank(); ++d) {
      int64_t stride = insert.getStaticStrides()[d],
              offset = insert.getStaticOffsets()[d];
      if (stride != 1) {
        int64_t size = src.getDimSize(d), whole = dst.getDimSize(d);
        int64_t high = whole - stride * size - offset;
        if (stride < 1 || ShapedType::isDynamic(size) ||
            ShapedType::isDynamic(whole) || high < 0)
          return failure();
        int64_t f = rule.addFactor(size, FactorKind::Parallel);
        srcDims.push_back({f});
        dstDims.push_back({f});
        for (bool result : {false, true}) {
          ShardingRule::WindowedDim w{result, result ? 0 : 1, d, offset, high,
                                      /*halo=*/false};
          w.stride = stride;
          rule.windows.push_back(w);
        }
        continue;
      }
      addDimPair(rule,
                 offset == 0 && src.getDimSize(d) == dst.getDimSize(d),
                 src.getDimSize(d), dst.getDimSize(d), srcDims, dstDims);
    }
    rule.operands.push_back(srcDims);
    rule.operands.push_back(dstDims);
    rule.results.push_back(dstDims);
    return rule;
  }
};

/// tensor.concat: every dim but the concatenated one is a shared parallel
/// factor; the concatenated dim needs replication.
struct ConcatRule
    : public ShardingRuleOpInterface::ExternalModel<ConcatRule,
                                                    tensor::ConcatOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto concat = cast<tensor::ConcatOp>(op);
    RankedTensorType res = concat.getResultType();
    int64_t dim = concat.getDim();
    ShardingRule rule;
    SmallVector<int64_t> shared(res.getRank(), -1);
    for (int64_t d = 0; d < res.getRank(); ++d)
      if (d != dim)
        shared[d] = rule.addFactor(res.getDimSize(d), FactorKind::Parallel);
    auto dimsOf = [&](RankedTensorType t) {
      SmallVector<SmallVector<int64_t>> dims;
      for (int64_t d = 0; d < t.getRank(); ++d)
        dims.push_back({d == dim ? rule.addFactor(t.getDimSize(d),
                                                  FactorKind::NeedReplication)
                                 : shared[d]});
      return dims;
    };
    for (Value input : concat.getInputs())
      rule.operands.push_back(dimsOf(cast<RankedTensorType>(input.getType())));
    rule.results.push_back(dimsOf(res));
    return rule;
  }
};

/// tensor.pad (static): unpadded dims are shared parallel factors; a dim
/// padded with a constant is one too, the result's a windowed dim.
struct PadRule
    : public ShardingRuleOpInterface::ExternalModel<PadRule, tensor::PadOp> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto pad = cast<tensor::PadOp>(op);
    RankedTensorType src = pad.getSourceType(), res = pad.getResultType();
    if (ShapedType::isDynamicShape(pad.getStaticLow()) ||
        ShapedType::isDynamicShape(pad.getStaticHigh()))
      return failure();
    ShardingRule rule;
    DimFactors srcDims, resDims;
    // A padded dim with a constant padding value is a windowed dim: split,
    // the first shard takes the low padding and the last the high.
    bool constant = pad.getConstantPaddingValue() != nullptr;
    for (int64_t d = 0; d < src.getRank(); ++d) {
      int64_t low = pad.getStaticLow()[d], high = pad.getStaticHigh()[d];
      bool padded = low != 0 || high != 0;
      if (padded && constant && low >= 0 && high >= 0 &&
          !src.isDynamicDim(d)) {
        int64_t f = rule.addFactor(src.getDimSize(d), FactorKind::Parallel);
        srcDims.push_back({f});
        resDims.push_back({f});
        rule.windows.push_back({/*result=*/true, 0, d, low, high,
                                /*halo=*/false});
        continue;
      }
      addDimPair(rule, !padded, src.getDimSize(d), res.getDimSize(d), srcDims,
                 resDims);
    }
    rule.operands.push_back(srcDims);
    rule.results.push_back(resDims);
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
    tensor::CastOp::attachInterface<CastRule>(*ctx);
    tensor::ExtractOp::attachInterface<ExtractRule>(*ctx);
    tensor::FromElementsOp::attachInterface<FromElementsRule>(*ctx);
    tensor::ExtractSliceOp::attachInterface<ExtractSliceRule>(*ctx);
    tensor::InsertSliceOp::attachInterface<InsertSliceRule>(*ctx);
    tensor::ConcatOp::attachInterface<ConcatRule>(*ctx);
    tensor::PadOp::attachInterface<PadRule>(*ctx);
  });
}
