//===- SearchCost.cpp - What a step moves, what is left to pay
//-------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A layout's per-rank bytes, what a rank lacks of another layout, and the A*
// lower bound of the cost left.
//
//===----------------------------------------------------------------------===//

#include "SearchCost.h"

#include <algorithm>

namespace shardx {
namespace planner {

const std::vector<double> &ShardBytes::rankBytes(const Layout &l) {
  Key key = layoutKey(l);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  // Fast path: every sharded dim divides into its blocks.
  bool even = true;
  double local = static_cast<double>(problem.elementBytes);
  for (int64_t s : problem.shape)
    local *= static_cast<double>(s);
  for (const DimSharding &ds : l.getDims()) {
    if (!ds.sizes.empty() || !problem.dimDivides(l, ds.dim)) {
      even = false;
      break;
    }
    for (const Split &s : ds.splits)
      local /= static_cast<double>(problem.meshShape[s.axis]);
  }
  std::vector<double> bytes;
  if (even) {
    bytes.push_back(local);
  } else {
    budget.charge(static_cast<int64_t>(problem.coords.size()) *
                  WorkBudget::shardWork(l));
    bytes.reserve(problem.coords.size());
    for (const auto &c : problem.coords) {
      double n = static_cast<double>(problem.elementBytes);
      for (int64_t s :
           l.getLocalShard(problem.meshShape, problem.shape, c).shape)
        n *= static_cast<double>(s);
      bytes.push_back(n);
    }
    if (std::all_of(bytes.begin(), bytes.end(),
                    [&](double b) { return b == bytes[0]; }))
      bytes.resize(1);
  }
  return cache.emplace(std::move(key), std::move(bytes)).first->second;
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

double ShardBytes::maxLackBytes(const Layout &from, const Layout &to) {
  budget.charge(static_cast<int64_t>(problem.coords.size()) *
                (WorkBudget::shardWork(from) + WorkBudget::shardWork(to)));
  double lack = 0;
  for (const auto &c : problem.coords) {
    LocalShard have = from.getLocalShard(problem.meshShape, problem.shape, c);
    LocalShard want = to.getLocalShard(problem.meshShape, problem.shape, c);
    double wanted = 1, common = 1;
    for (size_t d = 0; d < problem.shape.size(); ++d) {
      wanted *= static_cast<double>(want.shape[d]);
      common *= static_cast<double>(overlap(have.runs[d], want.runs[d]));
    }
    lack = std::max(lack, wanted - common);
  }
  return lack * static_cast<double>(problem.elementBytes);
}

CostBound::CostBound(const Problem &problem, WorkBudget &budget)
    : problem(problem), budget(budget) {
  for (size_t a = 0; a < problem.meshShape.size(); ++a) {
    AxisCost c = problem.mesh.getCost(a);
    minLatency = a == 0 ? c.latencyUs : std::min(minLatency, c.latencyUs);
    maxBandwidth = std::max(maxBandwidth, c.bandwidthGBps);
  }
}

double CostBound::remaining(const Layout &l) {
  if (l == problem.dst)
    return 0;
  // Only local steps remain when no pending reduction must happen and every
  // split of `l` is one the target keeps: then nothing is known to be owed.
  const auto &partials = l.getPartials();
  bool needsCollective = false;
  for (size_t a = 0; a < partials.size(); ++a) {
    const auto &want = problem.dst.getPartials()[a];
    // The same op stays; sum <-> avg is a local rescale.
    if (partials[a] && !(want && commute(*want, *partials[a])))
      needsCollective = true;
  }
  for (const DimSharding &ds : l.getDims())
    for (const Split &s : ds.splits)
      if (problem.dst.getShardedDim(s.axis) != ds.dim)
        needsCollective = true;
  if (l.hasPartial())
    return needsCollective ? minLatency : 0;
  // Bytes each rank lacks of its target shard.
  budget.charge(static_cast<int64_t>(problem.coords.size()) *
                WorkBudget::shardWork(l));
  if (dstShards.empty()) {
    budget.charge(static_cast<int64_t>(problem.coords.size()) *
                  WorkBudget::shardWork(problem.dst));
    for (const auto &c : problem.coords)
      dstShards.push_back(
          problem.dst.getLocalShard(problem.meshShape, problem.shape, c));
  }
  double lack = 0;
  std::vector<Interval> runs;
  for (size_t r = 0; r < problem.coords.size(); ++r) {
    double want = 1, common = 1;
    for (size_t d = 0; d < problem.shape.size(); ++d) {
      runs.clear();
      l.appendLocalRuns(problem.meshShape, static_cast<int64_t>(d),
                        problem.shape[d], problem.coords[r], runs);
      want *= static_cast<double>(dstShards[r].shape[d]);
      common *= static_cast<double>(overlap(runs, dstShards[r].runs[d]));
    }
    lack = std::max(lack, want - common);
  }
  if (lack > 0)
    needsCollective = true;
  return (needsCollective ? minLatency : 0) +
         lack * static_cast<double>(problem.elementBytes) /
             (maxBandwidth * 1e3);
}

} // namespace planner
} // namespace shardx
