//===- RuleCache.h - Sharding rules asked once ------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The sharding rules of a propagation run, owned by the pass and shared by
// whatever search it runs. Asking an op's rule interface is not free (a
// linalg op rebuilds its indexing maps), so:
//   - a linalg op's rule is computed once per signature (op name, inherent
//     attributes, operand and result types: all LinalgRules.cpp reads);
//   - a rule asked ahead of the op's turn (`prefetch`, by the hints pass of
//     the greedy search) is handed over once (`take`) instead of asked again;
//   - equal rules get one number (`idOf`), for the keys of a search's caches;
//   - a caller that runs many searches of one function without changing its
//     ops (shardx-auto-shard, a search per plan) may keep every op's rule
//     and number across them (`keepRules`): asked once in all.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_RULECACHE_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_RULECACHE_H

#include "shardx/Rules/ShardingRule.h"

#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseMap.h"

#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace mlir::shardx {

class RuleCache {
public:
  /// `op`'s rule from its interface; failure when it has none.
  FailureOr<ShardingRule> get(Operation *op);

  /// Asks `op`'s rule now and keeps it for `take`; the rule, or none.
  const std::optional<ShardingRule> &prefetch(Operation *op);

  /// `op`'s rule: the prefetched one (handed over once), else `get`.
  FailureOr<ShardingRule> take(Operation *op);

  /// With `keepRules`: `op`'s rule as kept (null when it has none), valid
  /// while this cache lives; a search reads it there instead of taking a
  /// copy per run.
  const ShardingRule *kept(Operation *op) {
    assert(keep && "rules are kept only after keepRules");
    const std::optional<ShardingRule> &rule = prefetch(op);
    return rule ? &*rule : nullptr;
  }
  bool keepsRules() const { return keep; }

  /// Room for the prefetched rules of `numOps` ops (the entries are large:
  /// sized once, they are not rehashed and copied while they fill).
  void reserve(size_t numOps) { prefetched.reserve(numOps); }

  /// A number per distinct rule (rules compare by content).
  unsigned idOf(const ShardingRule &rule);
  /// The number of `rule`, `op`'s: with `keepRules`, asked once per op.
  unsigned idOf(Operation *op, const ShardingRule &rule);

  /// From now on an op's rule and number are kept once asked: `take`
  /// hands over a copy, and `prefetch`, `take` and `idOf` answer from
  /// what they kept. Only for ops that neither change nor are erased while
  /// this cache lives (the rule of an op is asked of the op once).
  void keepRules() { keep = true; }

private:
  bool keep = false;
  DenseMap<Operation *, std::optional<ShardingRule>> prefetched;
  /// With `keep`: the rules kept, each allocated once (their addresses
  /// stay put while the map grows: `kept`).
  DenseMap<Operation *, std::unique_ptr<std::optional<ShardingRule>>> keptRules;
  DenseMap<Operation *, unsigned> keptIds;
  DenseMap<std::tuple<OperationName, Attribute, Type>,
           std::optional<ShardingRule>>
      linalgRules;
  struct CodeHash {
    size_t operator()(const std::vector<int64_t> &code) const;
  };
  std::unordered_map<std::vector<int64_t>, unsigned, CodeHash> ids;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_RULECACHE_H
