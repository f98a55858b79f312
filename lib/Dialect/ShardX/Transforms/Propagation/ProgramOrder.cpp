//===- ProgramOrder.cpp - Layouts chosen op by op, in program order -------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ProgramOrder.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "LayoutUtils.h"

#include "shardx/Rules/EmbeddingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "shardx-propagate"

using namespace mlir;
using namespace mlir::shardx;

static bool isUserLayout(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return getRecordedLayout(v) != nullptr;
  return v.getDefiningOp<AnnotateOp>() != nullptr;
}

double ProgramOrderSearch::reshardCost(Value v, const Layout &to) {
  Layout from = space.layoutOf(v);
  if (from == to || isRematerializable(v))
    return 0;
  if (auto it = available.find(v);
      it != available.end() && llvm::any_of(it->second, [&](LayoutAttr a) {
        return a.getLayout() == to;
      }))
    return 0;
  return costs.planCost(v.getType(), from, to);
}

/// Checks the reassociation of a reshape: upstream's verifier reads its
/// indices as 32-bit integers (an index of 2^32 passes as 0, found by
/// fuzzing), and every later pass would index dims out of bounds.
static LogicalResult verifyReassociation(Operation *op) {
  auto check = [&](auto reshape, RankedTensorType expanded) -> LogicalResult {
    for (ReassociationIndices group : reshape.getReassociationIndices())
      for (int64_t d : group)
        if (d < 0 || d >= expanded.getRank())
          return op->emitOpError("reassociation index ")
                 << d << " is out of range for a tensor of rank "
                 << expanded.getRank();
    return success();
  };
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return check(expand, expand.getResultType());
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return check(collapse, collapse.getSrcType());
  return success();
}

/// The program-order choice for `op`: each operand's layout as leader
/// (largest first) merged with the others', and the replicated strategy,
/// priced by the reshards they need; the results' hints merged with the
/// operands win ties (they save reshards further on). Invalid when none is.
OpLayouts ProgramOrderSearch::chooseUncached(Operation *op,
                                             const ShardingRule &rule,
                                             ArrayRef<Value> operands,
                                             ArrayRef<Value> results) {
  SmallVector<unsigned> order(operands.size());
  for (unsigned i = 0; i < order.size(); ++i)
    order[i] = i;
  auto bytes = [&](unsigned i) {
    auto t = cast<RankedTensorType>(operands[i].getType());
    return t.hasStaticShape() ? t.getNumElements() : 0;
  };
  llvm::stable_sort(
      order, [&](unsigned a, unsigned b) { return bytes(a) > bytes(b); });
  SmallVector<Assignment> views;
  for (auto [i, v] : llvm::enumerate(operands))
    views.push_back(viewThroughRule(rule, rule.operands[i], space.layoutOf(v),
                                    space.getMeshShape()));
  OpLayouts best = evaluatePriced(op, rule, operands, results,
                                  Assignment(rule.factorSizes.size()));
  // The consumers' preference: the results' hints, merged with the
  // operands; it wins ties (it saves reshards further on).
  OpLayouts hinted;
  {
    Assignment a(rule.factorSizes.size());
    bool any = false;
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it == hints.end())
        continue;
      mergeInto(a,
                viewThroughRule(rule, rule.results[i], it->second.getLayout(),
                                space.getMeshShape()));
      any = true;
    }
    if (any) {
      for (unsigned other : order)
        mergeInto(a, views[other]);
      hinted = evaluatePriced(op, rule, operands, results, a);
    }
  }
  for (unsigned leader : order) {
    Assignment a = views[leader];
    for (unsigned other : order)
      if (other != leader)
        mergeInto(a, views[other]);
    OpLayouts s = evaluatePriced(op, rule, operands, results, a);
    if (!s.valid)
      continue;
    constexpr double eps = 1e-12;
    if (!best.valid || s.cost < best.cost - eps ||
        (s.cost <= best.cost + eps && s.shardedWork > best.shardedWork))
      best = std::move(s);
  }
  if (hinted.valid && (!best.valid || hinted.cost <= best.cost + 1e-12))
    best = std::move(hinted);
  return best;
}

LogicalResult ProgramOrderSearch::visit(Operation *op) {
  if (isa<AnnotateOp, RedistributeOp, func::ReturnOp>(op))
    return success();
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  if (operands.empty() && results.empty())
    return success();
  for (Value v : op->getOperands())
    if (isa<TensorType>(v.getType()) && !isa<RankedTensorType>(v.getType()))
      return op->emitError("unranked tensors cannot be sharded");
  if (failed(verifyReassociation(op)))
    return failure();
  // A kept rule is read where the cache keeps it (no copy per search).
  std::optional<ShardingRule> taken;
  const ShardingRule *rule = nullptr;
  if (rules.keepsRules()) {
    rule = rules.kept(op);
  } else if (FailureOr<ShardingRule> r = rules.take(op); succeeded(r)) {
    taken = std::move(*r);
    rule = &*taken;
  }
  // Ops whose regions read tensors from above run replicated: the captured
  // tensors are whole on every rank.
  bool capturesTensors = !capturedTensorUses(op).empty();
  if (!rule || rule->operands.size() != operands.size() ||
      rule->results.size() != results.size()) {
    if (!isa<tensor::EmptyOp, arith::ConstantOp>(op) &&
        warned.insert(op->getName().getStringRef()).second)
      op->emitWarning() << "no sharding rule for '" << op->getName()
                        << "': it runs replicated";
    state.set(op, space.replicated(op));
    return success();
  }
  // An op that reads a captured tensor through a rule of its own
  // (shardx/Rules/EmbeddingRule.h) reads it in the layout it has.
  if (!userLayoutsOnly) {
    auto layoutOf = [&](Value v) -> const Layout & {
      return space.layoutOf(v);
    };
    if (std::optional<CapturingOpShardings> chosen = shardCapturingOp(
            op, layoutOf, space.getMeshRank(), partialTables)) {
      OpLayouts s;
      s.operandLayouts.assign(chosen->operands.begin(), chosen->operands.end());
      s.resultLayouts.assign(chosen->results.begin(), chosen->results.end());
      s.valid = true;
      LLVM_DEBUG(llvm::dbgs()
                 << "captured read " << op->getName() << ": " << describe(s)
                 << ", captured " << chosen->captured.str() << "\n");
      state.set(op, std::move(s));
      state.setCapturedLayout(op, state.attr(chosen->captured));
      return success();
    }
  }
  if (capturesTensors || userLayoutsOnly) {
    state.set(op, space.replicated(op));
    // Captured tensors must be replicated too: they are operands in effect.
    return success();
  }
  space.setRuleId(op, rules.idOf(op, *rule));
  OpLayouts best = choose(op, *rule, operands, results);
  if (taken)
    movable.add(op, std::move(*taken));
  else
    movable.add(op, rule);
  if (!best.valid)
    best = space.replicated(op);
  if (!best.hasAttrs())
    state.attach(best);
  for (auto [v, l] : llvm::zip(operands, best.operandAttrs))
    if (l != state.layoutOf(v) && !llvm::is_contained(available[v], l))
      available[v].push_back(l);
  LLVM_DEBUG(llvm::dbgs() << "program order: " << op->getName() << " at "
                          << op->getLoc() << ": " << describe(best)
                          << ", reshards " << best.cost << " us\n");
  state.set(op, std::move(best));
  return success();
}

OpLayouts ProgramOrderSearch::choose(Operation *op, const ShardingRule &rule,
                                     ArrayRef<Value> operands,
                                     ArrayRef<Value> results) {
  // The choice also depends on what the reshards of the operands cost
  // (shape-only operands and layouts already needed are free) and on the
  // results' hints.
  SmallVector<LayoutAttr, 4> operandAttrs;
  for (Value v : operands)
    operandAttrs.push_back(state.layoutOf(v));
  SmallVector<uintptr_t, 32> key;
  if (!space.contextKey(op, rule, operandAttrs, key))
    return chooseUncached(op, rule, operands, results);
  for (Value v : operands) {
    key.push_back(isRematerializable(v));
    auto it = available.find(v);
    appendAttrs(key, it == available.end() ? ArrayRef<LayoutAttr>()
                                           : ArrayRef<LayoutAttr>(it->second));
  }
  for (Value r : results)
    key.push_back(
        reinterpret_cast<uintptr_t>(hints.lookup(r).getAsOpaquePointer()));
  lookup.assign(key.begin(), key.end());
  auto it = cache.find(lookup);
  if (it == cache.end()) {
    OpLayouts best = chooseUncached(op, rule, operands, results);
    if (best.valid) {
      state.attach(best);
      best.dropLayouts();
    }
    it = cache.emplace(lookup, std::move(best)).first;
  }
  return it->second;
}

void ProgramOrderSearch::computeHints() {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (OpOperand &o : ret->getOpOperands())
    if (auto declared = fn.getResultAttrOfType<LayoutAttr>(
            o.getOperandNumber(), ShardXDialect::getLayoutAttrName()))
      hints.try_emplace(o.get(), declared);
  for (Operation &op : llvm::reverse(body)) {
    if (!isa<ShardingRuleOpInterface>(&op))
      continue;
    const std::optional<ShardingRule> &rule = rules.prefetch(&op);
    SmallVector<Value> operands = tensorValues(op.getOperands());
    SmallVector<Value> results = tensorValues(op.getResults());
    if (!rule || rule->operands.size() != operands.size() ||
        rule->results.size() != results.size())
      continue;
    Assignment a(rule->factorSizes.size());
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->results[i],
                                     it->second.getLayout(),
                                     space.getMeshShape()));
    }
    for (auto [i, v] : llvm::enumerate(operands)) {
      if (isUserLayout(v))
        mergeInto(a, viewThroughRule(*rule, rule->operands[i],
                                     space.layoutOf(v), space.getMeshShape()));
      else if (auto it = hints.find(v); it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->operands[i],
                                     it->second.getLayout(),
                                     space.getMeshShape()));
    }
    for (auto [f, kind] : llvm::enumerate(rule->factorKinds))
      if (kind != ShardingRule::FactorKind::Parallel)
        a[f].reset();
    for (auto [i, v] : llvm::enumerate(operands)) {
      if (isUserLayout(v) || hints.count(v))
        continue;
      if (std::optional<Layout> l =
              project(*rule, rule->operands[i], a, space.getMeshShape(),
                      space.getMeshRank())) {
        auto type = cast<RankedTensorType>(v.getType());
        if (l->verifyForShape(space.getMeshShape(),
                              std::vector<int64_t>(type.getShape().begin(),
                                                   type.getShape().end()))
                .empty())
          hints.try_emplace(v, state.attr(*l));
      }
    }
  }
}

OpLayouts ProgramOrderSearch::evaluatePriced(Operation *op,
                                             const ShardingRule &rule,
                                             ArrayRef<Value> operands,
                                             ArrayRef<Value> results,
                                             Assignment assignment) {
  OpLayouts s = space.evaluate(op, rule, results, std::move(assignment));
  if (s.valid) {
    for (auto [v, l] : llvm::zip(operands, s.operandLayouts))
      s.cost += reshardCost(v, l);
    s.cost += costs.haloUs(s.halos);
  }
  return s;
}

LogicalResult ProgramOrderSearch::run() {
  if (!userLayoutsOnly)
    computeHints();
  for (Operation &op : fn.getBody().front())
    if (failed(visit(&op)))
      return failure();
  return success();
}
