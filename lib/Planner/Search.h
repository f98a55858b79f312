//===- Search.h - The planner's A* search (private) -----------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The state space of one reshard problem: layout keys, the edges out of a
// layout (one generator per collective family, SearchSteps.cpp) and the A*
// search over them (Search.cpp). Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_PLANNER_SEARCH_H
#define SHARDX_LIB_PLANNER_SEARCH_H

#include "shardx/Planner/Planner.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace shardx {
namespace planner {

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

inline void appendKey(Key &key, const Layout &l) {
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

inline Key layoutKey(const Layout &l) {
  Key key;
  key.reserve(8 + 2 * l.getMeshRank() + 4 * l.getDims().size());
  appendKey(key, l);
  return key;
}

/// Whether reductions `a` and `b` over different axes can be applied in
/// either order.
inline bool commute(ReduceOp a, ReduceOp b) {
  auto linear = [](ReduceOp op) {
    return op == ReduceOp::Sum || op == ReduceOp::Avg;
  };
  return a == b || (linear(a) && linear(b));
}

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
  /// The most bytes any rank lacks of its shard of `to` when it holds its
  /// shard of `from`: what it receives in one step from `from` to `to`.
  double maxLackBytes(const Layout &from, const Layout &to);
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

} // namespace planner
} // namespace shardx

#endif // SHARDX_LIB_PLANNER_SEARCH_H
