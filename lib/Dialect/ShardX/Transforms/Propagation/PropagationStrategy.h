//===- PropagationStrategy.h - How shardx-propagate searches ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The search of shardx-propagate behind one interface: a strategy gets a
// function, the cost model (CostModel.h) and an empty sharding state
// (ShardingState.h) and fills the state with a strategy for every op that
// has tensor operands or results. The pass then writes the state to the IR.
// A new search (an exact solver, say) is one more implementation, named in
// createPropagationStrategy and chosen with `--shardx-propagate=strategy=`.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSTRATEGY_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSTRATEGY_H

#include "CostModel.h"
#include "ShardingState.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/StringSet.h"

#include <memory>

namespace mlir::shardx {

/// The pass options every strategy honours.
struct PropagationOptions {
  /// Everything not constrained by the user stays replicated.
  bool userLayoutsOnly = false;
  /// Search beyond the program-order choice (the greedy strategy's
  /// whole-graph refinement).
  bool refine = true;
  /// Emit a remark with the function's reshard cost.
  bool printCost = false;
  /// Attach `shardx.alternatives` to every op the search chose for.
  bool recordAlternatives = false;
};

class PropagationStrategy {
public:
  virtual ~PropagationStrategy();

  /// Chooses a strategy for every op of `fn`'s body with tensor operands
  /// or results into `state`; fails after emitting a diagnostic.
  virtual LogicalResult run(func::FuncOp fn, ShardingState &state) = 0;

  /// Called once the state is written to `fn`: remarks about the result
  /// (`print-cost`).
  virtual void finish(func::FuncOp fn) {}
};

/// The names createPropagationStrategy knows, for diagnostics.
constexpr llvm::StringLiteral kPropagationStrategyNames = "greedy";

/// The strategy named `name` on `mesh`, pricing with `costs`; null for an
/// unknown name. Ops without a rule are warned about once per op kind in
/// `warned`.
std::unique_ptr<PropagationStrategy>
createPropagationStrategy(StringRef name, MeshOp mesh, CostModel &costs,
                          const PropagationOptions &options,
                          llvm::StringSet<> &warned);

/// Program order, then whole-graph refinement by single changes and
/// bounded cascades (docs/Propagation.md).
std::unique_ptr<PropagationStrategy>
createGreedyPropagationStrategy(MeshOp mesh, CostModel &costs,
                                const PropagationOptions &options,
                                llvm::StringSet<> &warned);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSTRATEGY_H
