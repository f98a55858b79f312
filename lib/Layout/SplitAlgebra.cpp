//===- SplitAlgebra.cpp - Gathering and carving a layout's splits ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/SplitAlgebra.h"

#include "Digits.h"

#include <algorithm>
#include <numeric>

namespace shardx {

/// `layout` with the splits and sizes of dim `replacement.dim` replaced by
/// those of `replacement` (the dim unsharded when it has no splits).
static Layout withDim(const Layout &layout, const DimSharding &replacement) {
  Layout result(layout.getMeshRank());
  auto add = [&](const DimSharding &ds) {
    for (const Split &s : ds.splits)
      result.addSplit(ds.dim, s);
    if (!ds.splits.empty() && !ds.sizes.empty())
      result.setSizes(ds.dim, ds.sizes);
  };
  for (const DimSharding &ds : layout.getDims())
    add(ds.dim == replacement.dim ? replacement : ds);
  if (!layout.getDim(replacement.dim))
    add(replacement);
  for (int64_t a = 0; a < layout.getMeshRank(); ++a)
    result.setPartial(a, layout.getPartials()[a]);
  return result;
}

std::optional<Layout> gatherSplits(const Layout &layout, int64_t dim,
                                   size_t first, size_t count,
                                   const std::vector<int64_t> &meshShape) {
  const DimSharding *have = layout.getDim(dim);
  if (!have || count == 0 || first + count > have->splits.size())
    return std::nullopt;
  DimSharding ds = *have;
  int64_t n = 1;
  for (size_t i = first; i < first + count; ++i)
    n *= meshShape[ds.splits[i].axis];
  if (!ds.sizes.empty()) {
    // Explicit sizes are linearized over the splits, major first: only the
    // minor-most splits can go, and their shards merge.
    if (first + count != ds.splits.size())
      return std::nullopt;
    std::vector<int64_t> merged;
    for (size_t i = 0; i < ds.sizes.size(); i += n)
      merged.push_back(std::accumulate(ds.sizes.begin() + i,
                                       ds.sizes.begin() + i + n,
                                       static_cast<int64_t>(0)));
    ds.sizes = first == 0 ? std::vector<int64_t>() : merged;
  }
  for (size_t i = first + count; i < ds.splits.size(); ++i)
    ds.splits[i].stride *= n;
  ds.splits.erase(ds.splits.begin() + first, ds.splits.begin() + first + count);
  return withDim(layout, ds);
}

std::optional<Layout> carveSplits(const Layout &layout, int64_t dim,
                                  const std::vector<int64_t> &axes,
                                  int64_t stride,
                                  const std::vector<int64_t> &meshShape) {
  const DimSharding *have = layout.getDim(dim);
  DimSharding ds = have ? *have : DimSharding{dim, {}, {}};
  if (!ds.sizes.empty() || axes.empty())
    return std::nullopt;
  int64_t n = 1;
  for (int64_t a : axes)
    n *= meshShape[a];
  std::vector<detail::Digit> digits = detail::splitsToDigits(ds.splits);
  std::string error;
  if (!detail::applySplit(digits, axes, n, stride, error))
    return std::nullopt;
  ds.splits = detail::digitsToSplits(digits);
  return withDim(layout, ds);
}

} // namespace shardx
