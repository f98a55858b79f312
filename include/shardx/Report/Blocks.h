//===- Blocks.h - Device-block pictures of layouts --------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The pictures of the sharding report (docs/Report.md): which rank holds
// which block of a tensor, computed from the layout algebra
// (Layout::getLocalShard of every rank). A tensor is drawn in its 2-D view:
// rows are all dims but the last flattened row-major, columns the last dim
// (a 1-D tensor is one row, a scalar one cell). Ranks that hold the same
// elements and the same Partial term form one shard; a shard is drawn as
// the rectangles of the 2-D view its elements cover (several for strided
// and inner-dim splits). Like the layout algebra, this library has no
// MLIR/LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_REPORT_BLOCKS_H
#define SHARDX_REPORT_BLOCKS_H

#include "shardx/Layout/Layout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardx::report {

/// The 2-D view of a tensor of `shape`: rows x cols.
struct View2D {
  int64_t rows = 1;
  int64_t cols = 1;
};
View2D getView2D(const std::vector<int64_t> &shape);

/// The cells [row, row + rows) x [col, col + cols) of a 2-D view.
struct Rect {
  int64_t row = 0, col = 0, rows = 0, cols = 0;
};

/// One shard: the ranks (linear, row-major over the mesh, increasing) that
/// hold the same elements in the same Partial term, and where they are.
struct ShardBlocks {
  std::vector<int64_t> ranks;
  /// The Partial term: the ranks' coordinates on the Partial axes,
  /// linearized major to minor in mesh order; 0 without Partial axes.
  int64_t term = 0;
  std::vector<int64_t> localShape;
  /// Disjoint, sorted by (row, col); empty for an empty shard.
  std::vector<Rect> rects;
};

/// The picture of one layout of one tensor.
struct Picture {
  View2D view;
  /// The mesh axes with a Partial placement, in mesh order, and the number
  /// of terms (the product of their sizes; 1 without Partial).
  std::vector<int64_t> partialAxes;
  int64_t numTerms = 1;
  /// Sorted by (term, first rank).
  std::vector<ShardBlocks> shards;
};

/// The picture of `layout` for a tensor of `globalShape` on a mesh of
/// `meshShape`. Fails (false, `error` set) when the layout is invalid for
/// the shape, or when drawing it needs more than `maxRects` rectangles in
/// all (a huge tensor split on an inner dim).
bool computePicture(const Layout &layout, const std::vector<int64_t> &meshShape,
                    const std::vector<int64_t> &globalShape, int64_t maxRects,
                    Picture &picture, std::string &error);

/// The ranks drawn at cell (row, col) of term `term` of `picture`,
/// increasing (a lookup over the rectangles, for checking and tooltips).
std::vector<int64_t> ranksAt(const Picture &picture, int64_t term, int64_t row,
                             int64_t col);

} // namespace shardx::report

#endif // SHARDX_REPORT_BLOCKS_H
