//===- SearchSteps.cpp - The steps out of a layout -----------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// One generator per collective family: reductions, rescales, chunks,
// partition_value, gathers and relabelings (all_to_all and permutes of
// equal-sized axes); the permutes to target-like layouts are in
// SearchPermutes.cpp.
//
//===----------------------------------------------------------------------===//

#include "SearchSteps.h"

#include <algorithm>
#include <functional>

namespace shardx {
namespace planner {

template <typename Fn>
void StepGenerator::carveAsTarget(const Layout &base,
                                  const std::vector<int64_t> &subset, Fn emit) {
  int64_t dim = problem.dst.getShardedDim(subset[0]);
  if (dim < 0)
    return;
  const DimSharding &want = *problem.dst.getDim(dim);
  size_t first = 0;
  while (want.splits[first].axis != subset[0] &&
         std::find(subset.begin(), subset.end(), want.splits[first].axis) ==
             subset.end())
    ++first;
  if (first + subset.size() > want.splits.size())
    return;
  std::vector<int64_t> group;
  for (size_t i = first; i < first + subset.size(); ++i) {
    int64_t axis = want.splits[i].axis;
    if (std::find(subset.begin(), subset.end(), axis) == subset.end())
      return; // not consecutive in the target
    group.push_back(axis);
  }
  // Room for the target's axes major to the group that `base` does not have
  // on this dim yet: they will be carved out of it later.
  const DimSharding *have = base.getDim(dim);
  int64_t stride = want.splits[first].stride;
  for (size_t i = 0; i < first; ++i) {
    int64_t axis = want.splits[i].axis;
    bool present =
        have && std::any_of(have->splits.begin(), have->splits.end(),
                            [&](const Split &s) { return s.axis == axis; });
    if (!present)
      stride *= problem.meshShape[axis];
  }
  // Also the boundaries of the blocks `base` already has on the dim: axes
  // that are gathered later turn into blocks major to the group.
  std::vector<int64_t> strides = {stride, 1};
  if (have)
    for (const Split &s : have->splits)
      strides.push_back(s.stride);
  std::sort(strides.begin(), strides.end());
  strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
  for (int64_t s : strides) {
    if (budget.charge(WorkBudget::kLayoutWork))
      return;
    std::optional<Layout> after =
        carveSplits(base, dim, group, s, problem.meshShape);
    if (!after)
      continue;
    // Explicit target sizes apply when the whole dim is carved at once.
    if (!have && !want.sizes.empty() &&
        after->getDim(dim)->splits == want.splits)
      after->setSizes(dim, want.sizes);
    bool explicitSizes = !after->getDim(dim)->sizes.empty();
    // A group acts as one flattened axis: with torch.chunk sizes that is the
    // nested split only when the dim divides.
    if (group.size() > 1 && !explicitSizes && !problem.dimDivides(*after, dim))
      continue;
    if (problem.valid(*after))
      emit(std::move(*after), dim, group, s);
  }
}

/// All non-empty subsets of `items`, each in the order of `items`.
std::vector<int64_t> allAxes(int64_t meshRank) {
  std::vector<int64_t> axes(meshRank);
  for (int64_t a = 0; a < meshRank; ++a)
    axes[a] = a;
  return axes;
}

std::vector<std::vector<int64_t>> subsets(const std::vector<int64_t> &items) {
  std::vector<std::vector<int64_t>> result;
  for (uint32_t mask = 1; mask < (1u << items.size()); ++mask) {
    std::vector<int64_t> s;
    for (size_t i = 0; i < items.size(); ++i)
      if (mask & (1u << i))
        s.push_back(items[i]);
    result.push_back(s);
  }
  return result;
}

bool StepGenerator::reducible(const Layout &l, int64_t axis) const {
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

void StepGenerator::push(std::vector<Edge> &out, Step step, Layout after,
                         double bytes) {
  budget.charge(WorkBudget::kLayoutWork);
  step.bytesPerRank = bytes;
  // Local steps cost nothing; among equal costs the search prefers fewer
  // steps.
  step.cost = step.isCollective() ? problem.stepCost(step.axes, bytes) : 0.0;
  out.push_back({std::move(step), std::move(after)});
}

void StepGenerator::expand(const Layout &l, std::vector<Edge> &out) {
  if (budget.exhausted())
    return;
  double inBytes = shardBytes.maxBytes(l);
  bool inEven = shardBytes.isEven(l);
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
  permutes.addPermutes(l, out);
}

// [P(sum), R] -> [R, R]: all_reduce; [P(sum), R] -> [S(0), R]:
// reduce_scatter (onto any dim and block boundary, or where the target has
// the axes). Each set of Partial axes with one op that can be reduced now.
bool StepGenerator::addReductions(const Layout &l, double inBytes,
                                  std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                      ReduceOp::Min, ReduceOp::Prod}) {
    std::vector<int64_t> ready;
    for (int64_t a = 0; a < meshRank; ++a)
      if (partials[a] == op && reducible(l, a))
        ready.push_back(a);
    for (const auto &subset : subsets(ready)) {
      if (budget.charge(WorkBudget::kLayoutWork))
        return true;
      Layout cleared = l;
      for (int64_t a : subset)
        cleared.setPartial(a, std::nullopt);
      int64_t n = problem.groupSize(subset);
      Step ar = makeStep(Step::Kind::AllReduce, subset);
      ar.reduce = op;
      push(out, ar, cleared, 2.0 * (n - 1) / n * inBytes);
      // Reduce-scatter anywhere too (in mesh order): less to move later.
      for (int64_t d = 0; d < static_cast<int64_t>(problem.shape.size()); ++d) {
        if (subset.size() == 1 && problem.dst.getShardedDim(subset[0]) == d)
          continue; // carveAsTarget covers it
        for (int64_t s : problem.blockBoundaries(cleared, d)) {
          budget.charge(WorkBudget::kLayoutWork);
          std::optional<Layout> after =
              carveSplits(cleared, d, subset, s, problem.meshShape);
          if (!after || !problem.valid(*after) ||
              (subset.size() > 1 && !problem.dimDivides(*after, d)))
            continue;
          Step rs = makeStep(Step::Kind::ReduceScatter, subset, d, s);
          rs.reduce = op;
          push(out, rs, std::move(*after),
               static_cast<double>(n - 1) / n * inBytes);
        }
      }
      carveAsTarget(cleared, subset,
                    [&](Layout after, int64_t d,
                        const std::vector<int64_t> &group, int64_t s) {
                      Step rs =
                          makeStep(Step::Kind::ReduceScatter, group, d, s);
                      rs.reduce = op;
                      rs.sizes = after.getDim(d)->sizes;
                      push(out, rs, std::move(after),
                           static_cast<double>(n - 1) / n * inBytes);
                    });
    }
  }
  return false;
}

// [P(sum)] -> [P(avg)]: rescale (a local scaling; sum and avg only).
void StepGenerator::addRescales(const Layout &l, std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  for (int64_t a = 0; a < meshRank; ++a) {
    const auto &want = problem.dst.getPartials()[a];
    if (!partials[a] || !want || *want == *partials[a])
      continue;
    bool linear = (*partials[a] == ReduceOp::Sum && *want == ReduceOp::Avg) ||
                  (*partials[a] == ReduceOp::Avg && *want == ReduceOp::Sum);
    bool noProd = std::none_of(partials.begin(), partials.end(), [](auto &p) {
      return p && *p == ReduceOp::Prod;
    });
    if (!linear || !noProd)
      continue;
    Layout after = l;
    after.setPartial(a, want);
    Step rescale = makeStep(Step::Kind::Rescale, {a});
    rescale.reduce = *want;
    rescale.scale = *want == ReduceOp::Avg
                        ? static_cast<double>(problem.meshShape[a])
                        : 1.0 / problem.meshShape[a];
    push(out, rescale, after, 0);
  }
}

// [R, R] -> [S(0), R]: chunk (keep this rank's piece), where the target
// has the axes or, to shrink later collectives, onto any dim.
bool StepGenerator::addChunks(const Layout &l,
                              const std::vector<int64_t> &replicated,
                              std::vector<Edge> &out) {
  for (const auto &subset : subsets(replicated)) {
    if (budget.charge(WorkBudget::kLayoutWork))
      return true;
    carveAsTarget(l, subset,
                  [&](Layout after, int64_t d,
                      const std::vector<int64_t> &group, int64_t s) {
                    Step chunk = makeStep(Step::Kind::Chunk, group, d, s);
                    chunk.sizes = after.getDim(d)->sizes;
                    push(out, chunk, std::move(after), 0);
                  });
  }
  // Chunking early shrinks what later collectives move, also into a dim
  // the target does not give the axis (a permute or all_to_all fixes it).
  for (int64_t a : replicated)
    for (int64_t d = 0; d < static_cast<int64_t>(problem.shape.size()); ++d) {
      if (problem.dst.getShardedDim(a) == d)
        continue; // carveAsTarget covers it
      for (int64_t s : problem.blockBoundaries(l, d)) {
        budget.charge(WorkBudget::kLayoutWork);
        std::optional<Layout> after =
            carveSplits(l, d, {a}, s, problem.meshShape);
        if (!after || !problem.valid(*after))
          continue;
        push(out, makeStep(Step::Kind::Chunk, {a}, d, s), std::move(*after), 0);
      }
    }
  return false;
}

// [R] -> [P(sum)]: partition_value (one member keeps the value, the others
// the op's identity), where the target is Partial.
void StepGenerator::addPartitionValues(const Layout &l,
                                       const std::vector<int64_t> &replicated,
                                       std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  for (int64_t a : replicated) {
    const auto &want = problem.dst.getPartials()[a];
    if (!want)
      continue;
    // Member 0 keeps the value and the others the identity of the op (sum,
    // prod), or everyone keeps it (avg, max, min). Inner partial axes must
    // preserve that identity.
    bool keepsIdentity = true;
    if (*want == ReduceOp::Sum || *want == ReduceOp::Prod)
      for (int64_t j = a + 1; j < meshRank; ++j)
        if (partials[j] && *partials[j] != *want &&
            *partials[j] != ReduceOp::Max && *partials[j] != ReduceOp::Min &&
            *partials[j] != ReduceOp::Avg)
          keepsIdentity = false;
    if (!keepsIdentity)
      continue;
    Layout after = l;
    after.setPartial(a, want);
    Step pv = makeStep(Step::Kind::PartitionValue, {a});
    pv.reduce = *want;
    push(out, pv, after, 0);
  }
}

// [S(0), R] -> [R, R]: all_gather of a run of adjacent splits of one dim;
// [S(0), R] -> [S(1), R]: all_to_all (the run gathered here, carved where
// the target has it).
void StepGenerator::addGathers(const Layout &l, double inBytes, bool inEven,
                               std::vector<Edge> &out) {
  // Split axes: all_gather and all_to_all of runs of consecutive splits.
  for (const DimSharding &ds : l.getDims()) {
    for (size_t first = 0; first < ds.splits.size(); ++first) {
      for (size_t count = 1; first + count <= ds.splits.size(); ++count) {
        // A group is one flattened axis only when its digits are adjacent:
        // no unsplit blocks between them.
        if (ds.splits[first + count - 1].stride != ds.splits[first].stride)
          break;
        std::vector<int64_t> group;
        for (size_t i = first; i < first + count; ++i)
          group.push_back(ds.splits[i].axis);
        int64_t n = problem.groupSize(group);
        int64_t gatherOuter = ds.splits[first].stride;
        budget.charge(WorkBudget::kLayoutWork);
        std::optional<Layout> gathered =
            gatherSplits(l, ds.dim, first, count, problem.meshShape);
        if (!gathered || !problem.valid(*gathered))
          continue;
        Step ag = makeStep(Step::Kind::AllGather, group, ds.dim, gatherOuter);
        // Each rank receives what it lacks of the gathered piece.
        const std::vector<double> &before = shardBytes.rankBytes(l);
        const std::vector<double> &after = shardBytes.rankBytes(*gathered);
        double received = 0;
        for (size_t r = 0; r < std::max(before.size(), after.size()); ++r)
          received = std::max(received, after[after.size() == 1 ? 0 : r] -
                                            before[before.size() == 1 ? 0 : r]);
        push(out, ag, *gathered, received);
        // all_to_all: gather the run here, carve it where the target has it
        // (with one group order for both halves).
        carveAsTarget(
            *gathered, group,
            [&](Layout after, int64_t d, const std::vector<int64_t> &carved,
                int64_t s) {
              if (carved != group || after == l)
                return;
              int64_t splitOuter = s, concatOuter = gatherOuter;
              if (d == ds.dim) {
                // In the dim's free blocks the removed digit spans
                // prefixes [gatherOuter, gatherOuter * n). One
                // exchange needs the carved digit wholly before or
                // wholly after it.
                if (!inEven)
                  return;
                if (s % (gatherOuter * n) == 0)
                  splitOuter =
                      s / n; // the removed digit is not local to senders
                else if (gatherOuter % (s * n) == 0)
                  concatOuter =
                      gatherOuter / n; // the carved digit is not local
                else
                  return;
              }
              Step a2a =
                  makeStep(Step::Kind::AllToAll, group, ds.dim, concatOuter);
              a2a.splitDim = d;
              a2a.splitOuter = splitOuter;
              a2a.sizes = after.getDim(d)->sizes;
              // Even shards: each rank keeps 1/n of its shard and
              // receives the rest. Uneven: what the rank that
              // receives most lacks of its new shard.
              double received = inEven && shardBytes.isEven(after)
                                    ? static_cast<double>(n - 1) / n * inBytes
                                    : shardBytes.maxLackBytes(l, after);
              push(out, a2a, std::move(after), received);
            });
      }
    }
  }
}

// [S(0), R] -> [R, S(0)] on equal-sized axes: permute (the split moves to
// another axis, whole shards move between ranks).
bool StepGenerator::addRelabelings(const Layout &l, double inBytes,
                                   std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  // Relabeling equal-sized axes (a permutation sigma: the split held by
  // axis a moves to axis sigma(a)) moves whole shards: one collective
  // permute, rank c receiving from the rank with coordinates c o sigma.
  // Only non-Partial axes move, each to an axis of its size. The new layout
  // depends only on where the sharding axes go: per such map, the
  // lexicographically smallest sigma, in lexicographic order (the order in
  // which a walk over all permutations meets them; such a walk is too long
  // from 9 axes on). At most kMaxRelabelings maps, the first a depth-first
  // walk meets.
  std::vector<int64_t> sharding;
  for (int64_t a = 0; a < meshRank; ++a)
    if (l.getShardedDim(a) >= 0)
      sharding.push_back(a);
  auto movable = [&](int64_t from, int64_t to) {
    return !partials[to] && problem.meshShape[to] == problem.meshShape[from];
  };
  std::vector<std::vector<int64_t>> sigmas;
  std::vector<int64_t> image(meshRank, -1);
  std::vector<bool> taken(meshRank, false);
  std::function<void(size_t)> place = [&](size_t i) {
    if (budget.charge(1) || sigmas.size() >= kMaxRelabelings)
      return;
    if (i < sharding.size()) {
      int64_t a = sharding[i];
      for (int64_t t = 0; t < meshRank; ++t) {
        if (taken[t] || !movable(a, t))
          continue;
        taken[t] = true;
        image[a] = t;
        place(i + 1);
        taken[t] = false;
        image[a] = -1;
      }
      return;
    }
    if (std::all_of(sharding.begin(), sharding.end(),
                    [&](int64_t a) { return image[a] == a; }))
      return; // the layout itself
    // The other axes, in order, take the smallest free axis of their size.
    budget.charge(meshRank);
    std::vector<int64_t> sigma = image;
    std::vector<bool> used = taken;
    for (int64_t a = 0; a < meshRank; ++a) {
      if (sigma[a] >= 0)
        continue;
      if (partials[a]) {
        sigma[a] = a;
        continue;
      }
      for (int64_t t = 0; t < meshRank && sigma[a] < 0; ++t)
        if (!used[t] && movable(a, t)) {
          sigma[a] = t;
          used[t] = true;
        }
    }
    sigmas.push_back(std::move(sigma));
  };
  place(0);
  std::sort(sigmas.begin(), sigmas.end());
  for (const std::vector<int64_t> &sigma : sigmas) {
    if (budget.charge(WorkBudget::kLayoutWork +
                      static_cast<int64_t>(problem.coords.size())))
      return true;
    Layout relabeled(meshRank);
    for (const DimSharding &ds : l.getDims()) {
      for (const Split &s : ds.splits)
        relabeled.addSplit(ds.dim, {sigma[s.axis], s.stride});
      if (!ds.sizes.empty())
        relabeled.setSizes(ds.dim, ds.sizes);
    }
    for (int64_t c = 0; c < meshRank; ++c)
      relabeled.setPartial(c, partials[c]);
    Step permute = makeStep(Step::Kind::Permute, allAxes(meshRank));
    for (size_t r = 0; r < problem.coords.size(); ++r) {
      std::vector<int64_t> source(meshRank);
      for (int64_t a = 0; a < meshRank; ++a)
        source[a] = problem.coords[r][sigma[a]];
      int64_t q = linearizeCoords(problem.meshShape, permute.axes, source);
      if (q != static_cast<int64_t>(r))
        permute.pairs.push_back({q, static_cast<int64_t>(r)});
    }
    push(out, permute, std::move(relabeled), inBytes);
  }
  return false;
}

} // namespace planner
} // namespace shardx
