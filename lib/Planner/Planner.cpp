//===- Planner.cpp - Reshard planning as a shortest path ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Planner/Planner.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

namespace shardx {

const char *stringifyStepKind(Step::Kind kind) {
  switch (kind) {
  case Step::Kind::AllGather:
    return "all_gather";
  case Step::Kind::ReduceScatter:
    return "reduce_scatter";
  case Step::Kind::AllReduce:
    return "all_reduce";
  case Step::Kind::AllToAll:
    return "all_to_all";
  case Step::Kind::Chunk:
    return "chunk";
  case Step::Kind::PartitionValue:
    return "partition_value";
  case Step::Kind::Rescale:
    return "rescale";
  case Step::Kind::Permute:
    return "permute";
  }
  return "?";
}

static std::string listStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Step::str() const {
  std::string s =
      std::string(stringifyStepKind(kind)) + "(axes = " + listStr(axes);
  switch (kind) {
  case Kind::AllGather:
  case Kind::Chunk:
    s += ", dim = " + std::to_string(dim);
    break;
  case Kind::ReduceScatter:
    s += ", dim = " + std::to_string(dim) + ", " + stringifyReduceOp(reduce);
    break;
  case Kind::AllReduce:
  case Kind::PartitionValue:
    s += std::string(", ") + stringifyReduceOp(reduce);
    break;
  case Kind::AllToAll:
    s += ", split_dim = " + std::to_string(splitDim) +
         ", concat_dim = " + std::to_string(dim);
    break;
  case Kind::Rescale:
    s += ", scale = " + std::to_string(scale);
    break;
  case Kind::Permute: {
    s += ", pairs = [";
    for (size_t i = 0; i < pairs.size(); ++i)
      s += (i ? ", " : "") + std::to_string(pairs[i].first) + "->" +
           std::to_string(pairs[i].second);
    s += "]";
    break;
  }
  }
  if (outer != 1)
    s += ", outer = " + std::to_string(outer);
  if (kind == Kind::AllToAll && splitOuter != 1)
    s += ", split_outer = " + std::to_string(splitOuter);
  if (!sizes.empty())
    s += ", sizes = " + listStr(sizes);
  return s + ")";
}

int64_t Plan::numCollectives() const {
  return std::count_if(steps.begin(), steps.end(),
                       [](const Step &s) { return s.isCollective(); });
}

double lowerBoundBytes(Step::Kind kind, int64_t n, double bytes) {
  double f = static_cast<double>(n - 1) / n;
  switch (kind) {
  case Step::Kind::AllGather:
  case Step::Kind::ReduceScatter:
    return f * bytes;
  case Step::Kind::AllReduce:
    return 2 * f * bytes;
  case Step::Kind::AllToAll:
    return f * bytes / n;
  default:
    return 0;
  }
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

namespace {

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key &k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) +
           (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

void appendKey(Key &key, const Layout &l) {
  key.push_back(l.getMeshRank());
  for (const auto &p : l.getPartials())
    key.push_back(p ? static_cast<int64_t>(*p) : -1);
  for (const DimSharding &ds : l.getDims()) {
    key.push_back(ds.dim);
    key.push_back(static_cast<int64_t>(ds.splits.size()));
    for (const Split &s : ds.splits) {
      key.push_back(s.axis);
      key.push_back(s.stride);
    }
    key.push_back(static_cast<int64_t>(ds.sizes.size()));
    key.insert(key.end(), ds.sizes.begin(), ds.sizes.end());
  }
  key.push_back(-7); // terminator
}

Key layoutKey(const Layout &l) {
  Key key;
  key.reserve(8 + 2 * l.getMeshRank() + 4 * l.getDims().size());
  appendKey(key, l);
  return key;
}

/// Whether reductions `a` and `b` over different axes can be applied in
/// either order.
bool commute(ReduceOp a, ReduceOp b) {
  auto linear = [](ReduceOp op) {
    return op == ReduceOp::Sum || op == ReduceOp::Avg;
  };
  return a == b || (linear(a) && linear(b));
}

} // namespace

//===----------------------------------------------------------------------===//
// The search
//===----------------------------------------------------------------------===//

struct Planner::Impl {
  std::unordered_map<Key, Plan, KeyHash> cache;
  /// The error of every failed plan.
  std::unordered_map<Key, std::string, KeyHash> failures;
};

Planner::Planner(MeshSpec mesh) : mesh(std::move(mesh)), impl(new Impl) {}
Planner::~Planner() = default;
Planner::Planner(Planner &&) = default;
Planner &Planner::operator=(Planner &&) = default;

void Planner::clearCache() {
  impl->cache.clear();
  impl->failures.clear();
  cacheHits = cacheMisses = 0;
}

namespace {

/// A step found by the search, without its layouts (the search stores
/// each layout once, in its node).
struct Edge {
  Step step;
  Layout after;
  /// Steps that follow `step` within this edge (their layouts filled in).
  std::vector<Step> fused;
};

/// One planning problem: the expansion of states and their costs.
///
/// Edges are target-directed where a step creates structure: chunk,
/// reduce_scatter and the scatter half of all_to_all carve mesh axes only
/// into the dim, order and stride position the target gives them, and
/// partition_value / rescale only produce the target's Partial ops. Steps
/// that remove structure (all_gather, all_reduce) are generated for every
/// axis and run of splits. From any layout this reaches every valid target
/// (reduce, gather, then carve the target's splits major first).
class Search {
public:
  Search(const MeshSpec &mesh, const Layout &dst,
         const std::vector<int64_t> &shape, int64_t elementBytes)
      : mesh(mesh), dst(dst), shape(shape), elementBytes(elementBytes),
        meshShape(mesh.shape), coords(allMeshCoords(mesh.shape)) {
    // The cheapest any collective can be, for the A* bound.
    for (size_t a = 0; a < meshShape.size(); ++a) {
      AxisCost c = mesh.getCost(a);
      minLatency = a == 0 ? c.latencyUs : std::min(minLatency, c.latencyUs);
      maxBandwidth = std::max(maxBandwidth, c.bandwidthGBps);
    }
  }

  std::optional<Plan> run(const Layout &src, std::string &reason);

private:
  /// Counts `units` of work (one unit: one run of one rank's shard of a
  /// layout; a layout built and checked is kLayoutWork units) and says
  /// whether the budget is spent.
  bool charge(int64_t units) {
    work += units;
    return work > kMaxSearchWork;
  }
  bool exhausted() const { return work > kMaxSearchWork; }
  /// The work of one rank's shard of `l`: one unit, plus its runs (one per
  /// unsplit block major to the splits of a strided dim).
  int64_t shardWork(const Layout &l) const {
    int64_t units = 1;
    for (const DimSharding &ds : l.getDims())
      units += ds.splits.back().stride;
    return units;
  }
  int64_t work = 0;
  /// The work of building and checking one candidate layout, in units
  /// (measured: about 1 us, the time of 32 shard runs).
  static constexpr int64_t kLayoutWork = 32;
  /// The most relabelings tried per layout: all of them on meshes of up to
  /// 7 axes.
  static constexpr size_t kMaxRelabelings = 5040;

  struct Node {
    Layout layout;
    int64_t parent;
    Step via;
    std::vector<Step> fused;
  };

  /// Per-rank local bytes of `l` (one entry when every rank holds the same).
  const std::vector<double> &rankBytes(const Layout &l);
  double maxBytes(const Layout &l) {
    const std::vector<double> &b = rankBytes(l);
    return *std::max_element(b.begin(), b.end());
  }
  bool isEven(const Layout &l) { return rankBytes(l).size() == 1; }
  int64_t groupSize(const std::vector<int64_t> &axes) const {
    return mesh.groupSize(axes);
  }
  /// The alpha-beta cost of a step over `axes` moving `bytes` per rank.
  double stepCost(const std::vector<int64_t> &axes, double bytes) const {
    return mesh.groupCost(axes).timeUs(bytes);
  }
  bool dimDivides(const Layout &l, int64_t dim) const {
    const DimSharding *ds = l.getDim(dim);
    int64_t blocks = ds->splits.back().stride;
    for (const Split &s : ds->splits)
      blocks *= meshShape[s.axis];
    return shape[dim] % blocks == 0;
  }
  bool valid(const Layout &l) const {
    return l.verifyForShape(meshShape, shape).empty();
  }
  /// Carves the axes of `subset` into `base` where the target puts them
  /// (same dim, consecutive there, in the target's order, at the stride
  /// that leaves room for the target's axes major to them that `base` lacks
  /// on that dim). Calls `emit(after, dim, group, stride)` when valid.
  template <typename Fn>
  void carveAsTarget(const Layout &base, const std::vector<int64_t> &subset,
                     Fn emit);
  bool reducible(const Layout &l, int64_t axis) const;
  /// The steps out of `l`, one generator per family (each headed by an
  /// example). A generator that returns true ran out of the work budget:
  /// expand stops there.
  void expand(const Layout &l, std::vector<Edge> &out);
  void push(std::vector<Edge> &out, Step step, Layout after, double bytes);
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
  void addPermute(const Layout &l, std::vector<Edge> &out);
  void preparePermuteTargets(const Layout &src);
  /// A lower bound of the cost from `l` to the target (A*): a collective
  /// is needed unless only local steps remain, and every rank must receive
  /// the part of its target shard it lacks.
  double remainingCostBound(const Layout &l);
  std::vector<LocalShard> dstShards;
  double minLatency = 0, maxBandwidth = 0;
  /// Strides at which a single axis may be carved into `dim`: 1 and the
  /// strides `l` and the target have on the dim.
  std::vector<int64_t> blockBoundaries(const Layout &l, int64_t dim) const;

  struct PermuteTarget {
    Layout layout;
    double bytes;
    std::vector<LocalShard> shards;
  };
  std::vector<PermuteTarget> permuteTargets;

  const MeshSpec &mesh;
  const Layout &dst;
  const std::vector<int64_t> &shape;
  int64_t elementBytes;
  std::vector<int64_t> meshShape;
  std::vector<std::vector<int64_t>> coords;
  std::unordered_map<Key, std::vector<double>, KeyHash> bytesCache;
};

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
                        push(out, a2a, std::move(after),
                             static_cast<double>(n - 1) / n * inBytes);
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

} // namespace

std::string Planner::checkMesh(const MeshSpec &mesh) {
  if (mesh.shape.empty())
    return "the mesh has no axis";
  if (static_cast<int64_t>(mesh.shape.size()) > kMaxPlannerMeshRank)
    return "the mesh has " + std::to_string(mesh.shape.size()) +
           " axes; the planner handles at most " +
           std::to_string(kMaxPlannerMeshRank);
  if (!mesh.costs.empty() && mesh.costs.size() != mesh.shape.size())
    return "the mesh has " + std::to_string(mesh.costs.size()) +
           " axis costs for " + std::to_string(mesh.shape.size()) + " axes";
  int64_t devices = 1;
  for (size_t a = 0; a < mesh.shape.size(); ++a) {
    int64_t n = mesh.shape[a];
    if (n < 1)
      return "mesh axis " + std::to_string(a) + " has size " +
             std::to_string(n);
    if (n > kMaxPlannerDevices / devices)
      return "the mesh has more than " + std::to_string(kMaxPlannerDevices) +
             " devices, the most the planner enumerates";
    devices *= n;
  }
  return "";
}

const Plan *Planner::plan(const Layout &src, const Layout &dst,
                          const std::vector<int64_t> &shape,
                          int64_t elementBytes, std::string &error) {
  Key key;
  key.reserve(64);
  appendKey(key, src);
  appendKey(key, dst);
  key.insert(key.end(), shape.begin(), shape.end());
  key.push_back(elementBytes);
  auto it = impl->cache.find(key);
  if (it != impl->cache.end()) {
    ++cacheHits;
    return &it->second;
  }
  // Failures are cached too: a search that exceeds its limits is the most
  // expensive one, and propagation asks for the same reshards many times.
  auto failed = impl->failures.find(key);
  if (failed != impl->failures.end()) {
    ++cacheHits;
    error = failed->second;
    return nullptr;
  }
  ++cacheMisses;
  auto fail = [&](const std::string &reason) -> const Plan * {
    error = "Cannot reshard: " + src.str() + " -> " + dst.str() + ": " + reason;
    impl->failures.emplace(std::move(key), error);
    return nullptr;
  };
  if (std::string e = checkMesh(mesh); !e.empty())
    return fail(e);
  if (src.getMeshRank() != dst.getMeshRank())
    return fail("the layouts are on meshes of different rank");
  if (static_cast<size_t>(src.getMeshRank()) != mesh.shape.size())
    return fail("the layouts have " + std::to_string(src.getMeshRank()) +
                " placements but the mesh has " +
                std::to_string(mesh.shape.size()) + " axes");
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0)
      return fail("dim " + std::to_string(d) + " of the tensor has no static "
                  "size");
  if (std::string e = src.verifyForShape(mesh.shape, shape); !e.empty())
    return fail("the source layout is invalid: " + e);
  if (std::string e = dst.verifyForShape(mesh.shape, shape); !e.empty())
    return fail("the target layout is invalid: " + e);
  // Every rank's shard of a strided dim is enumerated block by block.
  for (const Layout *l : {&src, &dst})
    for (const DimSharding &ds : l->getDims())
      if (ds.splits.back().stride > kMaxSearchWork)
        return fail("dim " + std::to_string(ds.dim) + " has stride " +
                    std::to_string(ds.splits.back().stride) +
                    "; the planner enumerates at most " +
                    std::to_string(kMaxSearchWork) + " blocks");
  if (elementBytes <= 0)
    return fail("element size must be positive");
  Search search(mesh, dst, shape, elementBytes);
  std::string reason;
  std::optional<Plan> plan = search.run(src, reason);
  if (!plan)
    return fail(reason);
  return &impl->cache.emplace(std::move(key), std::move(*plan)).first->second;
}

} // namespace shardx
