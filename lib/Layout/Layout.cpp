//===- Layout.cpp - Canonical layouts and local shard extents -------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/Layout.h"

#include "Digits.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <sstream>

namespace shardx {

using detail::applySplit;
using detail::Digit;
using detail::digitsToSplits;
using detail::splitsToDigits;

const char *stringifyReduceOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Avg:
    return "avg";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  case ReduceOp::Prod:
    return "prod";
  }
  return "?";
}

std::optional<ReduceOp> parseReduceOp(const std::string &name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                      ReduceOp::Min, ReduceOp::Prod})
    if (name == stringifyReduceOp(op))
      return op;
  return std::nullopt;
}

std::string Placement::str() const {
  switch (kind) {
  case Kind::Replicate:
    return "R";
  case Kind::Shard:
    return "S(" + std::to_string(dim) + ")";
  case Kind::StridedShard:
    return "SS(" + std::to_string(dim) + ", " + std::to_string(splitFactor) +
           ")";
  case Kind::Partial:
    return std::string("P(") + stringifyReduceOp(reduce) + ")";
  }
  return "?";
}

std::optional<int64_t> countMeshDevices(const int64_t *sizes, size_t rank) {
  int64_t devices = 1;
  for (size_t a = 0; a < rank; ++a) {
    // devices <= kMaxMeshDevices and sizes[a] <= kMaxMeshDevices here, so
    // the product fits int64.
    if (sizes[a] < 1 || sizes[a] > kMaxMeshDevices)
      return std::nullopt;
    devices *= sizes[a];
    if (devices > kMaxMeshDevices)
      return std::nullopt;
  }
  return devices;
}

int64_t linearizeCoords(const std::vector<int64_t> &meshShape,
                        const std::vector<int64_t> &axes,
                        const std::vector<int64_t> &coords) {
  int64_t linear = 0;
  for (int64_t axis : axes)
    linear = linear * meshShape[axis] + coords[axis];
  return linear;
}

std::vector<std::vector<int64_t>>
allMeshCoords(const std::vector<int64_t> &meshShape) {
  std::vector<std::vector<int64_t>> result;
  std::vector<int64_t> coords(meshShape.size(), 0);
  int64_t total = 1;
  for (int64_t n : meshShape)
    total *= n;
  for (int64_t i = 0; i < total; ++i) {
    result.push_back(coords);
    for (int64_t a = static_cast<int64_t>(meshShape.size()) - 1; a >= 0; --a) {
      if (++coords[a] < meshShape[a])
        break;
      coords[a] = 0;
    }
  }
  return result;
}

uint64_t axisMask(const DimSharding &d) {
  uint64_t mask = 0;
  for (const Split &s : d.splits)
    mask |= uint64_t(1) << s.axis;
  return mask;
}

Interval chunkInterval(int64_t size, int64_t parts, int64_t index) {
  int64_t chunk = (size + parts - 1) / parts;
  int64_t begin = std::min(index * chunk, size);
  int64_t end = std::min(begin + chunk, size);
  return {begin, end - begin};
}

namespace {
std::string listStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
} // namespace

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

std::optional<Layout>
Layout::fromPlacements(const std::vector<Placement> &placements,
                       const std::vector<int64_t> &meshShape,
                       std::string &error) {
  LayoutSpelling spelling;
  spelling.placements = placements;
  return fromSpelling(spelling, meshShape, error);
}

/// The splits of a dim that SS placements shard: `axes` (mesh axis, split
/// factor) in mesh order, resolved on `meshShape`.
static bool
spellStridedSplits(const std::vector<std::pair<int64_t, int64_t>> &axes,
                   const std::vector<int64_t> &meshShape, DimSharding &ds,
                   std::string &error) {
  std::vector<Digit> digits = {{Digit::Kind::Rest, 0}};
  for (auto [axis, sf] : axes)
    if (!applySplit(digits, {axis}, meshShape[axis], sf, error))
      return false;
  ds.splits = digitsToSplits(digits);
  return true;
}

/// The splits of dim `dim`, which S placements on `axes` shard, in the
/// spelling's explicit `order` and `strides` (mesh order and stride 1 when
/// not given).
static bool
spellExplicitSplits(int64_t dim,
                    const std::vector<std::pair<int64_t, int64_t>> &axes,
                    const LayoutSpelling &spelling, DimSharding &ds,
                    std::string &error) {
  std::vector<int64_t> order;
  for (auto &a : axes)
    order.push_back(a.first);
  auto orderIt = spelling.order.find(dim);
  if (orderIt != spelling.order.end()) {
    std::vector<int64_t> given = orderIt->second;
    for (size_t i = 0; i < given.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (given[i] == given[j]) {
          error = "order for dim " + std::to_string(dim) +
                  " lists mesh axis " + std::to_string(given[i]) + " twice";
          return false;
        }
    std::vector<int64_t> sortedGiven = given;
    std::sort(sortedGiven.begin(), sortedGiven.end());
    if (sortedGiven != order) {
      error = "order for dim " + std::to_string(dim) + " is " +
              listStr(given) + " but the placements shard it over " +
              listStr(order);
      return false;
    }
    order = given;
  }
  std::vector<int64_t> strides(order.size(), 1);
  auto stridesIt = spelling.strides.find(dim);
  if (stridesIt != spelling.strides.end()) {
    if (stridesIt->second.size() != order.size()) {
      error = "strides for dim " + std::to_string(dim) + " has " +
              std::to_string(stridesIt->second.size()) +
              " entries but the dim has " + std::to_string(order.size()) +
              " splits";
      return false;
    }
    strides = stridesIt->second;
  }
  for (size_t i = 0; i < order.size(); ++i)
    ds.splits.push_back({order[i], strides[i]});
  return true;
}

std::optional<Layout>
Layout::fromSpelling(const LayoutSpelling &spelling,
                     const std::vector<int64_t> &meshShape,
                     std::string &error) {
  int64_t meshRank = static_cast<int64_t>(spelling.placements.size());
  if (!meshShape.empty() &&
      static_cast<int64_t>(meshShape.size()) != meshRank) {
    error = "layout has " + std::to_string(meshRank) +
            " placements but the mesh has " + std::to_string(meshShape.size()) +
            " axes";
    return std::nullopt;
  }
  Layout layout(meshRank);
  // Per dim: the axes that shard it, in mesh order, with their split factor.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> shardAxes;
  for (int64_t axis = 0; axis < meshRank; ++axis) {
    const Placement &p = spelling.placements[axis];
    if (p.kind == Placement::Kind::Partial) {
      layout.partials[axis] = p.reduce;
      continue;
    }
    if (!p.isShard())
      continue;
    if (p.dim < 0) {
      error = "placement " + p.str() + " on mesh axis " + std::to_string(axis) +
              " shards a negative dim";
      return std::nullopt;
    }
    if (p.splitFactor < 1) {
      error = "placement " + p.str() + " on mesh axis " + std::to_string(axis) +
              " has a split factor below 1";
      return std::nullopt;
    }
    shardAxes[p.dim].push_back({axis, p.splitFactor});
  }
  auto checkKeys = [&](const std::map<int64_t, std::vector<int64_t>> &m,
                       const char *what) {
    for (const auto &entry : m)
      if (!shardAxes.count(entry.first)) {
        error = std::string(what) + " given for dim " +
                std::to_string(entry.first) + ", which no mesh axis shards";
        return false;
      }
    return true;
  };
  if (!checkKeys(spelling.order, "order") ||
      !checkKeys(spelling.strides, "strides") ||
      !checkKeys(spelling.sizes, "sizes"))
    return std::nullopt;

  for (const auto &[dim, axes] : shardAxes) {
    DimSharding ds;
    ds.dim = dim;
    bool strided = std::any_of(axes.begin(), axes.end(),
                               [](auto &a) { return a.second != 1; });
    auto orderIt = spelling.order.find(dim);
    auto stridesIt = spelling.strides.find(dim);
    if (strided) {
      if (orderIt != spelling.order.end() ||
          stridesIt != spelling.strides.end()) {
        error = "dim " + std::to_string(dim) +
                " is spelled both with SS and with an explicit order or "
                "strides; use one spelling";
        return std::nullopt;
      }
      if (meshShape.empty()) {
        error = "SS on dim " + std::to_string(dim) +
                " needs the mesh shape to be resolved";
        return std::nullopt;
      }
      if (!spellStridedSplits(axes, meshShape, ds, error))
        return std::nullopt;
    } else if (!spellExplicitSplits(dim, axes, spelling, ds, error)) {
      return std::nullopt;
    }
    auto sizesIt = spelling.sizes.find(dim);
    if (sizesIt != spelling.sizes.end())
      ds.sizes = sizesIt->second;
    layout.dims.push_back(std::move(ds));
  }
  error = layout.verify();
  if (error.empty() && !meshShape.empty())
    error = layout.verifyForMesh(meshShape);
  if (!error.empty())
    return std::nullopt;
  return layout;
}

const DimSharding *Layout::getDim(int64_t dim) const {
  for (const DimSharding &ds : dims)
    if (ds.dim == dim)
      return &ds;
  return nullptr;
}

int64_t Layout::getShardedDim(int64_t axis) const {
  for (const DimSharding &ds : dims)
    for (const Split &s : ds.splits)
      if (s.axis == axis)
        return ds.dim;
  return -1;
}

bool Layout::isReplicated() const { return dims.empty() && !hasPartial(); }

bool Layout::hasPartial() const {
  return std::any_of(partials.begin(), partials.end(),
                     [](auto &p) { return p.has_value(); });
}

void Layout::addSplit(int64_t dim, Split split) {
  auto it = std::lower_bound(
      dims.begin(), dims.end(), dim,
      [](const DimSharding &ds, int64_t d) { return ds.dim < d; });
  if (it == dims.end() || it->dim != dim)
    it = dims.insert(it, DimSharding{dim, {}, {}});
  it->splits.push_back(split);
}

void Layout::setSizes(int64_t dim, std::vector<int64_t> sizes) {
  for (DimSharding &ds : dims)
    if (ds.dim == dim)
      ds.sizes = std::move(sizes);
}

std::string Layout::verify() const {
  int64_t meshRank = getMeshRank();
  std::vector<int> uses(meshRank, 0);
  int64_t prevDim = -1;
  for (const DimSharding &ds : dims) {
    auto where = [&] { return "dim " + std::to_string(ds.dim); };
    if (ds.dim < 0)
      return "sharded dim " + std::to_string(ds.dim) + " is negative";
    if (ds.dim <= prevDim)
      return "dims are not sorted and unique at " + where();
    prevDim = ds.dim;
    if (ds.splits.empty())
      return where() + " has no split";
    int64_t prevStride = 1;
    for (const Split &s : ds.splits) {
      if (s.axis < 0 || s.axis >= meshRank)
        return where() + " is split over mesh axis " + std::to_string(s.axis) +
               ", out of range for a mesh of rank " + std::to_string(meshRank);
      if (++uses[s.axis] > 1)
        return "mesh axis " + std::to_string(s.axis) + " is used twice";
      if (partials[s.axis])
        return "mesh axis " + std::to_string(s.axis) +
               " is both Partial and sharding " + where();
      if (s.stride < 1)
        return where() + " has a stride below 1";
      if (s.stride % prevStride != 0)
        return where() + " has stride " + std::to_string(s.stride) +
               " that is not a multiple of the stride " +
               std::to_string(prevStride) + " of the split before it";
      prevStride = s.stride;
    }
    if (!ds.sizes.empty()) {
      if (prevStride != 1)
        return where() + " has both strides and explicit sizes";
      for (int64_t size : ds.sizes)
        if (size < 0)
          return where() + " has a negative shard size";
    }
  }
  return "";
}

std::string Layout::verifyForMesh(const std::vector<int64_t> &meshShape) const {
  if (std::string e = verify(); !e.empty())
    return e;
  if (static_cast<int64_t>(meshShape.size()) != getMeshRank())
    return "layout has " + std::to_string(getMeshRank()) +
           " placements but the mesh has " + std::to_string(meshShape.size()) +
           " axes";
  for (const DimSharding &ds : dims) {
    if (ds.sizes.empty())
      continue;
    int64_t shards = 1;
    for (const Split &s : ds.splits)
      shards *= meshShape[s.axis];
    if (static_cast<int64_t>(ds.sizes.size()) != shards)
      return "sizes for dim " + std::to_string(ds.dim) + " has " +
             std::to_string(ds.sizes.size()) + " entries but the dim has " +
             std::to_string(shards) + " shards";
  }
  return "";
}

std::string
Layout::verifyForShape(const std::vector<int64_t> &meshShape,
                       const std::vector<int64_t> &globalShape) const {
  if (std::string e = verifyForMesh(meshShape); !e.empty())
    return e;
  int64_t rank = static_cast<int64_t>(globalShape.size());
  for (const DimSharding &ds : dims) {
    auto where = [&] { return "dim " + std::to_string(ds.dim); };
    if (ds.dim >= rank)
      return "shard dim " + std::to_string(ds.dim) +
             " is out of range for a tensor of rank " + std::to_string(rank);
    int64_t size = globalShape[ds.dim];
    if (size < 0)
      continue; // dynamic: checked when the size is known
    if (!ds.sizes.empty()) {
      int64_t sum = std::accumulate(ds.sizes.begin(), ds.sizes.end(),
                                    static_cast<int64_t>(0));
      if (sum != size)
        return "sizes for " + where() + " sum to " + std::to_string(sum) +
               " but the dim has size " + std::to_string(size);
      continue;
    }
    int64_t lastStride = ds.splits.back().stride;
    if (lastStride == 1)
      continue;
    int64_t blocks = lastStride;
    for (const Split &s : ds.splits)
      blocks *= meshShape[s.axis];
    if (size % blocks != 0)
      return where() + " of size " + std::to_string(size) +
             " is not a multiple of the " + std::to_string(blocks) +
             " blocks its strided splits need";
  }
  return "";
}

std::optional<std::vector<Placement>>
Layout::toPlacements(const std::vector<int64_t> &meshShape,
                     std::string &error) const {
  if ((error = verifyForMesh(meshShape)) != "")
    return std::nullopt;
  std::vector<Placement> placements(getMeshRank());
  for (int64_t axis = 0; axis < getMeshRank(); ++axis)
    if (partials[axis])
      placements[axis] = Placement::partial(*partials[axis]);
  for (const DimSharding &ds : dims) {
    if (!ds.sizes.empty()) {
      error = "dim " + std::to_string(ds.dim) +
              " has explicit shard sizes, which DTensor placements cannot "
              "express";
      return std::nullopt;
    }
    std::vector<Digit> digits = splitsToDigits(ds.splits);
    std::vector<int64_t> axes;
    for (const Split &s : ds.splits)
      axes.push_back(s.axis);
    std::sort(axes.begin(), axes.end());
    for (int64_t axis : axes) {
      // DTensor applies placements in mesh order: the split factor is the
      // size of everything major to this axis in the piece still local.
      int64_t sf = 1;
      size_t i = 0;
      for (; digits[i].kind != Digit::Kind::Axis || digits[i].value != axis;
           ++i)
        sf *= digits[i].kind == Digit::Kind::Free ? digits[i].value
                                                  : meshShape[digits[i].value];
      digits.erase(digits.begin() + i);
      placements[axis] = sf == 1 ? Placement::shard(ds.dim)
                                 : Placement::stridedShard(ds.dim, sf);
    }
  }
  return placements;
}

LayoutSpelling Layout::getCanonicalSpelling() const {
  LayoutSpelling spelling;
  spelling.placements.resize(getMeshRank());
  for (int64_t axis = 0; axis < getMeshRank(); ++axis)
    if (partials[axis])
      spelling.placements[axis] = Placement::partial(*partials[axis]);
  for (const DimSharding &ds : dims) {
    std::vector<int64_t> axes, strides;
    for (const Split &s : ds.splits) {
      spelling.placements[s.axis] = Placement::shard(ds.dim);
      axes.push_back(s.axis);
      strides.push_back(s.stride);
    }
    if (!std::is_sorted(axes.begin(), axes.end()))
      spelling.order[ds.dim] = axes;
    if (std::any_of(strides.begin(), strides.end(),
                    [](int64_t s) { return s != 1; }))
      spelling.strides[ds.dim] = strides;
    if (!ds.sizes.empty())
      spelling.sizes[ds.dim] = ds.sizes;
  }
  return spelling;
}

std::string Layout::str() const {
  LayoutSpelling spelling = getCanonicalSpelling();
  std::string s = "[";
  for (size_t i = 0; i < spelling.placements.size(); ++i)
    s += (i ? ", " : "") + spelling.placements[i].str();
  s += "]";
  auto printMap = [&](const char *name,
                      const std::map<int64_t, std::vector<int64_t>> &m) {
    if (m.empty())
      return;
    s += std::string(", ") + name + " = {";
    bool first = true;
    for (const auto &[dim, values] : m) {
      s += (first ? "" : ", ") + std::to_string(dim) + " = " + listStr(values);
      first = false;
    }
    s += "}";
  };
  printMap("order", spelling.order);
  printMap("strides", spelling.strides);
  printMap("sizes", spelling.sizes);
  return s;
}

std::vector<int64_t> Layout::encode() const {
  std::vector<int64_t> out;
  encodeInto(out);
  return out;
}

void Layout::encodeInto(std::vector<int64_t> &out) const {
  out.push_back(getMeshRank());
  out.push_back(static_cast<int64_t>(dims.size()));
  for (const DimSharding &d : dims) {
    out.push_back(d.dim);
    out.push_back(static_cast<int64_t>(d.splits.size()));
    for (const Split &s : d.splits) {
      out.push_back(s.axis);
      out.push_back(s.stride);
    }
    out.push_back(static_cast<int64_t>(d.sizes.size()));
    out.insert(out.end(), d.sizes.begin(), d.sizes.end());
  }
  for (const std::optional<ReduceOp> &p : partials)
    out.push_back(p ? static_cast<int64_t>(*p) : -1);
}

std::optional<Layout> Layout::decode(const int64_t *data, size_t size,
                                     size_t &pos, std::string &error) {
  auto next = [&](int64_t &v) {
    if (pos >= size)
      return false;
    v = data[pos++];
    return true;
  };
  auto fail = [&](const char *what) -> std::optional<Layout> {
    error = std::string("malformed layout encoding: ") + what;
    return std::nullopt;
  };
  int64_t meshRank, numDims;
  if (!next(meshRank) || !next(numDims) || meshRank < 0 || numDims < 0 ||
      meshRank > 64 || numDims > 64)
    return fail("bad header");
  Layout layout(meshRank);
  for (int64_t i = 0; i < numDims; ++i) {
    DimSharding d;
    int64_t numSplits, numSizes;
    if (!next(d.dim) || !next(numSplits) || numSplits < 0 ||
        numSplits > meshRank)
      return fail("bad dim");
    for (int64_t j = 0; j < numSplits; ++j) {
      Split s;
      if (!next(s.axis) || !next(s.stride))
        return fail("bad split");
      d.splits.push_back(s);
    }
    if (!next(numSizes) || numSizes < 0 || numSizes > int64_t(size))
      return fail("bad sizes");
    for (int64_t j = 0; j < numSizes; ++j) {
      int64_t v;
      if (!next(v))
        return fail("bad sizes");
      d.sizes.push_back(v);
    }
    layout.dims.push_back(std::move(d));
  }
  for (int64_t a = 0; a < meshRank; ++a) {
    int64_t p;
    if (!next(p) || p < -1 || p > static_cast<int64_t>(ReduceOp::Prod))
      return fail("bad partial");
    if (p >= 0)
      layout.partials[a] = static_cast<ReduceOp>(p);
  }
  error = layout.verify();
  if (!error.empty())
    return std::nullopt;
  return layout;
}

} // namespace shardx
