//===- Search.cpp - The A* search over layouts
//------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The search loop: a frontier ordered by cost so far plus the lower bound,
// the best known cost of every layout reached, and the plan read back from
// the target's chain of parents.
//
//===----------------------------------------------------------------------===//

#include "Search.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

namespace shardx {
namespace planner {

std::optional<Plan> Search::run(const Layout &src, std::string &reason) {
  steps.prepare(src);
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
  bound.push_back(costBound.remaining(src));
  index.emplace(layoutKey(src), 0);
  queue.push({{bound[0], 0}, 0});
  std::vector<Edge> edges;
  while (!queue.empty()) {
    auto [priority, id] = queue.top();
    queue.pop();
    if (priority != Priority{best[id].first + bound[id], best[id].second})
      continue; // stale
    if (nodes[id].layout == problem.dst) {
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
    if (nodes.size() > kMaxStates || budget.exhausted())
      break;
    edges.clear();
    Layout current = nodes[id].layout;
    Priority here = best[id];
    steps.expand(current, edges);
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
        bound.push_back(costBound.remaining(edge.after));
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
  if (nodes.size() > kMaxStates || budget.exhausted())
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
