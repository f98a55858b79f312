//===- Search.cpp - The A* search over layouts ------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A layout's per-rank bytes, its expansion into steps, the A* lower bound
// and the search loop.
//
//===----------------------------------------------------------------------===//

#include "Search.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

namespace shardx {
namespace planner {

const std::vector<double> &Search::rankBytes(const Layout &l) {
  Key key = layoutKey(l);
  auto it = bytesCache.find(key);
  if (it != bytesCache.end())
    return it->second;
  // Fast path: every sharded dim divides into its blocks.
  bool even = true;
  double local = static_cast<double>(elementBytes);
  for (int64_t s : shape)
    local *= static_cast<double>(s);
  for (const DimSharding &ds : l.getDims()) {
    if (!ds.sizes.empty() || !dimDivides(l, ds.dim)) {
      even = false;
      break;
    }
    for (const Split &s : ds.splits)
      local /= static_cast<double>(meshShape[s.axis]);
  }
  std::vector<double> bytes;
  if (even) {
    bytes.push_back(local);
  } else {
    charge(static_cast<int64_t>(coords.size()) * shardWork(l));
    bytes.reserve(coords.size());
    for (const auto &c : coords) {
      double n = static_cast<double>(elementBytes);
      for (int64_t s : l.getLocalShard(meshShape, shape, c).shape)
        n *= static_cast<double>(s);
      bytes.push_back(n);
    }
    if (std::all_of(bytes.begin(), bytes.end(),
                    [&](double b) { return b == bytes[0]; }))
      bytes.resize(1);
  }
  return bytesCache.emplace(std::move(key), std::move(bytes)).first->second;
}

bool Search::reducible(const Layout &l, int64_t axis) const {
  // Partial axes nest in mesh order (axis 0 outermost): an axis can be
  // reduced once every inner partial axis commutes with it.
  const auto &partials = l.getPartials();
  if (!partials[axis])
    return false;
  for (size_t j = axis + 1; j < partials.size(); ++j)
    if (partials[j] && !commute(*partials[axis], *partials[j]))
      return false;
  return true;
}

void Search::push(std::vector<Edge> &out, Step step, Layout after,
                  double bytes) {
  charge(kLayoutWork);
  step.bytesPerRank = bytes;
  // Local steps cost nothing; among equal costs the search prefers fewer
  // steps.
  step.cost = step.isCollective() ? stepCost(step.axes, bytes) : 0.0;
  out.push_back({std::move(step), std::move(after)});
}

void Search::expand(const Layout &l, std::vector<Edge> &out) {
  if (exhausted())
    return;
  double inBytes = maxBytes(l);
  bool inEven = isEven(l);
  if (addReductions(l, inBytes, out))
    return;
  addRescales(l, out);
  std::vector<int64_t> replicated;
  for (int64_t a = 0; a < l.getMeshRank(); ++a)
    if (!l.getPartials()[a] && l.getShardedDim(a) < 0)
      replicated.push_back(a);
  if (addChunks(l, replicated, out))
    return;
  addPartitionValues(l, replicated, out);
  addGathers(l, inBytes, inEven, out);
  if (addRelabelings(l, inBytes, out))
    return;
  addPermute(l, out);
}


/// The number of indices two sorted run lists share.
static int64_t overlap(const std::vector<Interval> &a,
                       const std::vector<Interval> &b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].offset, b[j].offset);
    int64_t hi = std::min(a[i].offset + a[i].size, b[j].offset + b[j].size);
    total += std::max<int64_t>(0, hi - lo);
    if (a[i].offset + a[i].size < b[j].offset + b[j].size)
      ++i;
    else
      ++j;
  }
  return total;
}

double Search::maxLackBytes(const Layout &from, const Layout &to) {
  charge(static_cast<int64_t>(coords.size()) *
         (shardWork(from) + shardWork(to)));
  double lack = 0;
  for (const auto &c : coords) {
    LocalShard have = from.getLocalShard(meshShape, shape, c);
    LocalShard want = to.getLocalShard(meshShape, shape, c);
    double wanted = 1, common = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      wanted *= static_cast<double>(want.shape[d]);
      common *= static_cast<double>(overlap(have.runs[d], want.runs[d]));
    }
    lack = std::max(lack, wanted - common);
  }
  return lack * static_cast<double>(elementBytes);
}

double Search::remainingCostBound(const Layout &l) {
  if (l == dst)
    return 0;
  // Only local steps remain when no pending reduction must happen and every
  // split of `l` is one the target keeps: then nothing is known to be owed.
  const auto &partials = l.getPartials();
  bool needsCollective = false;
  for (size_t a = 0; a < partials.size(); ++a) {
    const auto &want = dst.getPartials()[a];
    // The same op stays; sum <-> avg is a local rescale.
    if (partials[a] && !(want && commute(*want, *partials[a])))
      needsCollective = true;
  }
  for (const DimSharding &ds : l.getDims())
    for (const Split &s : ds.splits)
      if (dst.getShardedDim(s.axis) != ds.dim)
        needsCollective = true;
  if (l.hasPartial())
    return needsCollective ? minLatency : 0;
  // Bytes each rank lacks of its target shard.
  charge(static_cast<int64_t>(coords.size()) * shardWork(l));
  if (dstShards.empty()) {
    charge(static_cast<int64_t>(coords.size()) * shardWork(dst));
    for (const auto &c : coords)
      dstShards.push_back(dst.getLocalShard(meshShape, shape, c));
  }
  double lack = 0;
  std::vector<Interval> runs;
  for (size_t r = 0; r < coords.size(); ++r) {
    double want = 1, common = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      runs.clear();
      l.appendLocalRuns(meshShape, static_cast<int64_t>(d), shape[d], coords[r],
                        runs);
      want *= static_cast<double>(dstShards[r].shape[d]);
      common *= static_cast<double>(overlap(runs, dstShards[r].runs[d]));
    }
    lack = std::max(lack, want - common);
  }
  if (lack > 0)
    needsCollective = true;
  return (needsCollective ? minLatency : 0) +
         lack * static_cast<double>(elementBytes) / (maxBandwidth * 1e3);
}

std::optional<Plan> Search::run(const Layout &src, std::string &reason) {
  preparePermuteTargets(src);
  constexpr size_t kMaxStates = 100000;
  // A* on (cost + bound, number of steps), lexicographically; `best` holds
  // the cost so far. A node improved after expansion is expanded again, so
  // the plan is optimal even where the bound is not consistent.
  using Priority = std::pair<double, int64_t>;
  std::vector<Node> nodes;
  std::vector<Priority> best;
  std::vector<double> bound;
  std::unordered_map<Key, int64_t, KeyHash> index;
  using Entry = std::pair<Priority, int64_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  nodes.push_back({src, -1, Step(), {}});
  best.push_back({0.0, 0});
  bound.push_back(remainingCostBound(src));
  index.emplace(layoutKey(src), 0);
  queue.push({{bound[0], 0}, 0});
  std::vector<Edge> edges;
  while (!queue.empty()) {
    auto [priority, id] = queue.top();
    queue.pop();
    if (priority != Priority{best[id].first + bound[id], best[id].second})
      continue; // stale
    if (nodes[id].layout == dst) {
      Plan plan;
      for (int64_t n = id; nodes[n].parent >= 0; n = nodes[n].parent) {
        for (auto it = nodes[n].fused.rbegin(); it != nodes[n].fused.rend();
             ++it)
          plan.steps.push_back(*it);
        Step step = nodes[n].via;
        step.before = nodes[nodes[n].parent].layout;
        if (nodes[n].fused.empty())
          step.after = nodes[n].layout;
        plan.steps.push_back(std::move(step));
      }
      std::reverse(plan.steps.begin(), plan.steps.end());
      for (const Step &s : plan.steps) {
        plan.cost += s.cost;
        plan.bytesPerRank += s.bytesPerRank;
      }
      return plan;
    }
    if (nodes.size() > kMaxStates || exhausted())
      break;
    edges.clear();
    Layout current = nodes[id].layout;
    Priority here = best[id];
    expand(current, edges);
    for (Edge &edge : edges) {
      double edgeCost = edge.step.cost;
      for (const Step &f : edge.fused)
        edgeCost += f.cost;
      Priority next = {here.first + edgeCost,
                       here.second + 1 +
                           static_cast<int64_t>(edge.fused.size())};
      Key key = layoutKey(edge.after);
      auto [it, inserted] =
          index.emplace(std::move(key), static_cast<int64_t>(nodes.size()));
      int64_t target = it->second;
      if (inserted) {
        bound.push_back(remainingCostBound(edge.after));
        nodes.push_back({std::move(edge.after), id, std::move(edge.step),
                         std::move(edge.fused)});
        best.push_back(next);
      } else if (next < best[target]) {
        best[target] = next;
        nodes[target].parent = id;
        nodes[target].via = std::move(edge.step);
        nodes[target].fused = std::move(edge.fused);
      } else {
        continue;
      }
      queue.push({{next.first + bound[target], next.second}, target});
    }
  }
  if (nodes.size() > kMaxStates || exhausted())
    reason = "the search exceeded its limits (" + std::to_string(kMaxStates) +
             " layouts, " + std::to_string(kMaxSearchWork) +
             " units of work) after " + std::to_string(nodes.size()) +
             " layouts";
  else
    reason = "no sequence of collectives reaches it";
  return std::nullopt;
}

} // namespace planner
} // namespace shardx
