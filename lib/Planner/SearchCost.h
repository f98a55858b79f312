//===- SearchCost.h - What a step moves, what is left to pay ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The pricing side of the planner's search: the bytes each rank holds of a
// layout and lacks of another (what a step moves; the step's time is then
// Problem::stepCost), and the A* lower bound of the cost left from a layout
// to the target. Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_PLANNER_SEARCHCOST_H
#define SHARDX_LIB_PLANNER_SEARCHCOST_H

#include "SearchProblem.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace shardx {
namespace planner {

/// The bytes of each rank's shard of the layouts a search visits, cached
/// per layout.
class ShardBytes {
public:
  ShardBytes(const Problem &problem, WorkBudget &budget)
      : problem(problem), budget(budget) {}

  /// Per-rank local bytes of `l` (one entry when every rank holds the same).
  const std::vector<double> &rankBytes(const Layout &l);
  double maxBytes(const Layout &l) {
    const std::vector<double> &b = rankBytes(l);
    return *std::max_element(b.begin(), b.end());
  }
  bool isEven(const Layout &l) { return rankBytes(l).size() == 1; }
  /// The most bytes any rank lacks of its shard of `to` when it holds its
  /// shard of `from`: what it receives in one step from `from` to `to`.
  double maxLackBytes(const Layout &from, const Layout &to);

private:
  const Problem &problem;
  WorkBudget &budget;
  std::unordered_map<Key, std::vector<double>, KeyHash> cache;
};

/// The A* heuristic: a lower bound of the cost from a layout to the target.
/// A collective is needed unless only local steps remain, and every rank
/// must receive the part of its target shard it lacks.
class CostBound {
public:
  CostBound(const Problem &problem, WorkBudget &budget);

  double remaining(const Layout &l);

private:
  const Problem &problem;
  WorkBudget &budget;
  /// The cheapest any collective can be.
  double minLatency = 0, maxBandwidth = 0;
  /// Every rank's target shard, computed when first needed.
  std::vector<LocalShard> dstShards;
};

} // namespace planner
} // namespace shardx

#endif // SHARDX_LIB_PLANNER_SEARCHCOST_H
