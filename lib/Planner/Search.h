//===- Search.h - The planner's A* search (private) ------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The A* search of one reshard problem, a driver over shared units: the
// problem and its work budget (SearchProblem.h), the pricing of layouts and
// the lower bound (SearchCost.h), and the move generation (SearchSteps.h).
// Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_PLANNER_SEARCH_H
#define SHARDX_LIB_PLANNER_SEARCH_H

#include "SearchCost.h"
#include "SearchProblem.h"
#include "SearchSteps.h"

#include <optional>
#include <string>

namespace shardx {
namespace planner {

/// One planning problem's search: A* over canonical layouts from a source
/// to the target, expanding each state with the StepGenerator and ordering
/// the frontier by cost so far plus the CostBound.
class Search {
public:
  Search(const MeshSpec &mesh, const Layout &dst,
         const std::vector<int64_t> &shape, int64_t elementBytes)
      : problem(mesh, dst, shape, elementBytes), shardBytes(problem, budget),
        costBound(problem, budget), steps(problem, budget, shardBytes) {}

  /// The cheapest plan from `src` to the target, or nullopt with `reason`.
  std::optional<Plan> run(const Layout &src, std::string &reason);

private:
  /// A layout reached, and the edge from its parent that reaches it.
  struct Node {
    Layout layout;
    int64_t parent;
    Step via;
    std::vector<Step> fused;
  };

  Problem problem;
  WorkBudget budget;
  ShardBytes shardBytes;
  CostBound costBound;
  StepGenerator steps;
};

} // namespace planner
} // namespace shardx

#endif // SHARDX_LIB_PLANNER_SEARCH_H
