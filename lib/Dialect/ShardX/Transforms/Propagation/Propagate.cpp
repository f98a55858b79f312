//===- Propagate.cpp - The shardx-propagate pass --------------------------===//
//
// Part of ShardX.
//
// shardx-propagate chooses a sharding strategy for every op by cost (see
// Passes.td). The pass builds the cost model of a function's mesh
// (CostModel.h), runs the search the `strategy` option names
// (PropagationSearch.h) into a sharding state (ShardingState.h), and
// writes the state to the IR once. The pass owns the rule cache
// (RuleCache.h) the searches of one run share.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"
#include "PropagationSearch.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_PROPAGATEPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

std::unique_ptr<PropagationSearch> mlir::shardx::createPropagationSearch(
    StringRef name, MeshOp mesh, CostModel &costs, RuleCache &rules,
    const PropagationOptions &options, llvm::StringSet<> &warned) {
  if (name == "greedy")
    return createGreedySearch(mesh, costs, rules, options, warned);
  return nullptr;
}

namespace {

struct PropagatePass
    : public mlir::shardx::impl::PropagatePassBase<PropagatePass> {
  using PropagatePassBase::PropagatePassBase;

  LogicalResult propagate(func::FuncOp fn, MeshOp mesh, RuleCache &rules,
                          llvm::StringSet<> &warned) {
    if (!fn.getBody().hasOneBlock())
      return fn.emitError(
          "functions with more than one block are not supported");
    MeshSpec spec = getMeshSpec(mesh);
    // Every choice is priced by the planner: a mesh it cannot plan on
    // would leave every reshard at an infinite cost.
    if (std::string reason = Planner::checkMesh(spec); !reason.empty())
      return mesh.emitError("cannot propagate layouts on this mesh: ")
             << reason;
    overrideLinkCosts(spec, bandwidthOverride, latencyOverride);
    CostModel costs(std::move(spec), computeRate);
    PropagationOptions options;
    options.userLayoutsOnly = userLayoutsOnly;
    options.refine = refineGraph;
    options.printCost = printCost;
    options.recordAlternatives = recordAlternatives;
    std::unique_ptr<PropagationSearch> search =
        createPropagationSearch(strategy, mesh, costs, rules, options, warned);
    if (!search)
      return fn.emitError("unknown propagation strategy '")
             << strategy << "' (known: " << kPropagationSearchNames << ")";
    ShardingState state(FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                        mesh.getShape().size());
    if (failed(search->run(fn, state)))
      return failure();
    state.writeToIR();
    search->finish(fn);
    return success();
  }

  void runOnOperation() override {
    llvm::StringSet<> warned;
    RuleCache rules;
    // Functions without layouts stay as they are (replicated).
    if (failed(forEachShardedFunction(
            getOperation(), [&](func::FuncOp fn, MeshOp mesh) {
              return propagate(fn, mesh, rules, warned);
            })))
      signalPassFailure();
  }
};

} // namespace
