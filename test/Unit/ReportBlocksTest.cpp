//===- ReportBlocksTest.cpp - The report's pictures vs the layout algebra -===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The sharding report draws each layout as device blocks
// (shardx::report::computePicture). For random layouts on 1-D to 3-D meshes
// and 0-D to 4-D tensors (dims that divide and dims that do not, nested and
// reordered splits, StridedShard, explicit uneven sizes, Partial), the ranks
// drawn at every element of every Partial term must be exactly the ranks
// whose Layout::getLocalShard holds that element in that term.
//
//===----------------------------------------------------------------------===//

#include "shardx/Report/Blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace shardx;
using namespace shardx::report;

namespace {

/// Row-major coordinates of linear index `i` in `shape`.
std::vector<int64_t> unflatten(int64_t i, const std::vector<int64_t> &shape) {
  std::vector<int64_t> c(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

bool holds(const LocalShard &shard, const std::vector<int64_t> &index) {
  for (size_t d = 0; d < index.size(); ++d) {
    bool in = false;
    for (const Interval &run : shard.runs[d])
      in |= index[d] >= run.offset && index[d] < run.offset + run.size;
    if (!in)
      return false;
  }
  return true;
}

/// Checks every element of every term of `layout`'s picture; returns the
/// number of elements checked.
int64_t checkPicture(const Layout &layout, const std::vector<int64_t> &mesh,
                     const std::vector<int64_t> &shape) {
  Picture picture;
  std::string error;
  EXPECT_TRUE(computePicture(layout, mesh, shape, 1 << 20, picture, error))
      << error;
  std::vector<std::vector<int64_t>> coords = allMeshCoords(mesh);
  std::vector<int64_t> partialAxes;
  for (int64_t a = 0; a < static_cast<int64_t>(mesh.size()); ++a)
    if (layout.getPartials()[a])
      partialAxes.push_back(a);
  std::vector<LocalShard> shards;
  std::vector<int64_t> terms;
  int64_t numTerms = 1;
  for (int64_t a : partialAxes)
    numTerms *= mesh[a];
  for (const std::vector<int64_t> &c : coords) {
    shards.push_back(layout.getLocalShard(mesh, shape, c));
    terms.push_back(
        partialAxes.empty() ? 0 : linearizeCoords(mesh, partialAxes, c));
  }
  EXPECT_EQ(picture.numTerms, numTerms);
  View2D view = getView2D(shape);
  int64_t elements = 1;
  for (int64_t s : shape)
    elements *= s;
  EXPECT_EQ(view.rows * view.cols, elements);
  for (int64_t term = 0; term < numTerms; ++term) {
    for (int64_t e = 0; e < elements; ++e) {
      std::vector<int64_t> index = unflatten(e, shape);
      std::vector<int64_t> expected;
      for (size_t r = 0; r < coords.size(); ++r)
        if (terms[r] == term && holds(shards[r], index))
          expected.push_back(static_cast<int64_t>(r));
      int64_t row = view.cols ? e / view.cols : 0;
      int64_t col = view.cols ? e % view.cols : 0;
      EXPECT_EQ(ranksAt(picture, term, row, col), expected)
          << layout.str() << " shape " << shape.size() << "-D, element " << e
          << ", term " << term;
      if (::testing::Test::HasFailure())
        return elements;
    }
  }
  // Every rank is in exactly one shard, with the same local shape as the
  // shard's first rank.
  std::vector<int> seen(coords.size(), 0);
  for (const ShardBlocks &s : picture.shards)
    for (int64_t r : s.ranks) {
      ++seen[r];
      EXPECT_EQ(shards[r].shape, s.localShape);
      EXPECT_EQ(terms[r], s.term);
    }
  EXPECT_TRUE(
      std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  return elements * numTerms;
}

TEST(ReportBlocks, RandomLayoutsMatchTheLayoutAlgebra) {
  std::mt19937_64 rng(19);
  auto pick = [&](int64_t n) {
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
  };
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                          ReduceOp::Min, ReduceOp::Prod};
  int64_t layouts = 0, strided = 0, uneven = 0, partial = 0, reordered = 0;
  for (int iter = 0; iter < 3000 && layouts < 1500; ++iter) {
    std::vector<int64_t> mesh(1 + pick(3));
    for (int64_t &m : mesh)
      m = 1 + pick(3);
    std::vector<int64_t> shape(pick(5));
    for (int64_t &s : shape)
      s = 1 + pick(7);
    LayoutSpelling spelling;
    for (size_t a = 0; a < mesh.size(); ++a) {
      int64_t kind = pick(5);
      if (kind == 0 || shape.empty())
        spelling.placements.push_back(kind == 1
                                          ? Placement::partial(ops[pick(5)])
                                          : Placement::replicate());
      else if (kind == 1)
        spelling.placements.push_back(Placement::partial(ops[pick(5)]));
      else if (kind == 2)
        spelling.placements.push_back(
            Placement::stridedShard(pick(shape.size()), 1 + pick(3)));
      else
        spelling.placements.push_back(Placement::shard(pick(shape.size())));
    }
    // Sometimes reverse the order of a dim's splits or give explicit sizes.
    std::map<int64_t, std::vector<int64_t>> axesOf;
    for (size_t a = 0; a < mesh.size(); ++a)
      if (spelling.placements[a].kind == Placement::Kind::Shard)
        axesOf[spelling.placements[a].dim].push_back(a);
    for (auto &[dim, axes] : axesOf) {
      if (axes.size() > 1 && pick(3) == 0) {
        std::reverse(axes.begin(), axes.end());
        spelling.order[dim] = axes;
      } else if (pick(4) == 0) {
        int64_t n = 1;
        for (int64_t a : axes)
          n *= mesh[a];
        std::vector<int64_t> sizes(n, 0);
        for (int64_t i = 0; i < shape[dim]; ++i)
          ++sizes[pick(n)];
        spelling.sizes[dim] = sizes;
      }
    }
    std::string error;
    std::optional<Layout> layout = Layout::fromSpelling(spelling, mesh, error);
    if (!layout || !layout->verifyForShape(mesh, shape).empty())
      continue;
    ++layouts;
    std::string text = layout->str();
    strided += text.find("strides") != std::string::npos;
    uneven += !layout->isEvenFor(mesh, shape);
    partial += layout->hasPartial();
    reordered += text.find("order") != std::string::npos;
    checkPicture(*layout, mesh, shape);
    if (HasFailure())
      return;
  }
  // The sample covers what the pictures must draw exactly.
  EXPECT_GE(layouts, 1000);
  EXPECT_GE(strided, 20);
  EXPECT_GE(uneven, 100);
  EXPECT_GE(partial, 100);
  EXPECT_GE(reordered, 20);
}

TEST(ReportBlocks, StridedShardIsDrawnAsRuns) {
  // Flattening a 6x4 tensor split on dim 1 over 2 ranks: 6 runs of 2.
  std::string error;
  std::optional<Layout> layout =
      Layout::fromPlacements({Placement::stridedShard(0, 6)}, {2}, error);
  ASSERT_TRUE(layout) << error;
  Picture picture;
  ASSERT_TRUE(computePicture(*layout, {2}, {24}, 100, picture, error)) << error;
  ASSERT_EQ(picture.shards.size(), 2u);
  EXPECT_EQ(picture.shards[0].rects.size(), 6u);
  EXPECT_EQ(picture.shards[0].rects[1].col, 4);
  EXPECT_EQ(picture.shards[0].rects[1].cols, 2);
}

TEST(ReportBlocks, TooManyBlocksIsAnError) {
  // Dim 1 of 1000x2x3 split over 2 ranks: 1000 row runs per rank.
  std::string error;
  std::optional<Layout> layout =
      Layout::fromPlacements({Placement::shard(1)}, {2}, error);
  ASSERT_TRUE(layout) << error;
  Picture picture;
  EXPECT_FALSE(computePicture(*layout, {2}, {1000, 2, 3}, 100, picture, error));
  EXPECT_NE(error.find("more than 100 blocks"), std::string::npos) << error;
  EXPECT_TRUE(computePicture(*layout, {2}, {1000, 2, 3}, 2000, picture, error));
}

} // namespace
