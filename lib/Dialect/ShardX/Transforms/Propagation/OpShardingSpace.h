//===- OpShardingSpace.h - The layouts one op can take ----------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// What any search needs to know of one op, independent of how it searches:
// an assignment of splits to the factors of the op's sharding rule
// (FactorProjection.h) projected onto the op's operands and results, with
// DTensor's Partial algebra applied (`evaluate`): reduction factors are
// split only with a known combiner and identity init and then give a
// Partial result; a Partial(sum|avg) operand stays Partial through an op
// that is linear in it (`keptPartials`). The answers an op's body gives
// (combiner, identity init, linearity) are asked once per op.
//
// Shardy splits its propagation the same way: the projection of an op's
// shardings onto its factors (sharding_projection.h) and what a factor may
// take (factor_propagation.h) are units any driver uses.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_OPSHARDINGSPACE_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_OPSHARDINGSPACE_H

#include "FactorProjection.h"
#include "ShardingState.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "llvm/ADT/SmallBitVector.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace mlir::shardx {

/// A key of a search cache: opaque pointers and small numbers.
using SearchKey = std::vector<uintptr_t>;
struct SearchKeyHash {
  size_t operator()(const SearchKey &key) const {
    return llvm::hash_combine_range(key.begin(), key.end());
  }
};
/// Appends the opaque pointers of `attrs` and a separator to `key`.
void appendAttrs(SmallVectorImpl<uintptr_t> &key, ArrayRef<LayoutAttr> attrs);

/// The choices a search remembers per context (ProgramOrderSearch::choose,
/// LocalSearch::candidates): they depend on the key alone, whose rule
/// numbers are those of one RuleCache, so a caller that runs many searches
/// with one RuleCache (shardx-auto-shard, a search per plan) may keep them
/// across the runs (PropagationOptions::caches).
struct SearchCaches {
  std::unordered_map<SearchKey, OpLayouts, SearchKeyHash> choices;
  std::unordered_map<SearchKey, SmallVector<OpLayouts, 4>, SearchKeyHash>
      candidates;
};

class OpShardingSpace {
public:
  /// Layouts on a mesh of `meshShape`; operands are read in the layouts
  /// `state` gives them now.
  OpShardingSpace(ArrayRef<int64_t> meshShape, const ShardingState &state)
      : meshShape(meshShape.begin(), meshShape.end()),
        meshRank(meshShape.size()), state(state) {}

  ArrayRef<int64_t> getMeshShape() const { return meshShape; }
  int64_t getMeshRank() const { return meshRank; }
  /// The layout `v` has now (ShardingState::layoutOf).
  const Layout &layoutOf(Value v) const {
    return state.layoutOf(v).getLayout();
  }

  /// The layouts of `op` (with `rule`, tensor `results`) under
  /// `assignment`: factors that must stay whole dropped, reduction factors
  /// split only where the combiner allows, Partial operands kept where
  /// `keepPartials` and the op is linear in them. Unpriced (cost 0);
  /// invalid when some operand or result cannot take its projection.
  OpLayouts evaluate(Operation *op, const ShardingRule &rule,
                     ArrayRef<Value> results, Assignment assignment,
                     bool keepPartials = true);

  /// The operands of `op` that stay Partial(sum|avg) through it (marked in
  /// `partialOperands`) and their common Partial op per mesh axis, when the
  /// factors split on the axes in `used` and the results reduce over the
  /// axes of `resultPartials`.
  SmallVector<std::optional<ReduceOp>>
  keptPartials(Operation *op, uint64_t used,
               ArrayRef<std::optional<ReduceOp>> resultPartials,
               llvm::SmallBitVector &partialOperands);

  /// Every tensor operand and result of `op` replicated.
  OpLayouts replicated(Operation *op) const;

  /// The op's combiner (getReductionKind) and whether its init is the
  /// combiner's identity (hasIdentityInit), asked once.
  std::optional<ReduceOp> reductionKind(Operation *op, bool &identityInit);
  /// Whether `op` is linear in the operands `partial` marks, asked once.
  bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial);
  /// The number (RuleCache::idOf) of `op`'s rule, for `contextKey`.
  void setRuleId(Operation *op, unsigned id) {
    OpFacts &f = facts[op];
    f.ruleId = id;
    f.keyed = false;
  }
  /// Room for the facts of `numOps` ops.
  void reserve(size_t numOps) { facts.reserve(numOps); }

  /// The part of a context every choice for `op` depends on: its name,
  /// rule, types, operands' layouts and what `evaluate` asks of its body.
  /// False when it is not keyed (more than `kMaxKeyedPartials` Partial
  /// operands).
  bool contextKey(Operation *op, const ShardingRule &rule,
                  ArrayRef<LayoutAttr> operandAttrs,
                  SmallVectorImpl<uintptr_t> &key);
  static constexpr unsigned kMaxKeyedPartials = 4;

private:
  /// What the search asks of an op's body (the rule interface reads the
  /// body each time).
  struct OpFacts {
    unsigned ruleId = 0;
    bool askedReduction = false;
    std::optional<ReduceOp> reduction;
    bool identityInit = false;
    SmallVector<std::pair<llvm::SmallBitVector, bool>, 2> linear;
    /// The parts of `contextKey` that do not depend on the layouts (its
    /// name, rule number and types; what its body says of reductions),
    /// built at its first key (`keyed`).
    bool keyed = false;
    SmallVector<uintptr_t, 12> staticKey;
    SmallVector<uintptr_t, 2> reductionKey;
  };

  std::vector<int64_t> meshShape;
  int64_t meshRank;
  const ShardingState &state;
  DenseMap<Operation *, OpFacts> facts;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_OPSHARDINGSPACE_H
