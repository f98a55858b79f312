//===- AttentionRules.cpp - Sharding rules of the attention ops -----------===//
//
// Part of ShardX.
//
// `shardx.attention` and its backward ops in factors (docs/Rules.md,
// "Attention"): batch `b`, key/value heads `hk`, query heads per key/value
// head `g`, queries `sq`, keys `sk`, widths `d` (scores) and `dv` (values).
//
//   attention:     q [b, hk*g, sq, d], k [b, hk, sk, d], v [b, hk, sk, dv]
//                  -> out [b, hk*g, sq, dv], lse [b, hk*g, sq]
//   attention_dq:  ... -> dq [b, hk*g, sq, d]      sk: a sum
//   attention_dkv: ... -> dk [b, hk, sk, d], dv [b, hk, sk, dv]
//                                                  g, sq: sums
//
// The forward's softmax normalizes over every key, so `sk` stays whole
// there (the keys and values are gathered); given the forward's `lse` and
// `out`, the backward is a plain sum over the keys for `dq` and over the
// queries for `dk` and `dv`, so those factors may be split into pending
// sums. `d` and `dv` are contracted inside the scores (and `dv` in
// `rowsum(dout * out)`): whole.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

using FactorKind = ShardingRule::FactorKind;
using DimFactors = SmallVector<SmallVector<int64_t>>;

enum class AttentionPart { Forward, Dq, Dkv };

/// The factors of one attention op and its tensors' dims in them.
struct AttentionFactors {
  int64_t b, hk, g = -1, sq, sk, d, dv;

  SmallVector<int64_t> heads() const {
    return g < 0 ? SmallVector<int64_t>{hk} : SmallVector<int64_t>{hk, g};
  }
  DimFactors q() const { return {{b}, heads(), {sq}, {d}}; }
  DimFactors k() const { return {{b}, {hk}, {sk}, {d}}; }
  DimFactors v() const { return {{b}, {hk}, {sk}, {dv}}; }
  DimFactors rows(int64_t width) const {
    return {{b}, heads(), {sq}, {width}};
  }
  DimFactors lse() const { return {{b}, heads(), {sq}}; }
};

FailureOr<ShardingRule> attentionRule(Operation *op, AttentionPart part) {
  AttentionDims dims = AttentionDims::get(op);
  ShardingRule rule;
  AttentionFactors f;
  auto kind = [&](bool sum) {
    return sum ? FactorKind::Reduction : FactorKind::Parallel;
  };
  f.b = rule.addFactor(dims.batch, FactorKind::Parallel);
  f.hk = rule.addFactor(dims.kvHeads, FactorKind::Parallel);
  // One head factor when each key/value head has one query head (or the
  // grouping is not known).
  if (!ShapedType::isDynamic(dims.groups) && dims.groups > 1)
    f.g = rule.addFactor(dims.groups, kind(part == AttentionPart::Dkv));
  else if (dims.heads != dims.kvHeads)
    return failure();
  f.sq = rule.addFactor(dims.queries, kind(part == AttentionPart::Dkv));
  f.sk = rule.addFactor(dims.keys, part == AttentionPart::Forward
                                       ? FactorKind::NeedReplication
                                       : kind(part == AttentionPart::Dq));
  f.d = rule.addFactor(dims.width, FactorKind::NeedReplication);
  f.dv = rule.addFactor(dims.valueWidth, FactorKind::NeedReplication);

  rule.operands = {f.q(), f.k(), f.v()};
  if (part != AttentionPart::Forward)
    rule.operands.append({f.rows(f.dv), f.lse(), f.rows(f.dv)});
  if (op->getNumOperands() > rule.operands.size()) // the positions
    rule.operands.append({{{f.sq}}, {{f.sk}}});
  switch (part) {
  case AttentionPart::Forward:
    rule.results = {f.rows(f.dv), f.lse()};
    break;
  case AttentionPart::Dq:
    rule.results = {f.q()};
    break;
  case AttentionPart::Dkv:
    rule.results = {f.k(), f.v()};
    break;
  }
  // The loop nests: the scores (over d), the values' product or dP (over
  // dv), the softmax, and the backward's dq or dk (over d).
  SmallVector<int64_t> scores = {f.b, f.hk, f.sq, f.sk};
  if (f.g >= 0)
    scores.push_back(f.g);
  auto nest = [&](std::optional<int64_t> width) {
    SmallVector<int64_t> n = scores;
    if (width)
      n.push_back(*width);
    return n;
  };
  rule.nests = {nest(f.d), nest(f.dv), nest(std::nullopt)};
  if (part == AttentionPart::Dq)
    rule.nests.push_back(nest(f.d));
  if (part == AttentionPart::Dkv)
    rule.nests.append({nest(f.d), nest(f.dv)});
  return rule;
}

template <typename OpT, AttentionPart Part>
struct AttentionRule
    : public ShardingRuleOpInterface::ExternalModel<AttentionRule<OpT, Part>,
                                                    OpT> {
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    return attentionRule(op, Part);
  }

  /// The backward's split factors give partial sums, each computed from
  /// nothing (a fresh accumulator).
  std::optional<::shardx::ReduceOp> getReductionKind(Operation *) const {
    if (Part == AttentionPart::Forward)
      return std::nullopt;
    return ::shardx::ReduceOp::Sum;
  }
  bool hasIdentityInit(Operation *) const {
    return Part != AttentionPart::Forward;
  }
};

} // namespace

void mlir::shardx::registerAttentionShardingRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, ShardXDialect *) {
    AttentionOp::attachInterface<
        AttentionRule<AttentionOp, AttentionPart::Forward>>(*ctx);
    AttentionDqOp::attachInterface<
        AttentionRule<AttentionDqOp, AttentionPart::Dq>>(*ctx);
    AttentionDkvOp::attachInterface<
        AttentionRule<AttentionDkvOp, AttentionPart::Dkv>>(*ctx);
  });
}
