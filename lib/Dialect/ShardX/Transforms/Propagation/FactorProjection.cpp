//===- FactorProjection.cpp - Layouts seen through sharding rules ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "FactorProjection.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

using namespace mlir;
using namespace mlir::shardx;

//===----------------------------------------------------------------------===//
// Strategies in factors
//===----------------------------------------------------------------------===//

int64_t mlir::shardx::splitCount(const DimSharding &d,
                                 ArrayRef<int64_t> meshShape) {
  int64_t n = 1;
  for (const Split &s : d.splits)
    n *= meshShape[s.axis];
  return n;
}

/// The products of the sizes of `factors` before each of them (and of all of
/// them, last), or nullopt when one is dynamic.
static std::optional<SmallVector<int64_t>>
factorPrefixes(const ShardingRule &rule, ArrayRef<int64_t> factors) {
  SmallVector<int64_t> prefix = {1};
  for (int64_t f : factors) {
    if (rule.factorSizes[f] == ShapedType::kDynamic)
      return std::nullopt;
    prefix.push_back(prefix.back() * rule.factorSizes[f]);
  }
  return prefix;
}

/// The pieces of factor `f` under its single stride-1 split `fs` (explicit
/// sizes, or torch.chunk's), or none for another split.
static std::optional<std::vector<int64_t>>
factorPieces(const ShardingRule &rule, int64_t f, const DimSharding &fs,
             ArrayRef<int64_t> meshShape) {
  if (fs.splits.size() != 1 || fs.splits[0].stride != 1 ||
      ShapedType::isDynamic(rule.factorSizes[f]))
    return std::nullopt;
  if (!fs.sizes.empty())
    return fs.sizes;
  int64_t n = meshShape[fs.splits[0].axis];
  std::vector<int64_t> pieces;
  for (int64_t j = 0; j < n; ++j)
    pieces.push_back(chunkInterval(rule.factorSizes[f], n, j).size);
  return pieces;
}

/// torch.chunk's pieces of windowed dim `w` (factor `f` widened by its
/// window) under a single stride-1 split `fs`, or none.
static std::optional<std::vector<int64_t>>
windowedChunks(const ShardingRule &rule, int64_t f,
               const ShardingRule::WindowedDim &w, const DimSharding &fs,
               ArrayRef<int64_t> meshShape) {
  if (fs.splits.size() != 1 || fs.splits[0].stride != 1 ||
      ShapedType::isDynamic(rule.factorSizes[f]))
    return std::nullopt;
  int64_t size = w.stride * rule.factorSizes[f] + w.low + w.high;
  int64_t n = meshShape[fs.splits[0].axis];
  std::vector<int64_t> pieces;
  for (int64_t j = 0; j < n; ++j)
    pieces.push_back(chunkInterval(size, n, j).size);
  return pieces;
}

/// How one operand's layout looks in the rule's factors: per factor the
/// splits of the dim it forms. A dim made of several factors is read as
/// mixed-radix digits (Layout.h): each split sits at a digit position (the
/// blocks of the dim major to it) that falls inside exactly one factor,
/// where it becomes a split of that factor with the stride it has there. A
/// dim whose splits do not each fall inside one factor (an uneven split of
/// a merged dim, a split straddling two factors) is not seen at all: the
/// strategy then needs it resharded.
Assignment mlir::shardx::viewThroughRule(const ShardingRule &rule,
                                         ArrayRef<SmallVector<int64_t>> dims,
                                         const Layout &layout,
                                         ArrayRef<int64_t> meshShape) {
  Assignment view(rule.factorSizes.size());
  for (const DimSharding &ds : layout.getDims()) {
    if (ds.dim >= static_cast<int64_t>(dims.size()))
      continue;
    ArrayRef<int64_t> factors = dims[ds.dim];
    if (factors.empty())
      continue;
    if (const ShardingRule::WindowedDim *w = rule.windowOf(dims, ds.dim)) {
      // The factor's pieces are the dim's less the window at the ends,
      // over the stride (a piece the stride does not divide is not seen:
      // its windows would not start at the shard's edge).
      // A dim split in torch.chunk's pieces (no explicit sizes) is seen
      // through those pieces (a window of no halo, e.g. 2x2 pooling).
      DimSharding even{ds.dim, ds.splits, {}};
      std::optional<std::vector<int64_t>> chunks = ds.sizes;
      if (ds.sizes.empty())
        chunks = windowedChunks(rule, factors[0], *w, even, meshShape);
      if (ds.splits.size() != 1 || !chunks || chunks->empty() ||
          chunks->front() < w->low || chunks->back() < w->high)
        continue;
      DimSharding fs{ds.dim, ds.splits, *chunks};
      fs.sizes.front() -= w->low;
      fs.sizes.back() -= w->high;
      if (llvm::any_of(fs.sizes, [&](int64_t v) { return v % w->stride; }))
        continue;
      for (int64_t &v : fs.sizes)
        v /= w->stride;
      if (factorPieces(rule, factors[0], even, meshShape) == fs.sizes)
        fs.sizes.clear();
      view[factors[0]] = fs;
      continue;
    }
    if (factors.size() == 1) {
      view[factors[0]] = ds;
      continue;
    }
    std::optional<SmallVector<int64_t>> prefix = factorPrefixes(rule, factors);
    if (!ds.sizes.empty() || !prefix)
      continue;
    SmallVector<std::optional<DimSharding>> parts(factors.size());
    SmallVector<int64_t> splitIn(factors.size(), 1);
    int64_t before = 1; // axis sizes of the earlier splits
    bool exact = true;
    for (const Split &sp : ds.splits) {
      int64_t n = meshShape[sp.axis];
      int64_t blocks = sp.stride * before; // of the dim, major to the split
      std::optional<size_t> at;
      for (size_t j = 0; j < factors.size() && !at; ++j)
        if (blocks % (*prefix)[j] == 0 && (*prefix)[j + 1] % (blocks * n) == 0)
          at = j;
      if (!at || (blocks / (*prefix)[*at]) % splitIn[*at] != 0) {
        exact = false;
        break;
      }
      if (!parts[*at])
        parts[*at] = DimSharding{ds.dim, {}, {}};
      parts[*at]->splits.push_back(
          Split{sp.axis, blocks / (*prefix)[*at] / splitIn[*at]});
      splitIn[*at] *= n;
      before *= n;
    }
    if (!exact)
      continue;
    for (auto [j, part] : llvm::enumerate(parts))
      if (part)
        view[factors[j]] = *part;
  }
  return view;
}

/// The layout a tensor with factor `dims` has under `assignment`, or
/// nullopt when some dim cannot express it (a merged dim whose sharded
/// factors do not split evenly).
std::optional<Layout> mlir::shardx::project(const ShardingRule &rule,
                                            ArrayRef<SmallVector<int64_t>> dims,
                                            const Assignment &assignment,
                                            ArrayRef<int64_t> meshShape,
                                            int64_t meshRank) {
  Layout layout(meshRank);
  for (auto [d, factors] : llvm::enumerate(dims)) {
    if (const ShardingRule::WindowedDim *w = rule.windowOf(dims, d)) {
      // The factor's pieces times the stride, the first widened by the low
      // window and the last by the high one.
      const auto &fs = assignment[factors[0]];
      if (!fs)
        continue;
      std::optional<std::vector<int64_t>> pieces =
          factorPieces(rule, factors[0], *fs, meshShape);
      if (!pieces)
        return std::nullopt;
      for (int64_t &v : *pieces)
        v *= w->stride;
      pieces->front() += w->low;
      pieces->back() += w->high;
      // A halo reaches only the neighbouring shard.
      if (w->halo && *llvm::min_element(*pieces) <
                         std::max(w->haloLow(), w->haloHigh()))
        return std::nullopt;
      layout.addSplit(d, fs->splits[0]);
      // An operand window of no halo (2x2 pooling) in torch.chunk's
      // pieces keeps them implicit, as its source's are.
      DimSharding even{int64_t(d), fs->splits, {}};
      if (w->result || w->haloLow() || w->haloHigh() ||
          windowedChunks(rule, factors[0], *w, even, meshShape) != pieces)
        layout.setSizes(d, *pieces);
      continue;
    }
    if (factors.size() == 1) {
      if (const auto &fs = assignment[factors[0]]) {
        for (const Split &s : fs->splits)
          layout.addSplit(d, s);
        if (!fs->sizes.empty())
          layout.setSizes(d, fs->sizes);
      }
      continue;
    }
    if (llvm::none_of(factors, [&](int64_t f) { return assignment[f]; }))
      continue;
    std::optional<SmallVector<int64_t>> prefix = factorPrefixes(rule, factors);
    if (!prefix)
      return std::nullopt;
    int64_t before = 1; // axis sizes of the splits of earlier factors
    for (auto [j, f] : llvm::enumerate(factors)) {
      const auto &fs = assignment[f];
      if (!fs)
        continue;
      if (!fs->sizes.empty() || (*prefix)[j] % before != 0)
        return std::nullopt;
      int64_t inFactor = 1;
      for (const Split &s : fs->splits) {
        int64_t n = meshShape[s.axis];
        // The split's digit must lie inside the factor, evenly.
        if (rule.factorSizes[f] % (s.stride * inFactor * n) != 0)
          return std::nullopt;
        layout.addSplit(d, Split{s.axis, (*prefix)[j] / before * s.stride});
        inFactor *= n;
      }
      before *= inFactor;
    }
  }
  return layout;
}

/// Adds to `a` every factor sharding of `view` whose factor is free and
/// whose axes are unused.
void mlir::shardx::mergeInto(Assignment &a, const Assignment &view) {
  uint64_t used = 0;
  for (auto &f : a)
    if (f)
      used |= axisMask(*f);
  for (auto [f, sharding] : llvm::enumerate(view)) {
    if (!sharding || a[f] || (axisMask(*sharding) & used))
      continue;
    a[f] = sharding;
    used |= axisMask(*sharding);
  }
}

/// As mergeInto, but a factor sharding some of whose axes are used still
/// gives its major splits before the first used axis (a coarser split of
/// the same factor): tokens split over (dp, ep) keep dp's split when ep
/// splits the experts.
void mlir::shardx::mergeMajorSplitsInto(Assignment &a,
                                        const Assignment &view) {
  uint64_t used = 0;
  for (auto &f : a)
    if (f)
      used |= axisMask(*f);
  for (auto [f, sharding] : llvm::enumerate(view)) {
    // Explicit sizes name every split's pieces: no prefix of them.
    if (!sharding || a[f] || !sharding->sizes.empty())
      continue;
    DimSharding major{sharding->dim, {}, {}};
    for (const Split &s : sharding->splits) {
      if (used & (uint64_t(1) << s.axis))
        break;
      major.splits.push_back(s);
    }
    if (major.splits.empty())
      continue;
    used |= axisMask(major);
    a[f] = std::move(major);
  }
}
