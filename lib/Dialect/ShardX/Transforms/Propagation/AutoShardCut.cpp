//===- AutoShardCut.cpp - The step with its repeated layers cut out ------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A step of many identical layers is priced on a copy of it that keeps
// `cutDepth` of the layers: the whole step's time is the copy's plus its
// middle layer's share (the search sums it over `cutParts[0]`) for each
// layer cut out. Under a budget the peak is extrapolated linearly from the
// peaks of that copy and one that keeps `cutDepth + 1`. So a plan costs the
// same at any depth (docs/Memory.md, "Automatic sharding under a budget").
//
// The layers are found in the op order: the tied groups' arguments of two
// neighbouring layers are used by ops a fixed distance apart within each
// part of the step (forward, backward, update: the candidate periods), and
// a stretch of ops whose keys repeat with such a period for the layers'
// count is one op per layer for each position; the values of a stretch
// found give more candidates (their users elsewhere a period apart). Cutting a
// stretch removes `layers - depth` periods from its middle (after the first
// `depth - 1`) and points each use of a removed value at the same op that many
// periods earlier (the ops a period apart are the same op one layer apart), so
// the copy is the step of `depth` layers, with the removed layers' arguments
// left unused.
//
//===----------------------------------------------------------------------===//

#include "AutoShard.h"

#include "mlir/IR/Verifier.h"
#include "llvm/Support/ThreadPool.h"

#include <cmath>
#include <set>

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

/// The repeats the first cut keeps (the second keeps one more): a first
/// and a last layer around at least one middle one (cuts of 2 and 3 layers
/// misjudged sharded plans of a deep MLP's step by a third). A time costs
/// a search of the first (three layers), a peak the `shardx-spmd` runs of
/// both.
static constexpr unsigned kDepth = 3;

/// The positions in `body` of the top-level ops that use `v`, ascending.
static SmallVector<size_t> userPositions(Value v, Block &body,
                                         const DenseMap<Operation *, size_t> &at) {
  SmallVector<size_t> out;
  for (OpOperand &use : v.getUses())
    if (Operation *op = body.findAncestorOpInBlock(*use.getOwner()))
      out.push_back(at.lookup(op));
  llvm::sort(out);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void AutoSharder::buildCuts() {
  if (minCutLayers == 0 ||
      pricer.tiedLayers < std::max(minCutLayers, kDepth + 2))
    return;
  Block &body = pricer.fn.getBody().front();
  DenseMap<Operation *, size_t> at;
  for (Operation &op : body)
    at[&op] = at.size();
  size_t n = at.size();
  if (n != opKeys.size())
    return;
  // The distances between the uses of layers 1 and 2's arguments.
  std::set<size_t> periods;
  for (const Group &g : groups) {
    if (g.layers != pricer.tiedLayers)
      continue;
    for (unsigned j = 0; j < g.argsPerLayer; ++j) {
      SmallVector<size_t> a = userPositions(
          pricer.fn.getArgument(g.args[g.argsPerLayer + j]), body, at);
      SmallVector<size_t> b = userPositions(
          pricer.fn.getArgument(g.args[2 * g.argsPerLayer + j]), body, at);
      if (a.size() != b.size())
        continue;
      for (auto [x, y] : llvm::zip(a, b))
        if (x != y)
          periods.insert(x < y ? y - x : x - y);
    }
  }
  // The maximal stretches periodic for at least `tiedLayers - 1` periods
  // (the range cut out, periods `kDepth - 1` to `tiedLayers - 1`, must lie
  // in one), the longest kept first, none overlapping. The values of a
  // stretch found are candidates in turn: the ops outside it that use an op
  // of its second period and the same op of its third are the distance of
  // another part's period apart (a backward that reads the forward's
  // transposed weights, not the weights).
  std::set<size_t> tried;
  for (int round = 0; round < 4 && !periods.empty(); ++round) {
    SmallVector<Stretch> found;
    for (size_t p : periods) {
      if (!tried.insert(p).second)
        continue;
      for (size_t i = 0; i + p < n;) {
        if (opKeys[i] != opKeys[i + p]) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j + p < n && opKeys[j] == opKeys[j + p])
          ++j;
        if (j - i >= (pricer.tiedLayers - 2) * p)
          found.push_back({i, j + p, p});
        i = j + 1;
      }
    }
    periods.clear();
    llvm::stable_sort(found, [](const Stretch &a, const Stretch &b) {
      return a.end - a.start > b.end - b.start;
    });
    SmallVector<Operation *> ops(n);
    for (auto [op, i] : at)
      ops[i] = op;
    for (const Stretch &s : found) {
      if (llvm::any_of(stretches, [&](const Stretch &t) {
            return s.start < t.end && t.start < s.end;
          }))
        continue;
      stretches.push_back(s);
      auto outside = [&](Value v) {
        SmallVector<size_t> out = userPositions(v, body, at);
        llvm::erase_if(out, [&](size_t u) { return u >= s.start && u < s.end; });
        return out;
      };
      for (size_t i = s.start + s.period; i < s.start + 2 * s.period; ++i)
        for (auto [x, y] :
             llvm::zip(ops[i]->getResults(), ops[i + s.period]->getResults())) {
          SmallVector<size_t> a = outside(x), b = outside(y);
          if (a.size() != b.size())
            continue;
          for (auto [u, w] : llvm::zip(a, b))
            if (u != w)
              periods.insert(u < w ? w - u : u - w);
        }
    }
  }
  if (stretches.empty())
    return;
  // The check below prices the replicated plan on the whole step. With
  // threads that search runs on a second one while this one builds the
  // cuts (both only read the step; the plan is written on it first), with
  // a cost model and warnings of its own (the same numbers: its cost
  // model only remembers prices).
  Picks replicated(groups.size(), 0);
  // The second cut gives peaks only: without a budget it is not built.
  bool peaks = pricer.budget > 0;
  MLIRContext *context = pricer.fn.getContext();
  bool threaded = context->isMultithreadingEnabled() &&
                  context->getThreadPool().getMaxConcurrency() > 1;
  double whole = kInf;
  if (threaded) {
    pricer.apply(pricer.fn, replicated);
    CostModel wholeCosts = pricer.costs.withEmptyCache();
    llvm::StringSet<> wholeWarned;
    double wholeSeconds = 0;
    {
      llvm::ThreadPoolTaskGroup tasks(context->getThreadPool());
      tasks.async([&] {
        whole = pricer.searchOn(pricer.fn, pricer.rules, wholeCosts,
                                wholeWarned, wholeSeconds);
      });
      pricer.cuts[0] = cutTo(kDepth, pricer.cutParts[0]);
      if (peaks)
        pricer.cuts[1] = cutTo(kDepth + 1, pricer.cutParts[1]);
      tasks.wait();
    }
    pricer.searchSeconds += wholeSeconds;
    for (const auto &w : wholeWarned)
      pricer.warned.insert(w.getKey());
  } else {
    pricer.cuts[0] = cutTo(kDepth, pricer.cutParts[0]);
    if (peaks)
      pricer.cuts[1] = cutTo(kDepth + 1, pricer.cutParts[1]);
  }
  if (!pricer.cuts[0] || (peaks && !pricer.cuts[1])) {
    pricer.cuts[0] = nullptr;
    pricer.cuts[1] = nullptr;
    stretches.clear();
    return;
  }
  for (int i = 0; i < (peaks ? 2 : 1); ++i)
    pricer.cutFns[i] =
        pricer.cuts[i]->lookupSymbol<func::FuncOp>(pricer.fn.getSymName());
  pricer.cutDepth = kDepth;
  // A check of the cut: the replicated plan's time, extrapolated and on
  // the whole step (one search of the whole step), must agree to 1%;
  // else the step is priced whole.
  if (!threaded)
    whole = pricer.timeOn(pricer.fn, pricer.rules, replicated);
  double cut = pricer.cutTime(replicated);
  if (!std::isfinite(whole) || !std::isfinite(cut) ||
      std::abs(cut - whole) > 0.01 * whole) {
    pricer.cutDepth = 0;
    cutRejected = true;
  }
}

OwningOpRef<ModuleOp> AutoSharder::cutTo(unsigned depth, StepPart &middle) {
  OwningOpRef<ModuleOp> copy = pricer.prepared->clone();
  auto f = copy->lookupSymbol<func::FuncOp>(pricer.fn.getSymName());
  Block &body = f.getBody().front();
  SmallVector<Operation *> ops;
  DenseMap<Operation *, size_t> at;
  for (Operation &op : body) {
    at[&op] = ops.size();
    ops.push_back(&op);
  }
  size_t n = ops.size();
  // The stretch whose cut-out range holds each op, or -1.
  std::vector<int> cutOf(n, -1);
  for (auto [k, s] : llvm::enumerate(stretches))
    for (size_t i = s.start + (depth - 1) * s.period;
         i < s.start + (pricer.tiedLayers - 1) * s.period && i < n; ++i)
      cutOf[i] = k;
  // The op that stands for the removed op `i`: the same op as many
  // periods earlier as were cut out (in the last period kept before the
  // cut when that lies before the stretch).
  auto standIn = [&](size_t i) {
    const Stretch &s = stretches[cutOf[i]];
    size_t shift = (pricer.tiedLayers - depth) * s.period;
    if (i >= s.start + shift)
      return i - shift;
    return s.start + (depth - 2) * s.period + (i - s.start) % s.period;
  };
  // The last middle layer kept before the cut: repeat `depth - 2` of every
  // stretch (kept: the cut starts at repeat `depth - 1`).
  middle = StepPart();
  for (const Stretch &s : stretches)
    for (size_t i = s.start + (depth - 2) * s.period;
         i < s.start + (depth - 1) * s.period && i < n; ++i)
      middle.ops.insert(ops[i]);
  bool ok = true;
  for (size_t u = 0; u < n && ok; ++u) {
    if (cutOf[u] >= 0)
      continue;
    ops[u]->walk([&](Operation *inner) {
      for (OpOperand &operand : inner->getOpOperands()) {
        auto result = dyn_cast<OpResult>(operand.get());
        if (!result || result.getOwner()->getBlock() != &body)
          continue;
        size_t i = at.lookup(result.getOwner());
        if (cutOf[i] < 0)
          continue;
        Operation *other = ops[standIn(i)];
        unsigned r = result.getResultNumber();
        if (r >= other->getNumResults() ||
            other->getResult(r).getType() != result.getType()) {
          ok = false;
          return;
        }
        operand.set(other->getResult(r));
      }
    });
  }
  for (size_t i = n; i-- > 0 && ok;)
    if (cutOf[i] >= 0) {
      if (!ops[i]->use_empty()) {
        ok = false;
        break;
      }
      ops[i]->erase();
    }
  if (!ok || failed(verify(*copy)))
    return nullptr;
  // The arguments of that layer: used, and only by its ops.
  for (BlockArgument arg : f.getArguments()) {
    bool any = false, inside = true;
    for (Operation *user : arg.getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      any = true;
      inside &= top && middle.ops.contains(top);
    }
    if (any && inside)
      middle.args.insert(arg.getArgNumber());
  }
  return copy;
}
