//===- ProgramOrder.h - Layouts chosen in program order ---------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The first phase of the greedy search: backward from the declared result
// layouts and user layouts, every value gets a hint (the layout its
// consumers would like); then, in program order, each op takes the
// cheapest of: each operand's layout as leader merged with the others', the
// replicated layouts, and the results' hints (which win ties), priced by
// the reshards its operands would need. Ops in the same context (the layers
// of a model) share one choice.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROGRAMORDER_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROGRAMORDER_H

#include "FunctionCost.h"
#include "OpShardingSpace.h"
#include "RuleCache.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "llvm/ADT/StringSet.h"

#include <unordered_map>

namespace mlir::shardx {

class ProgramOrderSearch {
public:
  /// Fills `state` for `fn`; the ops a later search may change go to
  /// `movable`. With `userLayoutsOnly` every op runs replicated. Ops
  /// without a rule are warned about once per op kind in `warned`.
  ProgramOrderSearch(func::FuncOp fn, ShardingState &state,
                     OpShardingSpace &space, RuleCache &rules, CostModel &costs,
                     MovableOps &movable, bool userLayoutsOnly,
                     llvm::StringSet<> &warned, SearchCaches *shared = nullptr)
      : fn(fn), state(state), space(space), rules(rules), costs(costs),
        movable(movable), userLayoutsOnly(userLayoutsOnly), warned(warned),
        cache(shared ? shared->choices : ownCache) {}

  /// Chooses every op's layouts; fails after a diagnostic.
  LogicalResult run();
  /// Whether a lookup may read a table pending a sum (shardCapturingOp);
  /// when not, such a table is reduced first.
  void setPartialTables(bool allowed) { partialTables = allowed; }

private:
  /// Layouts the consumers of a value would like it in (from declared
  /// result layouts and user layouts, propagated backward before the
  /// forward pass); a candidate of the value's producer.
  void computeHints();
  LogicalResult visit(Operation *op);
  /// The program-order choice, remembered per context like candidates
  /// (plus what the operands' reshards cost and the results' hints).
  OpLayouts choose(Operation *op, const ShardingRule &rule,
                   ArrayRef<Value> operands, ArrayRef<Value> results);
  OpLayouts chooseUncached(Operation *op, const ShardingRule &rule,
                           ArrayRef<Value> operands, ArrayRef<Value> results);
  /// `space.evaluate`, priced by the reshards of `operands`.
  OpLayouts evaluatePriced(Operation *op, const ShardingRule &rule,
                           ArrayRef<Value> operands, ArrayRef<Value> results,
                           Assignment assignment);
  double reshardCost(Value v, const Layout &to);

  func::FuncOp fn;
  ShardingState &state;
  OpShardingSpace &space;
  RuleCache &rules;
  CostModel &costs;
  MovableOps &movable;
  bool userLayoutsOnly;
  bool partialTables = true;
  llvm::StringSet<> &warned;
  DenseMap<Value, LayoutAttr> hints;
  /// Layouts values will be resharded to anyway (needed by an earlier op's
  /// layouts): reusing them is free.
  DenseMap<Value, SmallVector<LayoutAttr, 2>> available;
  std::unordered_map<SearchKey, OpLayouts, SearchKeyHash> ownCache;
  /// `ownCache`, or the caller's kept across runs.
  std::unordered_map<SearchKey, OpLayouts, SearchKeyHash> &cache;
  /// The key looked up last (its storage reused: no allocation per look).
  SearchKey lookup;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROGRAMORDER_H
