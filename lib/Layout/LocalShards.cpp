//===- LocalShards.cpp - Every rank's local shard of a layout -------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The extents a rank holds of each dim of a layout: the runs of a strided
// dim, the local shard of a rank, and whether all ranks hold equal shapes.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/Layout.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace shardx {

void Layout::appendLocalRuns(const std::vector<int64_t> &meshShape, int64_t dim,
                             int64_t size, const std::vector<int64_t> &coords,
                             std::vector<Interval> &runs) const {
  const DimSharding *ds = getDim(dim);
  if (!ds) {
    runs.push_back({0, size});
  } else if (!ds->sizes.empty()) {
    int64_t index = 0;
    for (const Split &s : ds->splits)
      index = index * meshShape[s.axis] + coords[s.axis];
    int64_t offset = std::accumulate(
        ds->sizes.begin(), ds->sizes.begin() + index, static_cast<int64_t>(0));
    runs.push_back({offset, ds->sizes[index]});
  } else if (ds->splits.back().stride == 1) {
    // Nested torch.chunk, major split first.
    Interval piece{0, size};
    for (const Split &s : ds->splits) {
      Interval sub =
          chunkInterval(piece.size, meshShape[s.axis], coords[s.axis]);
      piece = {piece.offset + sub.offset, sub.size};
    }
    runs.push_back(piece);
  } else {
    // Mixed radix [F0, A1, F1, ..., Ak, rest]: enumerate the free digits
    // major to the last axis; each combination is one run of `rest`. Fixed
    // arrays: this runs in the planner's inner loop.
    constexpr size_t kMaxDigits = 64;
    size_t k = ds->splits.size();
    assert(2 * k <= kMaxDigits && "more splits than mesh axes");
    int64_t freeSize[kMaxDigits], freePlace[kMaxDigits], value[kMaxDigits];
    int64_t blocks = ds->splits.back().stride;
    for (const Split &s : ds->splits)
      blocks *= meshShape[s.axis];
    int64_t rest = size / blocks;
    // Place values from minor to major: rest, A_k, F_{k-1}, A_{k-1}, ...
    int64_t place = rest, base = 0;
    size_t numFree = 0;
    for (size_t i = k; i-- > 0;) {
      const Split &s = ds->splits[i];
      base += coords[s.axis] * place;
      place *= meshShape[s.axis];
      int64_t free = i == 0 ? s.stride : s.stride / ds->splits[i - 1].stride;
      if (free != 1) {
        freeSize[numFree] = free;
        freePlace[numFree] = place;
        ++numFree;
        place *= free;
      }
    }
    // freeSize/freePlace are minor first; enumerate major first.
    std::reverse(freeSize, freeSize + numFree);
    std::reverse(freePlace, freePlace + numFree);
    std::fill(value, value + numFree, 0);
    size_t first = runs.size();
    while (true) {
      int64_t offset = base;
      for (size_t f = 0; f < numFree; ++f)
        offset += value[f] * freePlace[f];
      if (runs.size() > first &&
          runs.back().offset + runs.back().size == offset)
        runs.back().size += rest;
      else
        runs.push_back({offset, rest});
      size_t f = numFree;
      for (; f-- > 0;) {
        if (++value[f] < freeSize[f])
          break;
        value[f] = 0;
      }
      if (f == static_cast<size_t>(-1))
        break;
    }
  }
}

LocalShard Layout::getLocalShard(const std::vector<int64_t> &meshShape,
                                 const std::vector<int64_t> &globalShape,
                                 const std::vector<int64_t> &coords) const {
  assert(verifyForShape(meshShape, globalShape).empty());
  LocalShard shard;
  for (int64_t d = 0, e = static_cast<int64_t>(globalShape.size()); d < e;
       ++d) {
    std::vector<Interval> runs;
    appendLocalRuns(meshShape, d, globalShape[d], coords, runs);
    int64_t local = 0;
    for (const Interval &r : runs)
      local += r.size;
    shard.runs.push_back(std::move(runs));
    shard.shape.push_back(local);
  }
  return shard;
}

bool Layout::isEvenFor(const std::vector<int64_t> &meshShape,
                       const std::vector<int64_t> &globalShape) const {
  std::vector<int64_t> first;
  for (const auto &coords : allMeshCoords(meshShape)) {
    std::vector<int64_t> shape =
        getLocalShard(meshShape, globalShape, coords).shape;
    if (first.empty())
      first = shape;
    else if (shape != first)
      return false;
  }
  return true;
}

} // namespace shardx
