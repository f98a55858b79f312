//===- FunctionCost.cpp - The cost of a function's layouts ----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "FunctionCost.h"

#include "LayoutUtils.h"

using namespace mlir;
using namespace mlir::shardx;

LayoutAttr FunctionCost::attrWith(Value v, const Move *move) {
  if (move)
    if (auto r = dyn_cast<OpResult>(v); r && r.getOwner() == move->op)
      return move->layouts->resultAttrs[tensorResultIndex(r)];
  return state.layoutOf(v);
}

LayoutAttr FunctionCost::fixedRequirement(OpOperand &use) {
  Operation *owner = use.getOwner();
  Block &body = fn.getBody().front();
  if (owner->getBlock() != &body) {
    // Read inside a region: the enclosing op needs it whole, or in the
    // layout it reads its captured tensor in.
    Operation *top = body.findAncestorOpInBlock(*owner);
    if (!top)
      return nullptr;
    if (LayoutAttr captured = state.getCapturedLayout(top))
      return captured;
    return state.getReplicated();
  }
  if (OpLayouts *s = state.find(owner))
    return s->operandAttrs[tensorOperandIndex(use)];
  if (auto annotate = dyn_cast<AnnotateOp>(owner))
    return annotate.getLayout();
  return requiredLayout(use);
}

void FunctionCost::indexUses() {
  uses.build(fn.getBody().front(), movable.position,
             [&](OpOperand &use) { return fixedRequirement(use); });
}

void FunctionCost::moveNeeds(Operation *op, const OpLayouts &from,
                             const OpLayouts &to) {
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    if (!isa<RankedTensorType>(use.get().getType()))
      continue;
    LayoutAttr was = from.operandAttrs[tensorIndex];
    LayoutAttr is = to.operandAttrs[tensorIndex];
    ++tensorIndex;
    if (was == is)
      continue;
    uses.removeNeed(use, was);
    uses.addNeed(use, is);
  }
}

void FunctionCost::neededLayouts(
    Value v, LayoutAttr from, const Move *move, Operation *skip,
    bool withNested, SmallVectorImpl<std::pair<unsigned, LayoutAttr>> &out) {
  UseIndex::ValueUses &entry = uses.of(v);
  Operation *moved = move ? move->op : nullptr;
  for (const UseIndex::Need &need : entry.needs) {
    if (need.nested && !withNested)
      continue;
    // The first use that needs it, other than the uses by the moved op
    // (which need what the move says) and by `skip`.
    if (!moved && !skip) {
      out.emplace_back(need.ranks.front(), need.layout);
      continue;
    }
    for (unsigned rank : need.ranks) {
      Operation *owner = entry.uses[rank]->getOwner();
      if (owner == moved || owner == skip)
        continue;
      out.emplace_back(rank, need.layout);
      break;
    }
  }
  if (moved) {
    unsigned tensorIndex = 0;
    for (OpOperand &use : moved->getOpOperands()) {
      if (!isa<RankedTensorType>(use.get().getType()))
        continue;
      if (use.get() == v)
        out.emplace_back(uses.rankOf(use),
                         move->layouts->operandAttrs[tensorIndex]);
      ++tensorIndex;
    }
  }
  for (unsigned rank : entry.returns)
    out.emplace_back(
        rank, resultLayout(fn, entry.uses[rank]->getOperandNumber(), from));
  llvm::sort(out,
             [](const auto &a, const auto &b) { return a.first < b.first; });
}

double FunctionCost::valueCost(Value v, const Move *move) {
  // Asked once per value (indexUses): the rule interface is not free to
  // query, and this is the refinement's innermost cost.
  UseIndex::ValueUses &entry = uses.of(v);
  if (entry.shapeOnly)
    return 0;
  // The cost as the layouts stand is kept until a change touches the
  // value (`forgetCosts`): the same number, asked again and again by the
  // local search for the values around each op it looks at.
  if (!move && entry.costKnown)
    return entry.cost;
  LayoutAttr from = attrWith(v, move);
  SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
  neededLayouts(v, from, move, /*skip=*/nullptr, /*withNested=*/true, needed);
  SmallVector<LayoutAttr, 8> layouts;
  for (auto [rank, to] : needed)
    layouts.push_back(to);
  double cost = costs.reshardsCost(v.getType(), from, layouts);
  if (!move) {
    entry.cost = cost;
    entry.costKnown = true;
  }
  return cost;
}

void FunctionCost::forgetCosts(Operation *op) {
  // A change of `op` moves its results' layouts and its operands' needs.
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()))
      uses.of(v).costKnown = false;
  for (Value r : op->getResults())
    if (isa<RankedTensorType>(r.getType()))
      uses.of(r).costKnown = false;
}

double FunctionCost::totalCost() {
  double cost = 0;
  Block &body = fn.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (isa<RankedTensorType>(arg.getType()))
      cost += valueCost(arg, nullptr);
  for (Operation &op : body)
    for (Value r : op.getResults())
      if (isa<RankedTensorType>(r.getType()))
        cost += valueCost(r, nullptr);
  return cost;
}

SmallVector<Value> FunctionCost::affectedBy(Operation *op) {
  SmallVector<Value> affected;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()) && !llvm::is_contained(affected, v))
      affected.push_back(v);
  for (Value r : op->getResults())
    if (isa<RankedTensorType>(r.getType()))
      affected.push_back(r);
  return affected;
}

void FunctionCost::change(Operation *op, OpLayouts s, Trial &trial) {
  for (Value v : affectedBy(op))
    if (trial.before.try_emplace(v, 0).second) {
      trial.before[v] = valueCost(v, nullptr);
      trial.touched.push_back(v);
    }
  OpLayouts &current = state.get(op);
  trial.workDelta += work(op, s) - work(op, current);
  forgetCosts(op);
  moveNeeds(op, current, s);
  trial.undo.emplace_back(op, std::move(current));
  current = std::move(s);
}

double FunctionCost::costDelta(Trial &trial) {
  double delta = 0;
  for (Value v : trial.touched)
    delta += valueCost(v, nullptr) - trial.before[v];
  return delta;
}

void FunctionCost::revert(Trial &trial) {
  for (auto &[op, s] : llvm::reverse(trial.undo)) {
    OpLayouts &current = state.get(op);
    forgetCosts(op);
    moveNeeds(op, current, s);
    current = std::move(s);
  }
  trial.undo.clear();
}
