//===- SearchSteps.cpp - The steps out of a layout --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// One generator per collective family: reductions, rescales, chunks,
// partition_value, gathers, relabelings (all_to_all) and permutes.
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

template <typename Fn>
void Search::carveAsTarget(const Layout &base,
                           const std::vector<int64_t> &subset, Fn emit) {
  int64_t dim = dst.getShardedDim(subset[0]);
  if (dim < 0)
    return;
  const DimSharding &want = *dst.getDim(dim);
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
      stride *= meshShape[axis];
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
    if (charge(kLayoutWork))
      return;
    std::optional<Layout> after =
        base.withCarvedSplits(dim, group, s, meshShape);
    if (!after)
      continue;
    // Explicit target sizes apply when the whole dim is carved at once.
    if (!have && !want.sizes.empty() &&
        after->getDim(dim)->splits == want.splits)
      after->setSizes(dim, want.sizes);
    bool explicitSizes = !after->getDim(dim)->sizes.empty();
    // A group acts as one flattened axis: with torch.chunk sizes that is the
    // nested split only when the dim divides.
    if (group.size() > 1 && !explicitSizes && !dimDivides(*after, dim))
      continue;
    if (valid(*after))
      emit(std::move(*after), dim, group, s);
  }
}

/// All non-empty subsets of `items`, each in the order of `items`.
static std::vector<std::vector<int64_t>>
subsets(const std::vector<int64_t> &items) {
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

// [P(sum), R] -> [R, R]: all_reduce; [P(sum), R] -> [S(0), R]:
// reduce_scatter (onto any dim and block boundary, or where the target has
// the axes). Each set of Partial axes with one op that can be reduced now.
bool Search::addReductions(const Layout &l, double inBytes,
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
      if (charge(kLayoutWork))
        return true;
      Layout cleared = l;
      for (int64_t a : subset)
        cleared.setPartial(a, std::nullopt);
      int64_t n = groupSize(subset);
      Step ar;
      ar.kind = Step::Kind::AllReduce;
      ar.axes = subset;
      ar.reduce = op;
      push(out, ar, cleared, 2.0 * (n - 1) / n * inBytes);
      // Reduce-scatter anywhere too (in mesh order): less to move later.
      for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
        if (subset.size() == 1 && dst.getShardedDim(subset[0]) == d)
          continue; // carveAsTarget covers it
        for (int64_t s : blockBoundaries(cleared, d)) {
          charge(kLayoutWork);
          std::optional<Layout> after =
              cleared.withCarvedSplits(d, subset, s, meshShape);
          if (!after || !valid(*after) ||
              (subset.size() > 1 && !dimDivides(*after, d)))
            continue;
          Step rs;
          rs.kind = Step::Kind::ReduceScatter;
          rs.axes = subset;
          rs.dim = d;
          rs.outer = s;
          rs.reduce = op;
          push(out, rs, std::move(*after), static_cast<double>(n - 1) / n * inBytes);
        }
      }
      carveAsTarget(cleared, subset,
                    [&](Layout after, int64_t d,
                        const std::vector<int64_t> &group, int64_t s) {
                      Step rs;
                      rs.kind = Step::Kind::ReduceScatter;
                      rs.axes = group;
                      rs.dim = d;
                      rs.outer = s;
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
void Search::addRescales(const Layout &l, std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  for (int64_t a = 0; a < meshRank; ++a) {
    const auto &want = dst.getPartials()[a];
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
    Step rescale;
    rescale.kind = Step::Kind::Rescale;
    rescale.axes = {a};
    rescale.reduce = *want;
    rescale.scale = *want == ReduceOp::Avg ? static_cast<double>(meshShape[a])
                                           : 1.0 / meshShape[a];
    push(out, rescale, after, 0);
  }

}

// [R, R] -> [S(0), R]: chunk (keep this rank's piece), where the target
// has the axes or, to shrink later collectives, onto any dim.
bool Search::addChunks(const Layout &l, const std::vector<int64_t> &replicated,
                       std::vector<Edge> &out) {
  for (const auto &subset : subsets(replicated)) {
    if (charge(kLayoutWork))
      return true;
    carveAsTarget(l, subset,
                  [&](Layout after, int64_t d,
                      const std::vector<int64_t> &group, int64_t s) {
                    Step chunk;
                    chunk.kind = Step::Kind::Chunk;
                    chunk.axes = group;
                    chunk.dim = d;
                    chunk.outer = s;
                    chunk.sizes = after.getDim(d)->sizes;
                    push(out, chunk, std::move(after), 0);
                  });
  }
  // Chunking early shrinks what later collectives move, also into a dim
  // the target does not give the axis (a permute or all_to_all fixes it).
  for (int64_t a : replicated)
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (dst.getShardedDim(a) == d)
        continue; // carveAsTarget covers it
      for (int64_t s : blockBoundaries(l, d)) {
        charge(kLayoutWork);
        std::optional<Layout> after = l.withCarvedSplits(d, {a}, s, meshShape);
        if (!after || !valid(*after))
          continue;
        Step chunk;
        chunk.kind = Step::Kind::Chunk;
        chunk.axes = {a};
        chunk.dim = d;
        chunk.outer = s;
        push(out, chunk, std::move(*after), 0);
      }
    }
  return false;
}

// [R] -> [P(sum)]: partition_value (one member keeps the value, the others
// the op's identity), where the target is Partial.
void Search::addPartitionValues(const Layout &l,
                                const std::vector<int64_t> &replicated,
                                std::vector<Edge> &out) {
  int64_t meshRank = l.getMeshRank();
  const auto &partials = l.getPartials();
  for (int64_t a : replicated) {
    const auto &want = dst.getPartials()[a];
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
    Step pv;
    pv.kind = Step::Kind::PartitionValue;
    pv.axes = {a};
    pv.reduce = *want;
    push(out, pv, after, 0);
  }

}

// [S(0), R] -> [R, R]: all_gather of a run of adjacent splits of one dim;
// [S(0), R] -> [S(1), R]: all_to_all (the run gathered here, carved where
// the target has it).
void Search::addGathers(const Layout &l, double inBytes, bool inEven,
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
        int64_t n = groupSize(group);
        int64_t gatherOuter = ds.splits[first].stride;
        charge(kLayoutWork);
        std::optional<Layout> gathered =
            l.withoutSplits(ds.dim, first, count, meshShape);
        if (!gathered || !valid(*gathered))
          continue;
        Step ag;
        ag.kind = Step::Kind::AllGather;
        ag.axes = group;
        ag.dim = ds.dim;
        ag.outer = gatherOuter;
        // Each rank receives what it lacks of the gathered piece.
        const std::vector<double> &before = rankBytes(l);
        const std::vector<double> &after = rankBytes(*gathered);
        double received = 0;
        for (size_t r = 0; r < std::max(before.size(), after.size()); ++r)
          received = std::max(received, after[after.size() == 1 ? 0 : r] -
                                            before[before.size() == 1 ? 0 : r]);
        push(out, ag, *gathered, received);
        // all_to_all: gather the run here, carve it where the target has it
        // (with one group order for both halves).
        carveAsTarget(*gathered, group,
                      [&](Layout after, int64_t d,
                          const std::vector<int64_t> &carved, int64_t s) {
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
                                s /
                                n; // the removed digit is not local to senders
                          else if (gatherOuter % (s * n) == 0)
                            concatOuter = gatherOuter /
                                          n; // the carved digit is not local
                          else
                            return;
                        }
                        Step a2a;
                        a2a.kind = Step::Kind::AllToAll;
                        a2a.axes = group;
                        a2a.dim = ds.dim;
                        a2a.outer = concatOuter;
                        a2a.splitDim = d;
                        a2a.splitOuter = splitOuter;
                        a2a.sizes = after.getDim(d)->sizes;
                        // Even shards: each rank keeps 1/n of its shard and
                        // receives the rest. Uneven: what the rank that
                        // receives most lacks of its new shard.
                        double received =
                            inEven && isEven(after)
                                ? static_cast<double>(n - 1) / n * inBytes
                                : maxLackBytes(l, after);
                        push(out, a2a, std::move(after), received);
                      });
      }
    }
  }
}

// [S(0), R] -> [R, S(0)] on equal-sized axes: permute (the split moves to
// another axis, whole shards move between ranks).
bool Search::addRelabelings(const Layout &l, double inBytes,
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
    return !partials[to] && meshShape[to] == meshShape[from];
  };
  std::vector<std::vector<int64_t>> sigmas;
  std::vector<int64_t> image(meshRank, -1);
  std::vector<bool> taken(meshRank, false);
  std::function<void(size_t)> place = [&](size_t i) {
    if (charge(1) || sigmas.size() >= kMaxRelabelings)
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
    charge(meshRank);
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
    if (charge(kLayoutWork + static_cast<int64_t>(coords.size())))
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
    Step permute;
    permute.kind = Step::Kind::Permute;
    for (int64_t a = 0; a < meshRank; ++a)
      permute.axes.push_back(a);
    for (size_t r = 0; r < coords.size(); ++r) {
      std::vector<int64_t> source(meshRank);
      for (int64_t a = 0; a < meshRank; ++a)
        source[a] = coords[r][sigma[a]];
      int64_t q = linearizeCoords(meshShape, permute.axes, source);
      if (q != static_cast<int64_t>(r))
        permute.pairs.push_back({q, static_cast<int64_t>(r)});
    }
    push(out, permute, std::move(relabeled), inBytes);
  }
  return false;
}

void Search::preparePermuteTargets(const Layout &src) {
  // Targets: the target's shards less some splits (local chunks add them
  // afterwards) or with one more split (an all_gather removes it); Partial
  // axes come afterwards from partition_value.
  Layout stripped = dst;
  std::vector<int64_t> splitAxes;
  for (int64_t a = 0; a < stripped.getMeshRank(); ++a) {
    stripped.setPartial(a, std::nullopt);
    if (dst.getShardedDim(a) >= 0)
      splitAxes.push_back(a);
  }
  std::vector<Layout> targets = {stripped};
  for (const auto &drop : subsets(splitAxes)) {
    if (charge(kLayoutWork))
      return;
    std::optional<Layout> target = stripped;
    for (int64_t axis : drop) {
      int64_t dim = target->getShardedDim(axis);
      const auto &splits = target->getDim(dim)->splits;
      size_t index =
          std::find_if(splits.begin(), splits.end(),
                       [&](const Split &s) { return s.axis == axis; }) -
          splits.begin();
      target = target->withoutSplits(dim, index, 1, meshShape);
      if (!target)
        break;
    }
    if (target)
      targets.push_back(std::move(*target));
  }
  for (int64_t a = 0; a < stripped.getMeshRank(); ++a) {
    if (stripped.getShardedDim(a) >= 0)
      continue;
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
      for (int64_t s : blockBoundaries(src, d)) {
        charge(kLayoutWork);
        if (auto extra = stripped.withCarvedSplits(d, {a}, s, meshShape))
          targets.push_back(std::move(*extra));
      }
  }
  for (Layout &t : targets) {
    if (!valid(t) || !isEven(t))
      continue;
    PermuteTarget pt;
    pt.bytes = maxBytes(t);
    pt.layout = std::move(t); // shards computed when first needed
    permuteTargets.push_back(std::move(pt));
  }
}

std::vector<int64_t> Search::blockBoundaries(const Layout &l,
                                             int64_t dim) const {
  std::vector<int64_t> strides = {1};
  for (const Layout *x : {&l, &dst})
    if (const DimSharding *ds = x->getDim(dim))
      for (const Split &s : ds->splits)
        strides.push_back(s.stride);
  std::sort(strides.begin(), strides.end());
  strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
  return strides;
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

void Search::addPermute(const Layout &l, std::vector<Edge> &out) {
  // One collective permute to a target's shards when every rank's target
  // shard is exactly some rank's current shard.
  if (l.hasPartial() || !isEven(l))
    return;
  double bytes = maxBytes(l);
  std::vector<LocalShard> have;
  for (PermuteTarget &t : permuteTargets) {
    if (t.bytes != bytes || t.layout == l)
      continue;
    int64_t ranks = static_cast<int64_t>(coords.size());
    if (charge(ranks))
      return;
    if (t.shards.empty()) {
      charge(ranks * shardWork(t.layout));
      for (const auto &c : coords)
        t.shards.push_back(t.layout.getLocalShard(meshShape, shape, c));
    }
    if (have.empty()) {
      charge(ranks * shardWork(l));
      for (const auto &c : coords)
        have.push_back(l.getLocalShard(meshShape, shape, c));
    }
    Step permute;
    permute.kind = Step::Kind::Permute;
    for (size_t a = 0; a < meshShape.size(); ++a)
      permute.axes.push_back(static_cast<int64_t>(a));
    if (!matchShards(have, t.shards, permute.pairs))
      continue;
    permute.bytesPerRank = bytes;
    permute.cost = stepCost(permute.axes, bytes);
    out.push_back({std::move(permute), t.layout, {}});
  }
}

} // namespace planner
} // namespace shardx
