//===- SearchSteps.h - The steps out of a layout ----------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The move generation of the planner's search: the edges out of a layout,
// one generator per collective family (SearchSteps.cpp), the permutes among
// them to target-like layouts prepared once per search (SearchPermutes.cpp).
// Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_PLANNER_SEARCHSTEPS_H
#define SHARDX_LIB_PLANNER_SEARCHSTEPS_H

#include "SearchCost.h"
#include "SearchProblem.h"
#include "shardx/Layout/SplitAlgebra.h"

#include <vector>

namespace shardx {
namespace planner {

/// A step found by the search, without its layouts (the search stores
/// each layout once, in its node).
struct Edge {
  Step step;
  Layout after;
  /// Steps that follow `step` within this edge (their layouts filled in).
  std::vector<Step> fused;
};

/// A step of `kind` over the group `axes`; steps that act on a dim
/// (gathers, reduce-scatters, chunks, all_to_alls) give it and the block
/// stride `outer` of their group's digit there.
inline Step makeStep(Step::Kind kind, std::vector<int64_t> axes,
                     int64_t dim = -1, int64_t outer = 1) {
  Step step;
  step.kind = kind;
  step.axes = std::move(axes);
  step.dim = dim;
  step.outer = outer;
  return step;
}

/// All the axes of a mesh of rank `meshRank`, in order (a permute's group).
std::vector<int64_t> allAxes(int64_t meshRank);

/// All non-empty subsets of `items`, each in the order of `items`.
std::vector<std::vector<int64_t>> subsets(const std::vector<int64_t> &items);

/// The layouts a single collective permute may reach: the target less some
/// splits or with one more, without its Partial axes, even. Each keeps its
/// shards once computed.
class PermuteTargets {
public:
  PermuteTargets(const Problem &problem, WorkBudget &budget,
                 ShardBytes &shardBytes)
      : problem(problem), budget(budget), shardBytes(shardBytes) {}

  /// Collects the targets of a search from `src`.
  void prepare(const Layout &src);
  /// [S(0), R] -> [S(1), R] where whole shards move: one permute to each
  /// target whose every rank's shard is exactly some rank's shard of `l`.
  void addPermutes(const Layout &l, std::vector<Edge> &out);

private:
  struct Target {
    Layout layout;
    double bytes;
    std::vector<LocalShard> shards;
  };
  const Problem &problem;
  WorkBudget &budget;
  ShardBytes &shardBytes;
  std::vector<Target> targets;
};

/// The steps out of a layout.
///
/// Edges are target-directed where a step creates structure: chunk,
/// reduce_scatter and the scatter half of all_to_all carve mesh axes only
/// into the dim, order and stride position the target gives them, and
/// partition_value / rescale only produce the target's Partial ops. Steps
/// that remove structure (all_gather, all_reduce) are generated for every
/// axis and run of splits. From any layout this reaches every valid target
/// (reduce, gather, then carve the target's splits major first).
class StepGenerator {
public:
  StepGenerator(const Problem &problem, WorkBudget &budget,
                ShardBytes &shardBytes)
      : problem(problem), budget(budget), shardBytes(shardBytes),
        permutes(problem, budget, shardBytes) {}

  /// Prepares the generators for a search from `src`.
  void prepare(const Layout &src) { permutes.prepare(src); }
  /// The steps out of `l`, one generator per family (each headed by an
  /// example). A generator that returns true ran out of the work budget:
  /// expand stops there.
  void expand(const Layout &l, std::vector<Edge> &out);

private:
  /// The most relabelings tried per layout: all of them on meshes of up to
  /// 7 axes.
  static constexpr size_t kMaxRelabelings = 5040;

  /// Prices `step` (moving `bytes` per rank) and adds it.
  void push(std::vector<Edge> &out, Step step, Layout after, double bytes);
  /// Carves the axes of `subset` into `base` where the target puts them
  /// (same dim, consecutive there, in the target's order, at the stride
  /// that leaves room for the target's axes major to them that `base` lacks
  /// on that dim). Calls `emit(after, dim, group, stride)` when valid.
  template <typename Fn>
  void carveAsTarget(const Layout &base, const std::vector<int64_t> &subset,
                     Fn emit);
  bool reducible(const Layout &l, int64_t axis) const;

  bool addReductions(const Layout &l, double inBytes, std::vector<Edge> &out);
  void addRescales(const Layout &l, std::vector<Edge> &out);
  bool addChunks(const Layout &l, const std::vector<int64_t> &replicated,
                 std::vector<Edge> &out);
  void addPartitionValues(const Layout &l,
                          const std::vector<int64_t> &replicated,
                          std::vector<Edge> &out);
  void addGathers(const Layout &l, double inBytes, bool inEven,
                  std::vector<Edge> &out);
  bool addRelabelings(const Layout &l, double inBytes, std::vector<Edge> &out);

  const Problem &problem;
  WorkBudget &budget;
  ShardBytes &shardBytes;
  PermuteTargets permutes;
};

} // namespace planner
} // namespace shardx

#endif // SHARDX_LIB_PLANNER_SEARCHSTEPS_H
