//===- Blocks.cpp - Device-block pictures of layouts ----------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Report/Blocks.h"

#include <algorithm>
#include <map>
#include <utility>

using namespace shardx;
using namespace shardx::report;

View2D shardx::report::getView2D(const std::vector<int64_t> &shape) {
  View2D view;
  if (shape.empty())
    return view;
  view.cols = shape.back();
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    view.rows *= shape[d];
  return view;
}

namespace {

/// Appends [offset, offset + size) to `out`, merging it with the last
/// interval when they touch.
void appendMerged(std::vector<Interval> &out, int64_t offset, int64_t size) {
  if (size <= 0)
    return;
  if (!out.empty() && out.back().offset + out.back().size == offset) {
    out.back().size += size;
    return;
  }
  out.push_back({offset, size});
}

/// The rows of the 2-D view a shard covers: its runs of dims 0..r-2
/// flattened row-major into merged intervals. False when there would be
/// more than `limit`.
bool flattenRows(const std::vector<int64_t> &shape,
                 const std::vector<std::vector<Interval>> &runs, int64_t limit,
                 std::vector<Interval> &rows) {
  rows.assign(1, Interval{0, 1});
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    int64_t size = shape[d];
    std::vector<Interval> next;
    bool whole = runs[d].size() == 1 && runs[d][0].offset == 0 &&
                 runs[d][0].size == size;
    for (const Interval &iv : rows) {
      if (whole) {
        appendMerged(next, iv.offset * size, iv.size * size);
        continue;
      }
      for (int64_t i = iv.offset; i < iv.offset + iv.size; ++i) {
        for (const Interval &run : runs[d])
          appendMerged(next, i * size + run.offset, run.size);
        if (static_cast<int64_t>(next.size()) > limit)
          return false;
      }
    }
    rows = std::move(next);
  }
  return true;
}

} // namespace

bool shardx::report::computePicture(const Layout &layout,
                                    const std::vector<int64_t> &meshShape,
                                    const std::vector<int64_t> &globalShape,
                                    int64_t maxRects, Picture &picture,
                                    std::string &error) {
  error = layout.verifyForShape(meshShape, globalShape);
  if (!error.empty())
    return false;
  picture = Picture();
  picture.view = getView2D(globalShape);
  for (int64_t a = 0; a < static_cast<int64_t>(meshShape.size()); ++a) {
    if (layout.getPartials()[a]) {
      picture.partialAxes.push_back(a);
      picture.numTerms *= meshShape[a];
    }
  }
  // One shard per distinct (term, runs); ranks in increasing order.
  using Key =
      std::pair<int64_t, std::vector<std::vector<std::pair<int64_t, int64_t>>>>;
  std::map<Key, size_t> index;
  int64_t totalRects = 0;
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  for (int64_t rank = 0; rank < static_cast<int64_t>(coords.size()); ++rank) {
    LocalShard local =
        layout.getLocalShard(meshShape, globalShape, coords[rank]);
    Key key;
    key.first =
        picture.partialAxes.empty()
            ? 0
            : linearizeCoords(meshShape, picture.partialAxes, coords[rank]);
    for (const std::vector<Interval> &dimRuns : local.runs) {
      key.second.emplace_back();
      for (const Interval &run : dimRuns)
        key.second.back().push_back({run.offset, run.size});
    }
    auto [it, inserted] = index.insert({key, picture.shards.size()});
    if (!inserted) {
      picture.shards[it->second].ranks.push_back(rank);
      continue;
    }
    ShardBlocks shard;
    shard.ranks.push_back(rank);
    shard.term = key.first;
    shard.localShape = local.shape;
    bool empty = std::any_of(local.shape.begin(), local.shape.end(),
                             [](int64_t s) { return s == 0; });
    if (!empty) {
      std::vector<Interval> rows, cols;
      if (globalShape.empty()) {
        rows.push_back({0, 1});
        cols.push_back({0, 1});
      } else {
        if (!flattenRows(globalShape, local.runs, maxRects - totalRects,
                         rows)) {
          error = "more than " + std::to_string(maxRects) + " blocks to draw";
          return false;
        }
        for (const Interval &run : local.runs.back())
          appendMerged(cols, run.offset, run.size);
        if (globalShape.size() == 1)
          rows.assign(1, Interval{0, 1});
      }
      totalRects += static_cast<int64_t>(rows.size() * cols.size());
      if (totalRects > maxRects) {
        error = "more than " + std::to_string(maxRects) + " blocks to draw";
        return false;
      }
      for (const Interval &r : rows)
        for (const Interval &c : cols)
          shard.rects.push_back({r.offset, c.offset, r.size, c.size});
    }
    picture.shards.push_back(std::move(shard));
  }
  std::stable_sort(picture.shards.begin(), picture.shards.end(),
                   [](const ShardBlocks &a, const ShardBlocks &b) {
                     return a.term < b.term;
                   });
  return true;
}

std::vector<int64_t> shardx::report::ranksAt(const Picture &picture,
                                             int64_t term, int64_t row,
                                             int64_t col) {
  std::vector<int64_t> ranks;
  for (const ShardBlocks &shard : picture.shards) {
    if (shard.term != term)
      continue;
    for (const Rect &r : shard.rects) {
      if (row >= r.row && row < r.row + r.rows && col >= r.col &&
          col < r.col + r.cols) {
        ranks.insert(ranks.end(), shard.ranks.begin(), shard.ranks.end());
        break;
      }
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}
