//===- LocalSearch.cpp - Whole-graph refinement of chosen layouts ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "LocalSearch.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "LayoutUtils.h"

#include "llvm/Support/Debug.h"

#include <set>
#include <tuple>

#define DEBUG_TYPE "shardx-propagate"

using namespace mlir;
using namespace mlir::shardx;

bool LocalSearch::candidateKey(Operation *op, ArrayRef<LayoutAttr> operandAttrs,
                               ArrayRef<SmallVector<LayoutAttr, 4>> needs,
                               SmallVectorImpl<uintptr_t> &key) {
  if (!space.contextKey(op, movable.ruleOf(op), operandAttrs, key))
    return false;
  const OpLayouts &current = state.get(op);
  appendAttrs(key, current.operandAttrs);
  appendAttrs(key, current.resultAttrs);
  for (ArrayRef<LayoutAttr> n : needs)
    appendAttrs(key, n);
  return true;
}

const SmallVector<OpLayouts, 4> &LocalSearch::candidates(Operation *op) {
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  SmallVector<LayoutAttr, 4> operandAttrs;
  for (Value v : operands)
    operandAttrs.push_back(state.layoutOf(v));
  // Per tensor operand, then result: the distinct layouts other consumers
  // need it in, other than the one it has.
  SmallVector<SmallVector<LayoutAttr, 4>, 4> needs;
  auto addNeeds = [&](Value v) {
    SmallVector<LayoutAttr, 4> &seen = needs.emplace_back();
    LayoutAttr from = state.layoutOf(v);
    SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
    fnCost.neededLayouts(v, from, /*move=*/nullptr, /*skip=*/op,
                         /*withNested=*/false, needed);
    for (auto [rank, need] : needed)
      if (need && need != from && !llvm::is_contained(seen, need))
        seen.push_back(need);
  };
  for (Value v : operands)
    addNeeds(v);
  for (Value r : results)
    addNeeds(r);
  SmallVector<uintptr_t, 32> key;
  if (!candidateKey(op, operandAttrs, needs, key))
    return unkeyed.emplace_back(
        computeCandidates(op, operands, results, operandAttrs, needs));
  lookup.assign(key.begin(), key.end());
  auto it = candidateCache.find(lookup);
  if (it == candidateCache.end()) {
    SmallVector<OpLayouts, 4> computed =
        computeCandidates(op, operands, results, operandAttrs, needs);
    it = candidateCache.emplace(lookup, std::move(computed)).first;
  }
  // The map's values stay where they are when it grows.
  return it->second;
}

SmallVector<OpLayouts, 4>
LocalSearch::computeCandidates(Operation *op, ArrayRef<Value> operands,
                               ArrayRef<Value> results,
                               ArrayRef<LayoutAttr> operandAttrs,
                               ArrayRef<SmallVector<LayoutAttr, 4>> needs) {
  const ShardingRule &rule = movable.ruleOf(op);
  const OpLayouts &current = state.get(op);
  SmallVector<Assignment> views;
  bool anyPartial = false;
  for (auto [i, a] : llvm::enumerate(operandAttrs)) {
    const Layout &l = a.getLayout();
    anyPartial |= l.hasPartial();
    views.push_back(
        viewThroughRule(rule, rule.operands[i], l, space.getMeshShape()));
  }
  SmallVector<Assignment> seeds;
  auto addSeed = [&](Assignment a) {
    if (!llvm::is_contained(seeds, a))
      seeds.push_back(std::move(a));
  };
  addSeed(Assignment(rule.factorSizes.size()));
  for (const Assignment &view : views)
    addSeed(view);
  for (auto [i, n] : llvm::enumerate(needs)) {
    ArrayRef<SmallVector<int64_t>> dims =
        i < operands.size() ? rule.operands[i]
                            : rule.results[i - operands.size()];
    for (LayoutAttr need : n)
      addSeed(
          viewThroughRule(rule, dims, need.getLayout(), space.getMeshShape()));
  }
  // Each seed alone and merged with the operands' layouts, whole or (a
  // factor split over axes the seed partly uses) by its major splits.
  SmallVector<Assignment> assignments;
  for (const Assignment &seed : seeds) {
    Assignment merged = seed, major = seed;
    for (const Assignment &view : views) {
      mergeInto(merged, view);
      mergeMajorSplitsInto(major, view);
    }
    for (Assignment *a : {const_cast<Assignment *>(&seed), &merged, &major})
      if (!llvm::is_contained(assignments, *a))
        assignments.push_back(*a);
  }
  SmallVector<OpLayouts, 4> out;
  for (const Assignment &a : assignments)
    for (bool keep : {true, false}) {
      if (!keep && !anyPartial)
        break;
      OpLayouts s = space.evaluate(op, rule, results, a, keep);
      if (!s.valid)
        continue;
      state.attach(s);
      s.dropLayouts();
      if (!s.sameLayouts(current) &&
          llvm::none_of(out,
                        [&](const OpLayouts &o) { return o.sameLayouts(s); }))
        out.push_back(std::move(s));
    }
  return out;
}

namespace {

/// The ops a cascade visits next, in program order, each once while it
/// waits. The users of a value are added as one sorted run that is read
/// lazily, so adding them does not depend on how many there are.
class CascadeQueue {
public:
  explicit CascadeQueue(ArrayRef<Operation *> movable) : movable(movable) {}

  bool empty() const { return heads.empty(); }

  /// Adds the ops at `positions` (sorted) but the one at `skip`.
  void addRun(ArrayRef<unsigned> positions, unsigned skip) {
    runs.push_back(Run{positions, 0, skip});
    advance(runs.size() - 1);
  }

  /// Removes and returns the first op.
  Operation *pop() {
    unsigned first = heads.begin()->first;
    // Every run waiting at this op moves on: the op leaves the queue.
    while (!heads.empty() && heads.begin()->first == first) {
      unsigned run = heads.begin()->second;
      heads.erase(heads.begin());
      ++runs[run].next;
      advance(run);
    }
    return movable[first];
  }

private:
  struct Run {
    ArrayRef<unsigned> positions;
    size_t next;
    unsigned skip;
  };
  void advance(unsigned run) {
    Run &r = runs[run];
    if (r.next < r.positions.size() && r.positions[r.next] == r.skip)
      ++r.next;
    if (r.next < r.positions.size())
      heads.insert({r.positions[r.next], run});
  }

  ArrayRef<Operation *> movable;
  SmallVector<Run> runs;
  /// Per run its next position.
  std::set<std::pair<unsigned, unsigned>> heads;
};

} // namespace

bool LocalSearch::tryCascade(Operation *op, const OpLayouts &s,
                             FunctionCost::Trial &trial) {
  CascadeQueue queue(movable.ops);
  auto enqueueNeighbours = [&](Operation *changed, const OpLayouts &old) {
    auto enqueueUsers = [&](Value v) {
      ArrayRef<unsigned> users = fnCost.movableUsers(v);
      if (users.size() > kFanOutLimit + 1)
        return;
      queue.addRun(users, movable.position.find(changed)->second);
    };
    const OpLayouts &now = state.get(changed);
    for (auto [r, was, is] : llvm::zip(tensorValues(changed->getResults()),
                                       old.resultAttrs, now.resultAttrs))
      if (was != is)
        enqueueUsers(r);
    for (auto [v, was, is] : llvm::zip(tensorValues(changed->getOperands()),
                                       old.operandAttrs, now.operandAttrs))
      if (was != is)
        enqueueUsers(v);
  };
  OpLayouts old = state.get(op);
  fnCost.change(op, s, trial);
  enqueueNeighbours(op, old);
  unsigned visited = 0;
  while (!queue.empty() && visited++ < kCascadeLimit) {
    Operation *user = queue.pop();
    SmallVector<Value> operands = tensorValues(user->getOperands());
    SmallVector<Value> affected = FunctionCost::affectedBy(user);
    // Locally cheapest; ties to fewer pending Partial results (they need
    // reductions further on), then to taking the operands as they are,
    // then to less work.
    auto key = [&](const OpLayouts &c, const Move *move) {
      double cost = 0;
      for (Value v : affected)
        cost += fnCost.valueCost(v, move);
      cost += fnCost.computeUs(user, c);
      int64_t partials = 0, mismatches = 0;
      for (LayoutAttr l : c.resultAttrs)
        partials += l.getLayout().hasPartial();
      for (auto [v, l] : llvm::zip(operands, c.operandAttrs))
        mismatches += state.layoutOf(v) != l;
      return std::make_tuple(cost, partials, mismatches, fnCost.work(user, c));
    };
    const OpLayouts &current = state.get(user);
    auto bestKey = key(current, nullptr);
    std::optional<OpLayouts> best;
    for (const OpLayouts &c : candidates(user)) {
      Move move{user, &c};
      auto k = key(c, &move);
      constexpr double eps = kTieUs;
      bool better =
          std::get<0>(k) < std::get<0>(bestKey) - eps ||
          (std::get<0>(k) <= std::get<0>(bestKey) + eps &&
           std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k)) <
               std::make_tuple(std::get<1>(bestKey), std::get<2>(bestKey),
                               std::get<3>(bestKey)));
      if (better) {
        bestKey = k;
        best = c;
      }
    }
    if (!best)
      continue;
    OpLayouts was = current;
    fnCost.change(user, std::move(*best), trial);
    enqueueNeighbours(user, was);
  }
  double delta =
      fnCost.costDelta(trial) + trial.workDelta * costs.getUsPerIteration();
  if (delta < -kTieUs || (delta <= kTieUs && trial.workDelta < -0.5)) {
    LLVM_DEBUG(llvm::dbgs() << "  cascade from " << op->getName() << " at "
                            << op->getLoc() << " kept: " << trial.undo.size()
                            << " op(s), " << delta << " us\n");
    return true;
  }
  fnCost.revert(trial);
  return false;
}

/// The position among `op`'s tensor operands of the one that carries data
/// (the others are rematerialized: inits from tensor.empty, fills, splats);
/// none when there are several or none.
static std::optional<unsigned> soleDataOperand(Operation *op) {
  std::optional<unsigned> found;
  for (auto [i, v] : llvm::enumerate(tensorValues(op->getOperands()))) {
    if (isRematerializable(v))
      continue;
    if (found)
      return std::nullopt;
    found = i;
  }
  return found;
}

bool LocalSearch::tryHoist(Operation *op, FunctionCost::Trial &trial) {
  SmallVector<Value> results = tensorValues(op->getResults());
  if (results.size() != 1 || !soleDataOperand(op))
    return false;
  LayoutAttr have = state.layoutOf(results[0]);
  SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
  fnCost.neededLayouts(results[0], have, /*move=*/nullptr, /*skip=*/nullptr,
                       /*withNested=*/false, needed);
  SmallVector<LayoutAttr, 4> wanted;
  for (auto [rank, need] : needed)
    if (need && need != have && !llvm::is_contained(wanted, need))
      wanted.push_back(need);
  for (LayoutAttr need : wanted) {
    // Each op of the chain takes the layout its consumer in the chain
    // needs of its result; the cheapest prefix is kept.
    SmallVector<std::pair<Operation *, OpLayouts>, 8> steps;
    std::optional<size_t> bestLength;
    double best = -kTieUs;
    FunctionCost::Trial attempt;
    Operation *cur = op;
    LayoutAttr want = need;
    while (cur && steps.size() < kHoistLimit && movable.position.count(cur)) {
      std::optional<unsigned> data = soleDataOperand(cur);
      if (!data || tensorValues(cur->getResults()).size() != 1)
        break;
      std::optional<OpLayouts> pick;
      for (const OpLayouts &c : candidates(cur))
        if (c.resultAttrs.front() == want) {
          pick = c;
          break;
        }
      if (!pick)
        break;
      steps.emplace_back(cur, *pick);
      fnCost.change(cur, std::move(*pick), attempt);
      double delta = fnCost.costDelta(attempt) +
                     attempt.workDelta * costs.getUsPerIteration();
      if (delta < best) {
        best = delta;
        bestLength = steps.size();
      }
      Value in = tensorValues(cur->getOperands())[*data];
      want = steps.back().second.operandAttrs[*data];
      if (state.layoutOf(in) == want)
        break;
      cur = in.getDefiningOp();
    }
    fnCost.revert(attempt);
    if (!bestLength)
      continue;
    for (auto &[changed, s] : ArrayRef(steps).take_front(*bestLength))
      fnCost.change(changed, s, trial);
    LLVM_DEBUG(llvm::dbgs() << "  reshard of " << op->getName() << " at "
                            << op->getLoc() << " moved up " << *bestLength
                            << " op(s): " << best << " us\n");
    return true;
  }
  return false;
}

void LocalSearch::markNeighbours(Operation *op) {
  for (Value v : op->getOperands()) {
    if (Operation *def = v.getDefiningOp(); def && movable.position.count(def))
      marks.mark(def);
    marks.stamp(v);
  }
  for (Value r : op->getResults())
    marks.stamp(r);
}

bool DirtyMarks::isDirty(Operation *op) const {
  if (dirty.contains(op))
    return true;
  auto it = cleared.find(op);
  uint64_t since = it == cleared.end() ? 0 : it->second;
  return llvm::any_of(op->getOperands(), [&](Value v) {
    auto s = stamped.find(v);
    return s != stamped.end() && s->second > since;
  });
}

bool DirtyMarks::clear(Operation *op) {
  if (!isDirty(op))
    return false;
  dirty.erase(op);
  cleared[op] = clock;
  return true;
}

bool LocalSearch::visit(Operation *op) {
  if (!marks.clear(op))
    return false;
  unkeyed.clear();
  SmallVector<Value> affected = FunctionCost::affectedBy(op);
  OpLayouts &current = state.get(op);
  double before = fnCost.computeUs(op, current);
  for (Value v : affected)
    before += fnCost.valueCost(v, nullptr);
  const SmallVector<OpLayouts, 4> &options = candidates(op);
  std::optional<unsigned> best;
  double bestCost = before, bestWork = fnCost.work(op, current);
  for (auto [i, s] : llvm::enumerate(options)) {
    Move move{op, &s};
    double after = fnCost.computeUs(op, s);
    for (Value v : affected)
      after += fnCost.valueCost(v, &move);
    double w = fnCost.work(op, s);
    constexpr double eps = kTieUs;
    if (after < bestCost - eps ||
        (after <= bestCost + eps && w < bestWork - 0.5)) {
      bestCost = after;
      bestWork = w;
      best = i;
    }
  }
  FunctionCost::Trial trial;
  if (best) {
    LLVM_DEBUG(llvm::dbgs()
               << "  change " << op->getName() << " at " << op->getLoc()
               << " to " << describe(options[*best]) << ": " << before << " -> "
               << bestCost << " us\n");
    fnCost.change(op, options[*best], trial);
  } else {
    // No single change helps: try the ones that move a layout together
    // with the neighbours they disturb.
    bool kept = false;
    for (const OpLayouts &s : options) {
      FunctionCost::Trial attempt;
      if (tryCascade(op, s, attempt)) {
        trial = std::move(attempt);
        kept = true;
        break;
      }
    }
    if (!kept) {
      FunctionCost::Trial attempt;
      if (!tryHoist(op, attempt))
        return false;
      trial = std::move(attempt);
    }
  }
  for (auto &[changed, old] : trial.undo)
    markNeighbours(changed);
  return true;
}

int64_t LocalSearch::refine(function_ref<bool()> between,
                            std::optional<ArrayRef<Value>> startAt) {
  int64_t changes = 0;
  if (startAt) {
    for (Value v : *startAt)
      marks.stamp(v);
  } else {
    for (Operation *op : movable.ops)
      marks.mark(op);
  }
  auto anyDirty = [&] {
    return llvm::any_of(movable.ops,
                        [&](Operation *op) { return marks.isDirty(op); });
  };
  for (int sweep = 0; sweep < 32 && anyDirty(); ++sweep) {
    int64_t changed = 0;
    if (sweep % 2 == 0) {
      for (Operation *op : llvm::reverse(movable.ops))
        changed += visit(op);
    } else {
      for (Operation *op : movable.ops)
        changed += visit(op);
    }
    LLVM_DEBUG(llvm::dbgs() << "sweep " << sweep
                            << (sweep % 2 == 0 ? " (backward)" : " (forward)")
                            << ": " << changed << " change(s)\n");
    changes += changed;
    if (between && between()) {
      fnCost.indexUses();
      for (Operation *op : movable.ops)
        marks.mark(op);
    }
  }
  return changes;
}

void LocalSearch::recordAlternativeCosts() {
  MLIRContext *ctx = fn.getContext();
  auto layouts = [&](ArrayRef<LayoutAttr> attrs) {
    return ArrayAttr::get(ctx,
                          SmallVector<Attribute>(attrs.begin(), attrs.end()));
  };
  for (Operation *op : movable.ops) {
    SmallVector<Value> affected = FunctionCost::affectedBy(op);
    const OpLayouts &current = state.get(op);
    double now = fnCost.computeUs(op, current);
    for (Value v : affected)
      now += fnCost.valueCost(v, nullptr);
    SmallVector<std::pair<double, Attribute>> priced;
    unkeyed.clear();
    for (const OpLayouts &s : candidates(op)) {
      Move move{op, &s};
      double after = fnCost.computeUs(op, s);
      for (Value v : affected)
        after += fnCost.valueCost(v, &move);
      NamedAttribute fields[] = {
          NamedAttribute(StringAttr::get(ctx, "cost"),
                         FloatAttr::get(Float64Type::get(ctx), after - now)),
          NamedAttribute(StringAttr::get(ctx, "operands"),
                         layouts(s.operandAttrs)),
          NamedAttribute(StringAttr::get(ctx, "results"),
                         layouts(s.resultAttrs))};
      priced.emplace_back(after - now, DictionaryAttr::get(ctx, fields));
    }
    llvm::stable_sort(
        priced, [](const auto &a, const auto &b) { return a.first < b.first; });
    if (priced.size() > kMaxAlternatives)
      priced.resize(kMaxAlternatives);
    SmallVector<Attribute> alternatives;
    for (auto &[cost, attr] : priced)
      alternatives.push_back(attr);
    op->setAttr("shardx.alternatives", ArrayAttr::get(ctx, alternatives));
  }
}
