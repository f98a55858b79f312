//===- GreedyPropagation.cpp - Program order, then refinement -------------===//
//
// Part of ShardX.
//
// The `greedy` propagation search (PropagationSearch.h): a pass in program
// order (ProgramOrder.h), then a whole-graph local search by single changes
// and bounded cascades (LocalSearch.h). Both see an op's layouts through
// OpShardingSpace.h and price a function through FunctionCost.h; this file
// only wires them together for one function.
//
//===----------------------------------------------------------------------===//

#include "FunctionCost.h"
#include "LocalSearch.h"
#include "OpShardingSpace.h"
#include "ProgramOrder.h"
#include "PropagationSearch.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

class GreedyPropagation : public PropagationSearch {
public:
  GreedyPropagation(MeshOp mesh, CostModel &costs, RuleCache &rules,
                    const PropagationOptions &options,
                    llvm::StringSet<> &warned)
      : mesh(mesh), costs(costs), rules(rules), options(options),
        warned(warned) {}

  LogicalResult run(func::FuncOp fn, ShardingState &state) override;
  void finish(func::FuncOp fn) override;
  double stepTime() const override { return step; }
  double partTime() const override { return partStep; }

private:
  MeshOp mesh;
  CostModel &costs;
  RuleCache &rules;
  PropagationOptions options;
  llvm::StringSet<> &warned;
  /// What `print-cost` reports.
  double programOrderCost = 0, refinedCost = 0;
  int64_t changes = 0;
  double step = 0, partStep = 0;
};

LogicalResult GreedyPropagation::run(func::FuncOp fn, ShardingState &state) {
  ArrayRef<int64_t> meshShape = mesh.getShape();
  // Arguments: declared layouts, replicated otherwise (recorded so that the
  // calling convention is explicit).
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (isa<RankedTensorType>(fn.getArgument(i).getType()) &&
        !fn.getArgAttr(i, ShardXDialect::getLayoutAttrName()))
      fn.setArgAttr(i, ShardXDialect::getLayoutAttrName(),
                    state.attr(Layout(meshShape.size())));
  // The per-op maps hold large values (rules): sized once, so that they
  // are not rehashed and copied while they fill.
  size_t numOps = fn.getBody().front().getOperations().size();
  rules.reserve(numOps);
  OpShardingSpace space(meshShape, state);
  space.reserve(numOps);
  MovableOps movable;
  movable.reserve(numOps);
  if (failed(ProgramOrderSearch(fn, state, space, rules, costs, movable,
                                options.userLayoutsOnly, warned, options.caches)
                 .run()))
    return failure();
  FunctionCost cost(fn, state, costs, movable);
  cost.indexUses();
  programOrderCost = options.printCost ? cost.totalCost() : 0;
  LocalSearch local(fn, state, space, cost, costs, movable, options.caches);
  changes = options.refine && !options.userLayoutsOnly ? local.refine() : 0;
  if (options.recordAlternatives && !options.userLayoutsOnly)
    local.recordAlternativeCosts();
  if (options.printCost)
    refinedCost = cost.totalCost();
  if (options.stepTime) {
    step = cost.totalCost();
    for (Operation *op : movable.ops)
      step += cost.computeUs(op, state.get(op));
  }
  if (options.stepTime && options.part) {
    // The same sums over the part, in program order.
    partStep = 0;
    Block &body = fn.getBody().front();
    for (BlockArgument arg : body.getArguments())
      if (isa<RankedTensorType>(arg.getType()) &&
          options.part->args.contains(arg.getArgNumber()))
        partStep += cost.valueCost(arg, nullptr);
    for (Operation &op : body) {
      if (!options.part->ops.contains(&op))
        continue;
      for (Value r : op.getResults())
        if (isa<RankedTensorType>(r.getType()))
          partStep += cost.valueCost(r, nullptr);
      if (movable.position.count(&op))
        partStep += cost.computeUs(&op, state.get(&op));
    }
  }
  return success();
}

void GreedyPropagation::finish(func::FuncOp fn) {
  if (options.printCost)
    fn.emitRemark() << llvm::formatv(
        "reshard cost {0:F3} us in program order, {1:F3} us after {2} "
        "whole-graph change(s)",
        programOrderCost, refinedCost, changes);
}

} // namespace

PropagationSearch::~PropagationSearch() = default;

std::unique_ptr<PropagationSearch> mlir::shardx::createGreedySearch(
    MeshOp mesh, CostModel &costs, RuleCache &rules,
    const PropagationOptions &options, llvm::StringSet<> &warned) {
  return std::make_unique<GreedyPropagation>(mesh, costs, rules, options,
                                             warned);
}
