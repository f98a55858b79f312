//===- SearchPermutes.cpp - Permutes to target-like layouts
//----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The layouts one collective permute may reach on the way to the target,
// collected once per search, and the matching of a layout's shards to
// theirs.
//
//===----------------------------------------------------------------------===//

#include "SearchSteps.h"

#include <algorithm>
#include <map>

namespace shardx {
namespace planner {

void PermuteTargets::prepare(const Layout &src) {
  // Targets: the target's shards less some splits (local chunks add them
  // afterwards) or with one more split (an all_gather removes it); Partial
  // axes come afterwards from partition_value.
  Layout stripped = problem.dst;
  std::vector<int64_t> splitAxes;
  for (int64_t a = 0; a < stripped.getMeshRank(); ++a) {
    stripped.setPartial(a, std::nullopt);
    if (problem.dst.getShardedDim(a) >= 0)
      splitAxes.push_back(a);
  }
  std::vector<Layout> candidates = {stripped};
  for (const auto &drop : subsets(splitAxes)) {
    if (budget.charge(WorkBudget::kLayoutWork))
      return;
    std::optional<Layout> target = stripped;
    for (int64_t axis : drop) {
      int64_t dim = target->getShardedDim(axis);
      const auto &splits = target->getDim(dim)->splits;
      size_t index =
          std::find_if(splits.begin(), splits.end(),
                       [&](const Split &s) { return s.axis == axis; }) -
          splits.begin();
      target = gatherSplits(*target, dim, index, 1, problem.meshShape);
      if (!target)
        break;
    }
    if (target)
      candidates.push_back(std::move(*target));
  }
  for (int64_t a = 0; a < stripped.getMeshRank(); ++a) {
    if (stripped.getShardedDim(a) >= 0)
      continue;
    for (int64_t d = 0; d < static_cast<int64_t>(problem.shape.size()); ++d)
      for (int64_t s : problem.blockBoundaries(src, d)) {
        budget.charge(WorkBudget::kLayoutWork);
        if (auto extra = carveSplits(stripped, d, {a}, s, problem.meshShape))
          candidates.push_back(std::move(*extra));
      }
  }
  for (Layout &t : candidates) {
    if (!problem.valid(t) || !shardBytes.isEven(t))
      continue;
    Target pt;
    pt.bytes = shardBytes.maxBytes(t);
    pt.layout = std::move(t); // shards computed when first needed
    targets.push_back(std::move(pt));
  }
}

/// The runs of a shard as one list of integers (a map key).
static std::vector<int64_t> runsKey(const LocalShard &shard) {
  std::vector<int64_t> key;
  for (const std::vector<Interval> &runs : shard.runs) {
    key.push_back(static_cast<int64_t>(runs.size()));
    for (const Interval &run : runs) {
      key.push_back(run.offset);
      key.push_back(run.size);
    }
  }
  return key;
}

/// Whether `have` (per rank) is a permutation of `want`; fills `pairs` with
/// the (source, target) moves. Ranks that hold their target shard keep it;
/// other targets take the first holder not yet sending.
static bool matchShards(const std::vector<LocalShard> &have,
                        const std::vector<LocalShard> &want,
                        std::vector<std::pair<int64_t, int64_t>> &pairs) {
  size_t n = have.size();
  std::vector<bool> sending(n, false), done(n, false);
  for (size_t r = 0; r < n; ++r)
    if (have[r].runs == want[r].runs)
      done[r] = sending[r] = true;
  // On large meshes, the holders of each shard in rank order (a scan per
  // target is quadratic in the ranks) and the first that may still send.
  constexpr size_t kScanRanks = 256;
  std::map<std::vector<int64_t>, std::pair<std::vector<size_t>, size_t>>
      holders;
  if (n > kScanRanks)
    for (size_t q = 0; q < n; ++q)
      holders[runsKey(have[q])].first.push_back(q);
  for (size_t r = 0; r < n; ++r) {
    if (done[r])
      continue;
    int64_t source = -1;
    if (n <= kScanRanks) {
      for (size_t q = 0; q < n && source < 0; ++q)
        if (!sending[q] && have[q].runs == want[r].runs)
          source = static_cast<int64_t>(q);
    } else if (auto it = holders.find(runsKey(want[r])); it != holders.end()) {
      auto &[ranks, next] = it->second;
      while (next < ranks.size() && sending[ranks[next]])
        ++next;
      if (next < ranks.size())
        source = static_cast<int64_t>(ranks[next]);
    }
    if (source < 0)
      return false;
    sending[source] = true;
    pairs.push_back({source, static_cast<int64_t>(r)});
  }
  return !pairs.empty();
}

void PermuteTargets::addPermutes(const Layout &l, std::vector<Edge> &out) {
  // One collective permute to a target's shards when every rank's target
  // shard is exactly some rank's current shard.
  if (l.hasPartial() || !shardBytes.isEven(l))
    return;
  double bytes = shardBytes.maxBytes(l);
  std::vector<LocalShard> have;
  for (Target &t : targets) {
    if (t.bytes != bytes || t.layout == l)
      continue;
    int64_t ranks = static_cast<int64_t>(problem.coords.size());
    if (budget.charge(ranks))
      return;
    if (t.shards.empty()) {
      budget.charge(ranks * WorkBudget::shardWork(t.layout));
      for (const auto &c : problem.coords)
        t.shards.push_back(
            t.layout.getLocalShard(problem.meshShape, problem.shape, c));
    }
    if (have.empty()) {
      budget.charge(ranks * WorkBudget::shardWork(l));
      for (const auto &c : problem.coords)
        have.push_back(l.getLocalShard(problem.meshShape, problem.shape, c));
    }
    Step permute =
        makeStep(Step::Kind::Permute,
                 allAxes(static_cast<int64_t>(problem.meshShape.size())));
    if (!matchShards(have, t.shards, permute.pairs))
      continue;
    permute.bytesPerRank = bytes;
    permute.cost = problem.stepCost(permute.axes, bytes);
    out.push_back({std::move(permute), t.layout, {}});
  }
}

} // namespace planner
} // namespace shardx
