//===- Planner.h - Reshard planning as a shortest path ----------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Plans a reshard (a change of layout of one tensor) as the cheapest sequence
// of collectives and local steps. States are canonical layouts; each edge is
// one collective or local step over one mesh axis or a group of axes acting
// as one flattened axis; edge weights come from an alpha-beta cost model per
// mesh axis. An A* search (a lower bound of the cost left from each state)
// finds the cheapest plan; plans are cached by (source, target, shape,
// element size).
//
// Like the layout algebra, this library has no MLIR/LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_PLANNER_PLANNER_H
#define SHARDX_PLANNER_PLANNER_H

#include "shardx/Layout/Layout.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardx {

/// The alpha-beta cost of one mesh axis, or of a group of axes acting as
/// one flattened axis (MeshSpec::groupCost): a collective step in which each
/// rank moves `bytes` costs `latencyUs + bytes / (bandwidthGBps * 1e3)`
/// microseconds.
struct AxisCost {
  double latencyUs = 5.0;
  double bandwidthGBps = 300.0;

  /// Microseconds of one step in which each rank moves `bytes`.
  double timeUs(double bytes) const {
    return latencyUs + bytes / (bandwidthGBps * 1e3);
  }
};

/// A mesh as the planner sees it: axis sizes and per-axis costs (defaults
/// model one NVLink node). This is the one alpha-beta model of the
/// compiler: the planner, shardx-schedule-collectives' timeline and
/// shardx-bucket-collectives all price a collective by groupCost().
struct MeshSpec {
  std::vector<int64_t> shape;
  std::vector<AxisCost> costs; // empty: defaults for every axis

  AxisCost getCost(int64_t axis) const {
    return costs.empty() ? AxisCost() : costs[axis];
  }

  /// Whether every entry of `axes` is an axis of the mesh.
  template <typename Axes> bool hasAxes(const Axes &axes) const {
    for (int64_t a : axes)
      if (a < 0 || a >= static_cast<int64_t>(shape.size()))
        return false;
    return true;
  }

  /// The cost of a collective step over the group `axes` (axes of the mesh,
  /// any container of int64_t) acting as one flattened axis: it waits for
  /// the slowest axis's latency and moves data at the narrowest axis's
  /// bandwidth. A group of no axes costs {0, 0}.
  template <typename Axes> AxisCost groupCost(const Axes &axes) const {
    AxisCost group{0.0, 0.0};
    for (int64_t a : axes) {
      AxisCost c = getCost(a);
      group.latencyUs = std::max(group.latencyUs, c.latencyUs);
      group.bandwidthGBps =
          group.bandwidthGBps == 0
              ? c.bandwidthGBps
              : std::min(group.bandwidthGBps, c.bandwidthGBps);
    }
    return group;
  }

  /// The number of ranks in the group `axes`.
  template <typename Axes> int64_t groupSize(const Axes &axes) const {
    int64_t n = 1;
    for (int64_t a : axes)
      n *= shape[a];
    return n;
  }
};

/// One step of a plan. Group steps act on the axes `axes` as one flattened
/// axis (major first). Dims are viewed as (outer, inner): the step acts on
/// `inner`, once per `outer` block (strided layouts).
struct Step {
  enum class Kind : uint8_t {
    AllGather,      // concatenate the group's pieces along `dim`
    ReduceScatter,  // reduce with `reduce`, keep this member's piece of `dim`
    AllReduce,      // reduce with `reduce`
    AllToAll,       // split along `splitDim`, exchange, concat along `dim`
    Chunk,          // keep this member's piece of `dim` (R -> S)
    PartitionValue, // R -> P(reduce): member 0 keeps the value
    Rescale,        // multiply the local terms by `scale` (P(sum) <-> P(avg))
    Permute,        // every rank receives the shard of rank `pairs[i].first`
  };
  Kind kind = Kind::AllGather;
  std::vector<int64_t> axes;
  int64_t dim = -1;
  int64_t outer = 1;
  int64_t splitDim = -1;  // AllToAll
  int64_t splitOuter = 1; // AllToAll
  ReduceOp reduce = ReduceOp::Sum;
  double scale = 1.0;
  /// Chunk / ReduceScatter / AllToAll into an explicit-sizes dim: the size
  /// of each group member's piece.
  std::vector<int64_t> sizes;
  /// Permute: (source, target) linear ranks over `axes`.
  std::vector<std::pair<int64_t, int64_t>> pairs;

  Layout before, after;
  /// The most bytes any rank receives in this step.
  double bytesPerRank = 0;
  /// Alpha-beta cost in microseconds.
  double cost = 0;

  bool isCollective() const {
    return kind != Kind::Chunk && kind != Kind::PartitionValue &&
           kind != Kind::Rescale;
  }
  /// "all_gather(axes = [1], dim = 0)".
  std::string str() const;
};

const char *stringifyStepKind(Step::Kind kind);

struct Plan {
  std::vector<Step> steps;
  double cost = 0;
  double bytesPerRank = 0; // summed over steps
  int64_t numCollectives() const;
};

/// The limits of planning. The search computes every rank's shard of the
/// layouts it visits and enumerates subsets and relabelings of mesh axes:
/// it plans on meshes of at most kMaxPlannerDevices devices and
/// kMaxPlannerMeshRank axes, on strided dims of at most kMaxSearchWork
/// blocks, and one search stops after kMaxSearchWork units of work (one
/// unit: one run of one rank's shard of a layout, or one step or
/// relabeling considered; about 30 ns, so about 2 s in all) or 100000
/// layouts. Every plan between S/R/P layouts on a 16x16x16 mesh stays
/// within them. Beyond them plan() fails with "Cannot reshard: ...".
constexpr int64_t kMaxPlannerDevices = int64_t(1) << 16;
constexpr int64_t kMaxPlannerMeshRank = 16;
constexpr int64_t kMaxSearchWork = int64_t(1) << 26;

/// Plans reshards on one mesh. Thread-compatible (not thread-safe): use one
/// planner per thread.
class Planner {
public:
  explicit Planner(MeshSpec mesh);
  ~Planner();
  Planner(Planner &&);
  Planner &operator=(Planner &&);

  /// The cheapest plan from `src` to `dst` for a tensor of `shape` with
  /// elements of `elementBytes`, or null with `error` set to
  /// "Cannot reshard: <src> -> <dst>: <reason>". The plan lives in the
  /// planner's cache until clearCache() or the planner's destruction;
  /// failures are cached as well.
  const Plan *plan(const Layout &src, const Layout &dst,
                   const std::vector<int64_t> &shape, int64_t elementBytes,
                   std::string &error);

  /// Why the planner cannot plan on `mesh` (an axis of size below 1, more
  /// axes or devices than it handles), or the empty string.
  static std::string checkMesh(const MeshSpec &mesh);

  const MeshSpec &getMesh() const { return mesh; }
  int64_t getCacheHits() const { return cacheHits; }
  int64_t getCacheMisses() const { return cacheMisses; }
  void clearCache();

private:
  struct Impl;
  MeshSpec mesh;
  std::unique_ptr<Impl> impl;
  int64_t cacheHits = 0, cacheMisses = 0;
};

/// The per-rank byte lower bound of a single collective of `kind` over a
/// group of `n` ranks moving a tensor of `bytes` total (the size the
/// nccl-tests convention uses: the gathered / unscattered size).
double lowerBoundBytes(Step::Kind kind, int64_t n, double bytes);

} // namespace shardx

#endif // SHARDX_PLANNER_PLANNER_H
