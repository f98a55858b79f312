//===- FunctionCost.h - The cost of a function's layouts --------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The cost of every op's layouts in a function, kept up to date while a
// search changes them: the reshards each value needs to reach every
// distinct layout its consumers need (one redistribute per layout, as
// shardx-insert-reshards shares them) priced by CostModel.h, plus each op's
// local loop time. The uses of every value are indexed by the layouts they
// need (UseIndex.h), so a change of one op is priced without a scan of all
// uses; a trial
// changes ops, prices the difference, and is kept or undone.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FUNCTIONCOST_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FUNCTIONCOST_H

#include "CostModel.h"
#include "ShardingState.h"
#include "UseIndex.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/DenseMap.h"

#include <deque>
#include <vector>

namespace mlir::shardx {

/// The ops whose layouts a search may change, in program order, with their
/// rules (a rule cache's kept ones where it keeps them, else owned here).
struct MovableOps {
  SmallVector<Operation *> ops;
  DenseMap<Operation *, unsigned> position;
  DenseMap<Operation *, const ShardingRule *> rules;
  /// The rules handed over (addresses stable while it grows).
  std::deque<ShardingRule> owned;

  void reserve(size_t numOps) {
    rules.reserve(numOps);
    iterations.reserve(numOps);
    position.reserve(numOps);
  }
  void add(Operation *op, ShardingRule rule) {
    owned.push_back(std::move(rule));
    add(op, &owned.back());
  }
  /// `rule` outlives this.
  void add(Operation *op, const ShardingRule *rule) {
    add(op, rule, CostModel::work(*rule, 1));
  }
  /// With `CostModel::work(*rule, 1)` known (a warm start's).
  void add(Operation *op, const ShardingRule *rule, double iterationsOfOp) {
    ops.push_back(op);
    rules.try_emplace(op, rule);
    iterations.try_emplace(op, iterationsOfOp);
    position[op] = ops.size() - 1;
  }
  const ShardingRule &ruleOf(Operation *op) const {
    return *rules.find(op)->second;
  }
  /// CostModel::work(ruleOf(op), shardedWork), its product over the rule's
  /// factors taken once per op (the search's innermost costs ask it).
  double work(Operation *op, int64_t shardedWork) const {
    return iterations.find(op)->second / shardedWork;
  }

private:
  /// CostModel::work(rule, 1) per op.
  DenseMap<Operation *, double> iterations;
};

/// A tentative change of one op's layouts.
struct Move {
  Operation *op;
  const OpLayouts *layouts;
};

class FunctionCost {
public:
  FunctionCost(func::FuncOp fn, ShardingState &state, CostModel &costs,
               const MovableOps &movable)
      : fn(fn), state(state), costs(costs), movable(movable) {}

  /// Indexes the uses of the function's top-level values and arguments
  /// (once every op has its layouts).
  void indexUses();

  /// The reshards of `v` to every distinct layout its uses need, with
  /// `move` applied (one redistribute per layout, shared by its consumers).
  double valueCost(Value v, const Move *move);
  /// The reshards of every value.
  double totalCost();
  /// The values whose cost a change of `op` touches.
  static SmallVector<Value> affectedBy(Operation *op);

  /// The (use rank, layout) pairs whose first occurrences in rank order are
  /// the distinct layouts `v`'s uses need, with `move` applied; uses by
  /// `skip` and nested uses (unless `withNested`) left out.
  void neededLayouts(Value v, LayoutAttr from, const Move *move,
                     Operation *skip, bool withNested,
                     SmallVectorImpl<std::pair<unsigned, LayoutAttr>> &out);

  /// The positions of the movable ops that use `v`, sorted.
  ArrayRef<unsigned> movableUsers(Value v) { return uses.of(v).movableUsers; }

  /// Iterations of `op`'s local loop under `s`.
  double work(Operation *op, const OpLayouts &s) const {
    return movable.work(op, s.shardedWork);
  }
  /// The time `op`'s local loop takes under `s` at the compute rate.
  double computeUs(Operation *op, const OpLayouts &s) const {
    return costs.getUsPerIteration() * movable.work(op, s.shardedWork) +
           costs.haloUs(s.halos);
  }

  /// Changes made by a trial, with the costs of every value they touch as
  /// they were before it.
  struct Trial {
    SmallVector<std::pair<Operation *, OpLayouts>, 4> undo;
    DenseMap<Value, double> before;
    SmallVector<Value> touched;
    double workDelta = 0;
  };
  /// Gives `op` the layouts `s` as part of `trial`.
  void change(Operation *op, OpLayouts s, Trial &trial);
  /// How much the reshards of the values `trial` touched changed.
  double costDelta(Trial &trial);
  /// Undoes `trial`'s changes.
  void revert(Trial &trial);

private:
  /// The layout `v` has with `move` applied.
  LayoutAttr attrWith(Value v, const Move *move);
  /// The layout `use` needs when its owner does not change (the owner's
  /// layouts, an annotation, the enclosing op of a nested read); null for a
  /// use that needs none. Not for uses by the return.
  LayoutAttr fixedRequirement(OpOperand &use);
  /// Forgets the kept costs of the values a change of `op` touches.
  void forgetCosts(Operation *op);
  /// Updates the needs of `op`'s operands from layouts `from` to `to`.
  void moveNeeds(Operation *op, const OpLayouts &from, const OpLayouts &to);

  func::FuncOp fn;
  ShardingState &state;
  CostModel &costs;
  const MovableOps &movable;
  UseIndex uses;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FUNCTIONCOST_H
