//===- SplitAlgebra.h - Gathering and carving a layout's splits -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The two moves of the layout algebra the reshard planner composes its steps
// from: removing a run of splits from a dim (what an all_gather does) and
// carving mesh axes out of a dim's local piece (what a chunk, the scatter
// half of a reduce_scatter or of an all_to_all does). Both are free
// functions over Layout's public interface; Layout itself stays the
// canonical form and its queries.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LAYOUT_SPLITALGEBRA_H
#define SHARDX_LAYOUT_SPLITALGEBRA_H

#include "shardx/Layout/Layout.h"

#include <optional>
#include <vector>

namespace shardx {

/// `layout` without the splits [first, first + count) of `dim`: the group of
/// their axes is gathered. Later splits of the dim get the removed blocks as
/// stride. Fails when the dim is not sharded, the range is empty or out of
/// bounds, or the dim has explicit sizes and the splits are not its
/// minor-most ones (their shards merge). On a 2x2 mesh, gathering split 0
/// of dim 0 of [S(0), S(0)] gives [R, S(0)], strides = {0 = [2]}.
std::optional<Layout> gatherSplits(const Layout &layout, int64_t dim,
                                   size_t first, size_t count,
                                   const std::vector<int64_t> &meshShape);

/// `layout` with the mesh axes `axes` (one flattened group, major first)
/// carved out of the local piece of `dim`: the piece is viewed as
/// (stride, n, rest) and the group takes the n part. Fails when the stride
/// does not fall on a block boundary of the local piece, `axes` is empty or
/// the dim has explicit sizes. Does not check the result against a shape.
/// Carving axis 0 into dim 0 of [R, R] at stride 1 gives [S(0), R].
std::optional<Layout> carveSplits(const Layout &layout, int64_t dim,
                                  const std::vector<int64_t> &axes,
                                  int64_t stride,
                                  const std::vector<int64_t> &meshShape);

} // namespace shardx

#endif // SHARDX_LAYOUT_SPLITALGEBRA_H
