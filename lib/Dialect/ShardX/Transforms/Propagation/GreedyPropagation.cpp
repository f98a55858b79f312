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
#include "shardx/Rules/EmbeddingRule.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// The modeled step: reshards plus the movable ops' local work.
double stepUs(FunctionCost &cost, ShardingState &state,
              const MovableOps &movable) {
  double us = cost.totalCost();
  for (Operation *op : movable.ops)
    us += cost.computeUs(op, state.get(op));
  return us;
}

/// Lays out again each op that reads a captured tensor through a rule of
/// its own (shardCapturingOp: an embedding lookup), from the layouts its
/// table and index have now. Program order fixed them from the layouts
/// those had then, and the refinement moves neither such an op nor its
/// captured read, so a table the refinement made whole would still be read
/// as it was (a Partial table's lookup then reads its whole table as a free
/// `R -> P(sum)` and its users all-reduce the result). Whether any changed.
bool relayCapturingOps(func::FuncOp fn, ShardingState &state,
                       OpShardingSpace &space, bool partialTables) {
  bool changed = false;
  auto layoutOf = [&](Value v) -> const ::shardx::Layout & {
    return space.layoutOf(v);
  };
  for (Operation &op : fn.getBody().front()) {
    LayoutAttr captured = state.getCapturedLayout(&op);
    if (!captured)
      continue;
    std::optional<CapturingOpShardings> now =
        shardCapturingOp(&op, layoutOf, space.getMeshRank(), partialTables);
    if (!now) {
      // The rule no longer applies (a whole table): replicated, as program
      // order runs such an op.
      state.set(&op, space.replicated(&op));
      state.clearCapturedLayout(&op);
      changed = true;
      continue;
    }
    OpLayouts s;
    s.operandLayouts.assign(now->operands.begin(), now->operands.end());
    s.resultLayouts.assign(now->results.begin(), now->results.end());
    s.valid = true;
    state.attach(s);
    LayoutAttr nowCaptured = state.attr(now->captured);
    if (nowCaptured == captured && s.sameLayouts(state.get(&op)))
      continue;
    state.set(&op, std::move(s));
    state.setCapturedLayout(&op, nowCaptured);
    changed = true;
  }
  return changed;
}

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
  /// One search's plan figures.
  struct Outcome {
    double programOrderCost = 0, refinedCost = 0, stepUs = 0;
    int64_t changes = 0;
    double step = 0, partStep = 0;
    /// Whether a lookup read a table pending a sum (in program order or
    /// at the end).
    bool readPartialTable = false;
  };
  /// Program order, then the refinement, into `state`; with
  /// `partialTables`, lookups may read tables pending a sum.
  LogicalResult search(func::FuncOp fn, ShardingState &state,
                       bool partialTables, Outcome &out,
                       const WarmStart *warm = nullptr);
  LogicalResult keep(const Outcome &o);

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
  ShardingState initial = state;
  if (options.warm && rules.keepsRules() && !options.userLayoutsOnly &&
      options.refine &&
      options.warm->layouts.size() ==
          fn.getBody().front().getOperations().size() &&
      options.warm->argLayouts.size() == fn.getNumArguments()) {
    Outcome warmed;
    if (succeeded(
            search(fn, state, /*partialTables=*/true, warmed, options.warm)) &&
        !warmed.readPartialTable)
      return keep(warmed);
    // A lookup reads a table pending a sum: searched from scratch.
    state = initial;
  }
  Outcome withPartial;
  if (failed(search(fn, state, /*partialTables=*/true, withPartial)))
    return failure();
  if (!withPartial.readPartialTable)
    return keep(withPartial);
  // Two searches: no warm start from them.
  if (options.record)
    *options.record = WarmStart();
  // A lookup read a table pending a sum. The refinement moves the lookup
  // only through its table's producer, so reading the table as it is can
  // lead it to a worse plan than reducing the table first: both are
  // searched, the shorter modeled step is kept (the first on a tie).
  ShardingState searched = state;
  state = initial;
  Outcome reduced;
  if (failed(search(fn, state, /*partialTables=*/false, reduced)))
    return failure();
  if (reduced.stepUs < withPartial.stepUs - LocalSearch::kTieUs)
    return keep(reduced);
  if (!options.recordAlternatives) {
    state = std::move(searched);
    return keep(withPartial);
  }
  // The alternatives written on the ops are the last search's: the kept
  // one runs again (the same plan).
  state = std::move(initial);
  if (failed(search(fn, state, /*partialTables=*/true, withPartial)))
    return failure();
  return keep(withPartial);
}

LogicalResult GreedyPropagation::keep(const Outcome &o) {
  programOrderCost = o.programOrderCost;
  refinedCost = o.refinedCost;
  changes = o.changes;
  step = o.step;
  partStep = o.partStep;
  return success();
}

LogicalResult GreedyPropagation::search(func::FuncOp fn, ShardingState &state,
                                        bool partialTables, Outcome &out,
                                        const WarmStart *warm) {
  ArrayRef<int64_t> meshShape = mesh.getShape();
  // The per-op maps hold large values (rules): sized once, so that they
  // are not rehashed and copied while they fill.
  size_t numOps = fn.getBody().front().getOperations().size();
  rules.reserve(numOps);
  state.reserve(numOps);
  OpShardingSpace space(meshShape, state);
  space.reserve(numOps);
  MovableOps movable;
  movable.reserve(numOps);
  // A warm start: the finished search's layouts, and the arguments whose
  // layouts changed since.
  SmallVector<Value> changedArgs;
  if (warm) {
    size_t i = 0;
    for (Operation &op : fn.getBody().front()) {
      if (warm->layouts[i].valid)
        state.set(&op, warm->layouts[i]);
      if (warm->captured[i])
        state.setCapturedLayout(&op, warm->captured[i]);
      ++i;
    }
    SmallVector<Operation *> ops = llvm::to_vector(
        llvm::make_pointer_range(fn.getBody().front().getOperations()));
    for (auto [position, iterations] :
         llvm::zip_equal(warm->movable, warm->iterations)) {
      Operation *op = ops[position];
      const ShardingRule *rule = rules.kept(op);
      space.setRuleId(op, rules.idOf(op, *rule));
      movable.add(op, rule, iterations);
    }
    for (BlockArgument arg : fn.getArguments())
      if (isa<RankedTensorType>(arg.getType()) &&
          fn.getArgAttrOfType<LayoutAttr>(arg.getArgNumber(),
                                          ShardXDialect::getLayoutAttrName()) !=
              warm->argLayouts[arg.getArgNumber()])
        changedArgs.push_back(arg);
  } else {
    ProgramOrderSearch order(fn, state, space, rules, costs, movable,
                             options.userLayoutsOnly, warned, options.caches);
    order.setPartialTables(partialTables);
    if (failed(order.run()))
      return failure();
  }
  auto readsPartialTable = [&] {
    for (Operation &op : fn.getBody().front())
      if (LayoutAttr t = state.getCapturedLayout(&op);
          t && t.getLayout().hasPartial())
        return true;
    return false;
  };
  out.readPartialTable = readsPartialTable();
  FunctionCost cost(fn, state, costs, movable);
  cost.indexUses();
  out.programOrderCost = options.printCost ? cost.totalCost() : 0;
  LocalSearch local(fn, state, space, cost, costs, movable, options.caches);
  // The ops that read a captured tensor by a rule of their own are laid
  // out again after each sweep, from their tables' layouts then.
  auto relay = [&] {
    return relayCapturingOps(fn, state, space, partialTables);
  };
  if (options.refine && !options.userLayoutsOnly)
    out.changes = warm ? local.refine(relay, ArrayRef<Value>(changedArgs))
                       : local.refine(relay);
  out.readPartialTable |= readsPartialTable();
  out.stepUs = stepUs(cost, state, movable);
  if (options.recordAlternatives && !options.userLayoutsOnly)
    local.recordAlternativeCosts();
  if (options.printCost)
    out.refinedCost = cost.totalCost();
  if (options.stepTime)
    out.step = out.stepUs;
  if (options.stepTime && options.part) {
    // The same sums over the part, in program order.
    out.partStep = 0;
    Block &body = fn.getBody().front();
    for (BlockArgument arg : body.getArguments())
      if (isa<RankedTensorType>(arg.getType()) &&
          options.part->args.contains(arg.getArgNumber()))
        out.partStep += cost.valueCost(arg, nullptr);
    for (Operation &op : body) {
      if (!options.part->ops.contains(&op))
        continue;
      for (Value r : op.getResults())
        if (isa<RankedTensorType>(r.getType()))
          out.partStep += cost.valueCost(r, nullptr);
      if (movable.position.count(&op))
        out.partStep += cost.computeUs(&op, state.get(&op));
    }
  }
  if (options.record) {
    WarmStart &r = *options.record;
    Block &body = fn.getBody().front();
    r.layouts.clear();
    r.captured.clear();
    r.layouts.reserve(numOps);
    r.captured.reserve(numOps);
    DenseMap<Operation *, unsigned> position;
    position.reserve(numOps);
    for (Operation &op : body) {
      position[&op] = r.layouts.size();
      r.layouts.emplace_back();
      if (OpLayouts *l = state.find(&op)) {
        r.layouts.back() = *l;
        r.layouts.back().dropLayouts();
      }
      r.captured.push_back(state.getCapturedLayout(&op));
    }
    r.movable.clear();
    r.iterations.clear();
    for (Operation *op : movable.ops) {
      r.movable.push_back(position.lookup(op));
      r.iterations.push_back(movable.work(op, 1));
    }
    r.argLayouts.clear();
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
      r.argLayouts.push_back(fn.getArgAttrOfType<LayoutAttr>(
          i, ShardXDialect::getLayoutAttrName()));
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
