//===- Layout.h - Canonical layouts and local shard extents ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The layout algebra of ShardX, free of any MLIR/LLVM dependency so that the
// runtime (which must not load MLIR) and the compiler share one definition of
// "which part of a global tensor does rank (i, j, ...) hold".
//
// A layout over a mesh of rank M is:
//  * one optional pending reduction (Partial op) per mesh axis;
//  * for each sharded tensor dim, the ordered list of splits applied to it,
//    major to minor. A split names a mesh axis and a stride: the number of
//    blocks of the dim, major to this split, that no mesh axis splits.
//  * optionally, for a sharded dim, an explicit list of shard sizes.
//
// Semantics of the splits of one dim of size D. Write the splits' strides
// s_1 <= s_2 <= ... <= s_k (each dividing the next) and the axis sizes
// n_1..n_k. The dim is viewed as the mixed-radix digits
//   [F_0, A_1, F_1, A_2, ..., A_k, rest]
// with free digits F_0 = s_1, F_i = s_{i+1} / s_i, and axis digits A_i of size
// n_i. A rank holds the elements whose axis digits equal its coordinates; its
// local order is the global order. When every stride is 1, sizes need not
// divide: the splits are applied one after another, major first, each with
// torch.chunk semantics (ceil-sized chunks, trailing chunks may be short or
// empty) on the piece the previous split left.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LAYOUT_LAYOUT_H
#define SHARDX_LAYOUT_LAYOUT_H

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardx {

/// The reduction a Partial placement is waiting for.
enum class ReduceOp : uint8_t { Sum, Avg, Max, Min, Prod };

/// The identity of `op` on elements of type T (avg sums, then divides).
template <typename T> T reduceIdentity(ReduceOp op) {
  switch (op) {
  case ReduceOp::Prod:
    return T(1);
  case ReduceOp::Max:
    return std::numeric_limits<T>::has_infinity
               ? -std::numeric_limits<T>::infinity()
               : std::numeric_limits<T>::lowest();
  case ReduceOp::Min:
    return std::numeric_limits<T>::has_infinity
               ? std::numeric_limits<T>::infinity()
               : std::numeric_limits<T>::max();
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    break;
  }
  return T(0);
}

/// `acc = acc op v` (avg sums; the caller divides). Max and min propagate
/// NaN, as the collectives do.
template <typename T> void reduceInto(T &acc, T v, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    acc += v;
    return;
  case ReduceOp::Prod:
    acc *= v;
    return;
  case ReduceOp::Max:
    acc = (v > acc || v != v) ? v : acc;
    return;
  case ReduceOp::Min:
    acc = (v < acc || v != v) ? v : acc;
    return;
  }
}

/// "sum", "avg", "max", "min", "prod".
const char *stringifyReduceOp(ReduceOp op);
/// Inverse of stringifyReduceOp; nullopt for an unknown name.
std::optional<ReduceOp> parseReduceOp(const std::string &name);

/// One DTensor placement: the layout of a tensor along one mesh axis.
struct Placement {
  enum class Kind : uint8_t { Replicate, Shard, StridedShard, Partial };
  Kind kind = Kind::Replicate;
  int64_t dim = -1;        // Shard / StridedShard
  int64_t splitFactor = 1; // StridedShard
  ReduceOp reduce = ReduceOp::Sum;

  static Placement replicate() { return {}; }
  static Placement shard(int64_t dim) { return {Kind::Shard, dim, 1, {}}; }
  static Placement stridedShard(int64_t dim, int64_t splitFactor) {
    return {Kind::StridedShard, dim, splitFactor, {}};
  }
  static Placement partial(ReduceOp op) { return {Kind::Partial, -1, 1, op}; }

  bool isShard() const {
    return kind == Kind::Shard || kind == Kind::StridedShard;
  }
  bool operator==(const Placement &o) const {
    return kind == o.kind && dim == o.dim && splitFactor == o.splitFactor &&
           (kind != Kind::Partial || reduce == o.reduce);
  }
  bool operator!=(const Placement &o) const { return !(*this == o); }
  /// "S(0)", "SS(0, 2)", "R", "P(sum)".
  std::string str() const;
};

/// One split of a tensor dim over a mesh axis (see the file comment).
struct Split {
  int64_t axis = 0;
  int64_t stride = 1;
  bool operator==(const Split &o) const {
    return axis == o.axis && stride == o.stride;
  }
  bool operator!=(const Split &o) const { return !(*this == o); }
};

/// The splits of one tensor dim, major to minor, and optional explicit shard
/// sizes (one per combined coordinate of the split axes, linearized major to
/// minor in split order).
struct DimSharding {
  int64_t dim = 0;
  std::vector<Split> splits;
  std::vector<int64_t> sizes;
  bool operator==(const DimSharding &o) const {
    return dim == o.dim && splits == o.splits && sizes == o.sizes;
  }
  bool operator!=(const DimSharding &o) const { return !(*this == o); }
};

/// The mesh axes `d`'s splits use, as a bit set (bit `a` for mesh axis `a`).
uint64_t axisMask(const DimSharding &d);

/// A half-open run [offset, offset + size) of global indices along one dim.
struct Interval {
  int64_t offset = 0;
  int64_t size = 0;
  bool operator==(const Interval &o) const {
    return offset == o.offset && size == o.size;
  }
};

/// The part of a global tensor one rank holds: per tensor dim, the runs of
/// global indices it holds, in local order (one run unless the dim is
/// strided), and the local size.
struct LocalShard {
  std::vector<std::vector<Interval>> runs;
  std::vector<int64_t> shape;
};

/// How a user spelled a layout, before canonicalization: one placement per
/// mesh axis plus optional per-dim explicit order, strides and sizes.
struct LayoutSpelling {
  std::vector<Placement> placements;
  std::map<int64_t, std::vector<int64_t>> order;
  std::map<int64_t, std::vector<int64_t>> strides;
  std::map<int64_t, std::vector<int64_t>> sizes;
};

/// A layout in canonical form. Two spellings of one distribution have equal
/// canonical forms.
class Layout {
public:
  Layout() = default;
  explicit Layout(int64_t meshRank) : partials(meshRank) {}

  /// Canonicalizes a spelling. `meshShape` may be empty when the spelling
  /// has no StridedShard (only SS needs axis sizes to be resolved). Returns
  /// nullopt and sets `error` when the spelling is malformed.
  static std::optional<Layout>
  fromSpelling(const LayoutSpelling &spelling,
               const std::vector<int64_t> &meshShape, std::string &error);
  /// Shorthand for fromSpelling with placements only.
  static std::optional<Layout>
  fromPlacements(const std::vector<Placement> &placements,
                 const std::vector<int64_t> &meshShape, std::string &error);

  int64_t getMeshRank() const { return static_cast<int64_t>(partials.size()); }
  const std::vector<DimSharding> &getDims() const { return dims; }
  const std::vector<std::optional<ReduceOp>> &getPartials() const {
    return partials;
  }
  /// The splits of `dim`, or nullptr when it is not sharded.
  const DimSharding *getDim(int64_t dim) const;
  /// The tensor dim mesh axis `axis` splits, or -1.
  int64_t getShardedDim(int64_t axis) const;
  bool isReplicated() const;
  bool hasPartial() const;

  /// Adds a split of `dim` as the new minor-most split (stride 1 unless
  /// given). Keeps the dims sorted. Does not validate.
  void addSplit(int64_t dim, Split split);
  void setPartial(int64_t axis, std::optional<ReduceOp> op) {
    partials[axis] = op;
  }
  void setSizes(int64_t dim, std::vector<int64_t> sizes);

  /// Checks the mesh-independent invariants (axes in range and used once,
  /// dims >= 0, strides positive and each dividing the next, no axis both
  /// sharding and partial). Returns an empty string when valid.
  std::string verify() const;
  /// verify() plus the checks that need the mesh shape.
  std::string verifyForMesh(const std::vector<int64_t> &meshShape) const;
  /// verifyForMesh() plus the checks that need the global tensor shape (dims
  /// in range, explicit sizes sum to the dim, strided dims divide).
  std::string verifyForShape(const std::vector<int64_t> &meshShape,
                             const std::vector<int64_t> &globalShape) const;

  /// The equivalent DTensor placements (StridedShard where the order or a
  /// stride needs it). Fails when the layout has a split order DTensor
  /// placements cannot express.
  std::optional<std::vector<Placement>>
  toPlacements(const std::vector<int64_t> &meshShape, std::string &error) const;

  /// Appends the runs of global indices of `dim` (of size `size`) that rank
  /// `coords` holds, in local order. Requires verifyForShape() to pass.
  void appendLocalRuns(const std::vector<int64_t> &meshShape, int64_t dim,
                       int64_t size, const std::vector<int64_t> &coords,
                       std::vector<Interval> &runs) const;
  /// The shard rank `coords` holds. Requires verifyForShape() to pass.
  LocalShard getLocalShard(const std::vector<int64_t> &meshShape,
                           const std::vector<int64_t> &globalShape,
                           const std::vector<int64_t> &coords) const;
  /// The number of distinct local shapes over all ranks is 1.
  bool isEvenFor(const std::vector<int64_t> &meshShape,
                 const std::vector<int64_t> &globalShape) const;

  /// The canonical spelling: S/R/P placements, plus order, strides and sizes
  /// maps only where they differ from the defaults.
  LayoutSpelling getCanonicalSpelling() const;
  /// "[S(0), R], order = {0 = [1, 0]}" (the body of the MLIR attribute).
  std::string str() const;

  /// The layout as a flat list of integers, for code and data that cannot
  /// link MLIR (compiled programs, the runtime): the mesh rank, the number
  /// of sharded dims, per sharded dim `dim, #splits, (axis, stride)...,
  /// #sizes, sizes...`, then per mesh axis its Partial (-1 for none, else
  /// the ReduceOp value).
  std::vector<int64_t> encode() const;
  /// encode()'s list appended to `out`. It is self-delimiting: layouts
  /// appended one after another read back one by one (the planner's cache
  /// keys).
  void encodeInto(std::vector<int64_t> &out) const;
  /// Inverse of encode(), reading from `data[pos]` and advancing `pos`.
  /// Returns nullopt (and sets `error`) for a malformed or invalid list.
  static std::optional<Layout> decode(const int64_t *data, size_t size,
                                      size_t &pos, std::string &error);

  bool operator==(const Layout &o) const {
    return dims == o.dims && partials == o.partials;
  }
  bool operator!=(const Layout &o) const { return !(*this == o); }

private:
  std::vector<DimSharding> dims; // sorted by dim; only sharded dims
  std::vector<std::optional<ReduceOp>> partials;
};

/// The most devices a mesh may have: rank ids fit a 32-bit int (MPI's and
/// the runtime's), and every product of axis sizes fits int64 with room to
/// spare. The `shardx.mesh` verifier and the artifact loader enforce it, so
/// code past them may multiply axis sizes without overflow checks.
constexpr int64_t kMaxMeshDevices = int64_t(1) << 31;

/// The number of devices of a mesh of shape `meshShape`, or nullopt when an
/// axis size is below 1 or the product exceeds kMaxMeshDevices (computed
/// without overflow).
std::optional<int64_t> countMeshDevices(const int64_t *sizes, size_t rank);
inline std::optional<int64_t>
countMeshDevices(const std::vector<int64_t> &meshShape) {
  return countMeshDevices(meshShape.data(), meshShape.size());
}

/// Linear index of `coords` within the group of mesh axes `axes` (major to
/// minor in the given order).
int64_t linearizeCoords(const std::vector<int64_t> &meshShape,
                        const std::vector<int64_t> &axes,
                        const std::vector<int64_t> &coords);
/// All rank coordinates of a mesh in row-major order.
std::vector<std::vector<int64_t>>
allMeshCoords(const std::vector<int64_t> &meshShape);
/// torch.chunk on [0, size): the `index`-th of `parts` chunks.
Interval chunkInterval(int64_t size, int64_t parts, int64_t index);

} // namespace shardx

#endif // SHARDX_LAYOUT_LAYOUT_H
