//===- RuleCache.cpp - Sharding rules asked once --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "RuleCache.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace mlir::shardx;

FailureOr<ShardingRule> RuleCache::get(Operation *op) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return failure();
  if (!isa<linalg::LinalgOp>(op))
    return ruleOp.getShardingRule();
  auto signature = FunctionType::get(op->getContext(), op->getOperandTypes(),
                                     op->getResultTypes());
  auto key = std::make_tuple(op->getName(), op->getPropertiesAsAttribute(),
                             Type(signature));
  auto [it, inserted] = linalgRules.try_emplace(key);
  if (inserted) {
    FailureOr<ShardingRule> rule = ruleOp.getShardingRule();
    if (succeeded(rule))
      it->second = std::move(*rule);
  }
  if (!it->second)
    return failure();
  return *it->second;
}

const std::optional<ShardingRule> &RuleCache::prefetch(Operation *op) {
  if (keep) {
    auto [it, inserted] = keptRules.try_emplace(op);
    if (inserted) {
      it->second = std::make_unique<std::optional<ShardingRule>>();
      if (FailureOr<ShardingRule> r = get(op); succeeded(r))
        *it->second = std::move(*r);
    }
    return *it->second;
  }
  std::optional<ShardingRule> &rule = prefetched[op];
  if (FailureOr<ShardingRule> r = get(op); succeeded(r))
    rule = std::move(*r);
  return rule;
}

FailureOr<ShardingRule> RuleCache::take(Operation *op) {
  if (keep) {
    const std::optional<ShardingRule> &rule = prefetch(op);
    if (!rule)
      return failure();
    return *rule;
  }
  if (auto it = prefetched.find(op); it != prefetched.end()) {
    std::optional<ShardingRule> rule = std::move(it->second);
    prefetched.erase(it);
    if (!rule)
      return failure();
    return std::move(*rule);
  }
  return get(op);
}

size_t RuleCache::CodeHash::operator()(const std::vector<int64_t> &code) const {
  return llvm::hash_combine_range(code.begin(), code.end());
}

unsigned RuleCache::idOf(Operation *op, const ShardingRule &rule) {
  if (!keep)
    return idOf(rule);
  auto [it, inserted] = keptIds.try_emplace(op, 0);
  if (inserted)
    it->second = idOf(rule);
  return it->second;
}

unsigned RuleCache::idOf(const ShardingRule &rule) {
  std::vector<int64_t> code(rule.factorSizes.begin(), rule.factorSizes.end());
  code.push_back(-2);
  for (ShardingRule::FactorKind kind : rule.factorKinds)
    code.push_back(static_cast<int64_t>(kind));
  for (const auto *tensors : {&rule.operands, &rule.results}) {
    code.push_back(-3);
    for (const SmallVector<SmallVector<int64_t>> &dims : *tensors) {
      for (const SmallVector<int64_t> &factors : dims) {
        code.insert(code.end(), factors.begin(), factors.end());
        code.push_back(-4);
      }
      code.push_back(-5);
    }
  }
  return ids.try_emplace(std::move(code), ids.size()).first->second;
}
