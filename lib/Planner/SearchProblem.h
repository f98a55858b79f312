//===- SearchProblem.h - One reshard problem and its budget -----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// What every part of the planner's search shares: the layout keys of its
// maps, the problem (mesh, target layout, tensor) with the queries about a
// layout that need nothing else, and the budget of work one search may spend.
// Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_PLANNER_SEARCHPROBLEM_H
#define SHARDX_LIB_PLANNER_SEARCHPROBLEM_H

#include "shardx/Planner/Planner.h"

#include <algorithm>
#include <vector>

namespace shardx {
namespace planner {

//===----------------------------------------------------------------------===//
// Layout keys
//===----------------------------------------------------------------------===//

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

/// A cache key for `l`: its encoding (self-delimiting, so that keys of
/// several layouts can follow each other).
inline void appendKey(Key &key, const Layout &l) { l.encodeInto(key); }

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

//===----------------------------------------------------------------------===//
// Problem
//===----------------------------------------------------------------------===//

/// One reshard problem: the mesh, the target layout and the tensor, and the
/// questions about a layout that only these answer. Read-only during a
/// search; the references outlive it (Planner::plan's arguments).
struct Problem {
  Problem(const MeshSpec &mesh, const Layout &dst,
          const std::vector<int64_t> &shape, int64_t elementBytes)
      : mesh(mesh), dst(dst), shape(shape), elementBytes(elementBytes),
        meshShape(mesh.shape), coords(allMeshCoords(mesh.shape)) {}

  const MeshSpec &mesh;
  const Layout &dst;
  const std::vector<int64_t> &shape;
  int64_t elementBytes;
  std::vector<int64_t> meshShape;
  /// Every rank's mesh coordinates, in rank order.
  std::vector<std::vector<int64_t>> coords;

  int64_t groupSize(const std::vector<int64_t> &axes) const {
    return mesh.groupSize(axes);
  }
  /// The alpha-beta cost of a step over `axes` moving `bytes` per rank.
  double stepCost(const std::vector<int64_t> &axes, double bytes) const {
    return mesh.groupCost(axes).timeUs(bytes);
  }
  /// Whether `dim` of the tensor divides into the blocks `l` cuts it into.
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
  /// Strides at which a single axis may be carved into `dim`: 1 and the
  /// strides `l` and the target have on the dim.
  std::vector<int64_t> blockBoundaries(const Layout &l, int64_t dim) const {
    std::vector<int64_t> strides = {1};
    for (const Layout *x : {&l, &dst})
      if (const DimSharding *ds = x->getDim(dim))
        for (const Split &s : ds->splits)
          strides.push_back(s.stride);
    std::sort(strides.begin(), strides.end());
    strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
    return strides;
  }
};

//===----------------------------------------------------------------------===//
// WorkBudget
//===----------------------------------------------------------------------===//

/// The work one search may spend (kMaxSearchWork units; one unit: one run
/// of one rank's shard of a layout, or one step or relabeling considered).
class WorkBudget {
public:
  /// The work of building and checking one candidate layout, in units
  /// (measured: about 1 us, the time of 32 shard runs).
  static constexpr int64_t kLayoutWork = 32;

  /// The work of one rank's shard of `l`: one unit, plus its runs (one per
  /// unsplit block major to the splits of a strided dim).
  static int64_t shardWork(const Layout &l) {
    int64_t units = 1;
    for (const DimSharding &ds : l.getDims())
      units += ds.splits.back().stride;
    return units;
  }

  /// Counts `units` of work and says whether the budget is spent.
  bool charge(int64_t units) {
    work += units;
    return work > kMaxSearchWork;
  }
  bool exhausted() const { return work > kMaxSearchWork; }

private:
  int64_t work = 0;
};

} // namespace planner
} // namespace shardx

#endif // SHARDX_LIB_PLANNER_SEARCHPROBLEM_H
