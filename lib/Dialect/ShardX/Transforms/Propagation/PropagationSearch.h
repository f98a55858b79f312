//===- PropagationSearch.h - How shardx-propagate searches ------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The search of shardx-propagate behind one interface: a search gets a
// function, the cost model (CostModel.h), the pass's rule cache
// (RuleCache.h) and an empty sharding state (ShardingState.h), and fills the
// state with the layouts of every op that has tensor operands or results.
// The pass then writes the state to the IR. The units a search is built of
// are shared: the layouts one op can take (OpShardingSpace.h) and the cost
// of a function's layouts with trial changes (FunctionCost.h). A new search
// (an exact solver, say) is one more implementation, named in
// createPropagationSearch and chosen with `--shardx-propagate=strategy=`.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSEARCH_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSEARCH_H

#include "CostModel.h"
#include "RuleCache.h"
#include "ShardingState.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <memory>
#include <vector>

namespace mlir::shardx {

struct SearchCaches;

/// A part of a function whose share of the modeled step time a search
/// reports (PropagationOptions::part): the local compute of its ops and the
/// reshards of their results and of its arguments.
struct StepPart {
  llvm::DenseSet<Operation *> ops;
  llvm::DenseSet<unsigned> args;
};

/// A finished search of a function, by the positions of its body's ops:
/// each op's layouts (`valid` false: none), the tensor each captured read
/// reads in, the ops its refinement may change, and the function's
/// argument layouts then. A search of the same function (or an identical
/// copy) under other argument layouts can start from it
/// (PropagationOptions::warm).
struct WarmStart {
  std::vector<OpLayouts> layouts;
  std::vector<LayoutAttr> captured;
  std::vector<unsigned> movable;
  /// Per movable op, its local loop's iterations (MovableOps::work).
  std::vector<double> iterations;
  std::vector<LayoutAttr> argLayouts;
};

/// The pass options every search honours.
struct PropagationOptions {
  /// Everything not constrained by the user stays replicated.
  bool userLayoutsOnly = false;
  /// Search beyond the program-order choice (the greedy search's
  /// whole-graph refinement).
  bool refine = true;
  /// Emit a remark with the function's reshard cost.
  bool printCost = false;
  /// Attach `shardx.alternatives` to every op the search chose for.
  bool recordAlternatives = false;
  /// Record the modeled step time (stepTime()).
  bool stepTime = false;
  /// Choices remembered across runs on one function with one RuleCache
  /// (OpShardingSpace.h); null: each run its own.
  SearchCaches *caches = nullptr;
  /// With `stepTime`: also the share of `part` (partTime()).
  const StepPart *part = nullptr;
  /// Start from this finished search instead of program order: the
  /// refinement's first sweep looks only at the users of the arguments
  /// whose layouts changed since, the rest staying as that search left it
  /// (the greedy search, with kept rules; a warm start that reads a table
  /// pending a sum searches from scratch instead). Not the search's answer
  /// from scratch: another local optimum, usually a better one.
  const WarmStart *warm = nullptr;
  /// Where the search leaves its final layouts for a later warm start (left
  /// empty where it searched twice, for a lookup of a partial table).
  WarmStart *record = nullptr;
};

class PropagationSearch {
public:
  virtual ~PropagationSearch();

  /// Chooses the layouts of every op of `fn`'s body with tensor operands
  /// or results into `state`; fails after emitting a diagnostic.
  virtual LogicalResult run(func::FuncOp fn, ShardingState &state) = 0;

  /// Called once the state is written to `fn`: remarks about the result
  /// (`print-cost`).
  virtual void finish(func::FuncOp fn) {}

  /// With `PropagationOptions::stepTime`, the modeled step time (us) of
  /// the last run: its reshards plus every op's local compute.
  virtual double stepTime() const { return 0; }
  /// With `PropagationOptions::part`, that part's share of stepTime().
  virtual double partTime() const { return 0; }
};

/// The names createPropagationSearch knows, for diagnostics.
constexpr llvm::StringLiteral kPropagationSearchNames = "greedy";

/// The search named `name` on `mesh`, pricing with `costs`, reading rules
/// through `rules`; null for an unknown name. Ops without a rule are warned
/// about once per op kind in `warned`.
std::unique_ptr<PropagationSearch>
createPropagationSearch(StringRef name, MeshOp mesh, CostModel &costs,
                        RuleCache &rules, const PropagationOptions &options,
                        llvm::StringSet<> &warned);

/// Program order (ProgramOrder.h), then whole-graph refinement by single
/// changes and bounded cascades (LocalSearch.h); docs/Propagation.md.
std::unique_ptr<PropagationSearch>
createGreedySearch(MeshOp mesh, CostModel &costs, RuleCache &rules,
                   const PropagationOptions &options,
                   llvm::StringSet<> &warned);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_PROPAGATIONSEARCH_H
