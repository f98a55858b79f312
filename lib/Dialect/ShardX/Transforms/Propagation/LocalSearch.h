//===- LocalSearch.h - Whole-graph refinement of chosen layouts -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The second phase of the greedy search. The program-order phase decides
// each op from its operands' layouts and the hints; the local search then
// treats the whole function at once, by its FunctionCost. Sweeps,
// alternating backward and forward over the ops, change an op's layouts
// when that lowers the total (ties to less local work). Where no single
// change helps, cascades change an op together with the neighbours it
// disturbs (a pending Partial reduced once upstream instead of in every
// branch; a chain of ops moved to another layout together) and are kept
// only when the total drops. Every kept change lowers (cost, work)
// lexicographically, so the search ends; the visiting order is the
// program's, so the result is deterministic.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_LOCALSEARCH_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_LOCALSEARCH_H

#include "FunctionCost.h"
#include "OpShardingSpace.h"

#include "llvm/ADT/DenseSet.h"

#include <deque>
#include <unordered_map>

namespace mlir::shardx {

/// Which ops a sweep of the local search should look at again. An op is
/// marked directly, or through its operands: stamping a value marks all its
/// consumers at once (an op is dirty when it is marked or one of its
/// operands was stamped after the op was last cleared), so a change costs
/// O(operands + results) whatever the fan-out.
class DirtyMarks {
public:
  void mark(Operation *op) { dirty.insert(op); }
  void stamp(Value v) { stamped[v] = ++clock; }
  bool isDirty(Operation *op) const;
  /// Clears `op`'s mark; returns whether it was dirty.
  bool clear(Operation *op);

private:
  DenseSet<Operation *> dirty;
  DenseMap<Value, uint64_t> stamped;
  DenseMap<Operation *, uint64_t> cleared;
  uint64_t clock = 0;
};

class LocalSearch {
public:
  LocalSearch(func::FuncOp fn, ShardingState &state, OpShardingSpace &space,
              FunctionCost &fnCost, CostModel &costs, const MovableOps &movable,
              SearchCaches *shared = nullptr)
      : fn(fn), state(state), space(space), fnCost(fnCost), costs(costs),
        movable(movable),
        candidateCache(shared ? shared->candidates : ownCandidates) {}

  /// Local search over the whole function; returns the number of changes.
  /// `between`, when given, runs after each sweep; when it returns true it
  /// changed layouts the search does not own (the function's uses are
  /// indexed again and every op is visited again).
  /// With `startAt`, the first sweep looks only at the users of those
  /// values (a warm start: the rest is as a finished search left it).
  int64_t refine(function_ref<bool()> between = nullptr,
                 std::optional<ArrayRef<Value>> startAt = std::nullopt);
  /// Attaches `shardx.alternatives` to every movable op: its other
  /// candidates, each priced as the change of the function's cost (reshards
  /// and local work) if only that op took it.
  void recordAlternativeCosts();

  /// Costs closer than this (microseconds) tie.
  static constexpr double kTieUs = 1e-3;
  static constexpr unsigned kCascadeLimit = 256;
  /// A cascade disturbs the other consumers of a value only when there are
  /// at most this many: a value read by many ops (a weight shared by every
  /// layer, a shape reused everywhere) is never moved by a cascade, which
  /// could not move all its consumers within its limit anyway, and the
  /// work per op then does not depend on the function's size.
  static constexpr unsigned kFanOutLimit = 16;
  static constexpr unsigned kMaxAlternatives = 8;
  /// The most ops a reshard is moved up through (`tryHoist`).
  static constexpr unsigned kHoistLimit = 16;

private:
  /// Layouts for `op` given its operands' current layouts: replicated,
  /// each operand's layout, each layout another consumer needs an operand
  /// in, each layout the results' consumers need; alone and merged with the
  /// operands' layouts, with pending Partial operands kept or reduced first;
  /// distinct, and other than its current ones. The list is the cache's
  /// (valid while the search runs) or, for an op whose context is not
  /// keyed, one kept in `unkeyed` until the next top-level look at an op.
  const SmallVector<OpLayouts, 4> &candidates(Operation *op);
  SmallVector<OpLayouts, 4>
  computeCandidates(Operation *op, ArrayRef<Value> operands,
                    ArrayRef<Value> results, ArrayRef<LayoutAttr> operandAttrs,
                    ArrayRef<SmallVector<LayoutAttr, 4>> needs);
  /// The candidates of an op depend only on its rule, types and body and
  /// on the layouts around it (its operands', its own, the ones other
  /// consumers need): ops in the same context (the layers of a model)
  /// share them. `key` gets that context; false when it is not keyed.
  bool candidateKey(Operation *op, ArrayRef<LayoutAttr> operandAttrs,
                    ArrayRef<SmallVector<LayoutAttr, 4>> needs,
                    SmallVectorImpl<uintptr_t> &key);
  /// Applies `s` to `op`, then lets the neighbours it disturbs (consumers
  /// of a result whose layout changed, other consumers of an operand now
  /// needed in another layout) pick their locally best layouts, in program
  /// order, up to `kCascadeLimit` ops. Kept when the total cost drops.
  bool tryCascade(Operation *op, const OpLayouts &s,
                  FunctionCost::Trial &trial);
  /// Moves a reshard of `op`'s result up a chain of ops that each read one
  /// operand with data (transposes, reshapes, broadcasts, elementwise ops:
  /// their inits are rematerialized): `op` and then its producers take the
  /// layout the consumer needs, so the reshard runs on the chain's operand
  /// where it is cheapest (a gather of the keys and values before the
  /// grouped-query repeat that broadcasts them to every head). One op at
  /// a time cannot get there (the reshard costs the same on each tensor of
  /// the chain until the smaller one) and a cascade does not (each
  /// neighbour takes its locally cheapest, sharded, layout). Kept, up to
  /// the cheapest op of the chain, when the total drops.
  bool tryHoist(Operation *op, FunctionCost::Trial &trial);
  /// Marks the ops next to `op` (producers and consumers of its operands,
  /// consumers of its results) for another look.
  void markNeighbours(Operation *op);
  /// One look at `op` in a sweep: whether it changed.
  bool visit(Operation *op);

  func::FuncOp fn;
  ShardingState &state;
  OpShardingSpace &space;
  FunctionCost &fnCost;
  CostModel &costs;
  const MovableOps &movable;
  std::unordered_map<SearchKey, SmallVector<OpLayouts, 4>, SearchKeyHash>
      ownCandidates;
  /// `ownCandidates`, or the caller's kept across runs.
  std::unordered_map<SearchKey, SmallVector<OpLayouts, 4>, SearchKeyHash>
      &candidateCache;
  /// The candidates of ops whose context is not keyed (`candidates`),
  /// dropped at the start of each `visit` (no list of them is held then).
  std::deque<SmallVector<OpLayouts, 4>> unkeyed;
  /// The key looked up last (its storage reused: no allocation per look).
  SearchKey lookup;
  DirtyMarks marks;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_LOCALSEARCH_H
