//===- FactorProjectionTest.cpp - Layouts seen through sharding rules -----===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "FactorProjection.h"

#include "gtest/gtest.h"

using namespace mlir::shardx;
using ::shardx::Layout;
using ::shardx::Split;
using Kind = ShardingRule::FactorKind;

namespace {

/// ([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}.
ShardingRule matmulRule() {
  ShardingRule rule;
  int64_t i = rule.addFactor(8, Kind::Parallel);
  int64_t j = rule.addFactor(16, Kind::Parallel);
  int64_t k = rule.addFactor(32, Kind::Reduction);
  rule.operands = {{{i}, {k}}, {{k}, {j}}};
  rule.results = {{{i}, {j}}};
  return rule;
}

/// A reshape of a 2-D tensor [a*b, c] into [a, b, c]: ([a, b], [c]) ->
/// ([a], [b], [c]).
ShardingRule reshapeRule(int64_t a, int64_t b, int64_t c) {
  ShardingRule rule;
  int64_t fa = rule.addFactor(a, Kind::Parallel);
  int64_t fb = rule.addFactor(b, Kind::Parallel);
  int64_t fc = rule.addFactor(c, Kind::Parallel);
  rule.operands = {{{fa, fb}, {fc}}};
  rule.results = {{{fa}, {fb}, {fc}}};
  return rule;
}

Layout layout(int64_t meshRank,
              std::initializer_list<std::pair<int64_t, Split>> splits) {
  Layout l(meshRank);
  for (auto [dim, split] : splits)
    l.addSplit(dim, split);
  return l;
}

TEST(FactorProjection, MatmulRowSplitReachesTheResultRows) {
  ShardingRule rule = matmulRule();
  std::vector<int64_t> mesh = {2, 2};
  // A split by rows over axis 0, B by columns over axis 1.
  Assignment a = viewThroughRule(rule, rule.operands[0],
                                 layout(2, {{0, Split{0, 1}}}), mesh);
  Assignment b = viewThroughRule(rule, rule.operands[1],
                                 layout(2, {{1, Split{1, 1}}}), mesh);
  ASSERT_TRUE(a[0].has_value());
  EXPECT_FALSE(a[1].has_value());
  EXPECT_FALSE(a[2].has_value());
  ASSERT_TRUE(b[1].has_value());
  mergeInto(a, b);
  std::optional<Layout> result =
      project(rule, rule.results[0], a, mesh, /*meshRank=*/2);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, layout(2, {{0, Split{0, 1}}, {1, Split{1, 1}}}))
      << result->str();
  // B's own layout comes back from the merged assignment.
  std::optional<Layout> bBack = project(rule, rule.operands[1], a, mesh, 2);
  ASSERT_TRUE(bBack.has_value());
  EXPECT_EQ(*bBack, layout(2, {{1, Split{1, 1}}})) << bBack->str();
}

TEST(FactorProjection, MergeSkipsUsedAxesAndTakenFactors) {
  ShardingRule rule = matmulRule();
  std::vector<int64_t> mesh = {2, 2};
  Assignment a = viewThroughRule(rule, rule.operands[0],
                                 layout(2, {{0, Split{0, 1}}}), mesh);
  // B's columns on the same axis 0: the axis is taken, j stays whole.
  Assignment b = viewThroughRule(rule, rule.operands[1],
                                 layout(2, {{1, Split{0, 1}}}), mesh);
  mergeInto(a, b);
  EXPECT_TRUE(a[0].has_value());
  EXPECT_FALSE(a[1].has_value());
  EXPECT_EQ(axisMask(*a[0]), 1u);
  EXPECT_EQ(splitCount(*a[0], mesh), 2);
}

TEST(FactorProjection, MergeMajorSplitsKeepsTheSplitsBeforeAUsedAxis) {
  // Expert parallelism's candidate: A's rows (the tokens) split over both
  // axes, axis 0 major; B's columns (the experts) over axis 1. mergeInto
  // drops the rows' split (axis 1 is taken); mergeMajorSplitsInto keeps its
  // major split over axis 0, so the rows stay split over axis 0 while axis
  // 1 splits the columns.
  ShardingRule rule = matmulRule();
  std::vector<int64_t> mesh = {2, 2};
  Assignment rows = viewThroughRule(
      rule, rule.operands[0],
      layout(2, {{0, Split{0, 1}}, {0, Split{1, 1}}}), mesh);
  Assignment cols = viewThroughRule(rule, rule.operands[1],
                                    layout(2, {{1, Split{1, 1}}}), mesh);
  Assignment whole = cols, major = cols;
  mergeInto(whole, rows);
  mergeMajorSplitsInto(major, rows);
  EXPECT_FALSE(whole[0].has_value());
  ASSERT_TRUE(major[0].has_value());
  EXPECT_EQ(axisMask(*major[0]), 1u);
  EXPECT_EQ(splitCount(*major[0], mesh), 2);
  EXPECT_EQ(axisMask(*major[1]), 2u);
  // The minor axis taken first leaves nothing: its major split is used.
  Assignment first = viewThroughRule(rule, rule.operands[1],
                                     layout(2, {{1, Split{0, 1}}}), mesh);
  mergeMajorSplitsInto(first, rows);
  EXPECT_FALSE(first[0].has_value());
  // Where no axis is used it merges the whole split, as mergeInto.
  Assignment none(rule.factorSizes.size());
  mergeMajorSplitsInto(none, rows);
  ASSERT_TRUE(none[0].has_value());
  EXPECT_EQ(*none[0], *rows[0]);
}

TEST(FactorProjection, MergedDimRoundTrips) {
  // Rows [4*8] split over both axes (major first): the first split falls in
  // factor a, the second (stride 2 inside a's blocks) as well; back
  // through the rule the same layout comes out.
  ShardingRule rule = reshapeRule(4, 8, 16);
  std::vector<int64_t> mesh = {2, 2};
  Layout rows = layout(2, {{0, Split{0, 1}}, {0, Split{1, 1}}});
  Assignment view = viewThroughRule(rule, rule.operands[0], rows, mesh);
  ASSERT_TRUE(view[0].has_value());
  EXPECT_FALSE(view[1].has_value());
  EXPECT_EQ(splitCount(*view[0], mesh), 4);
  std::optional<Layout> back = project(rule, rule.operands[0], view, mesh, 2);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, rows) << back->str();
  // In the result, the split is on dim 0 (factor a) alone.
  std::optional<Layout> result = project(rule, rule.results[0], view, mesh, 2);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, layout(2, {{0, Split{0, 1}}, {0, Split{1, 1}}}))
      << result->str();
}

TEST(FactorProjection, InnerFactorSplitIsStrided) {
  // Factor b (the minor part of the merged rows) split over axis 0 is, in
  // the merged dim, a split with stride a = 4 (DTensor's
  // _StridedShard(0, 4)); seen through the rule it is b's split again.
  ShardingRule rule = reshapeRule(4, 8, 16);
  std::vector<int64_t> mesh = {2};
  Assignment assignment(rule.factorSizes.size());
  assignment[1] = ::shardx::DimSharding{0, {Split{0, 1}}, {}};
  std::optional<Layout> merged =
      project(rule, rule.operands[0], assignment, mesh, 1);
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(*merged, layout(1, {{0, Split{0, 4}}})) << merged->str();
  Assignment view = viewThroughRule(rule, rule.operands[0], *merged, mesh);
  EXPECT_FALSE(view[0].has_value());
  ASSERT_TRUE(view[1].has_value());
  EXPECT_EQ(view[1]->splits, (std::vector<Split>{Split{0, 1}}));
}

TEST(FactorProjection, SplitStraddlingFactorsIsNotSeen) {
  // Rows [3*16] in halves: the cut at 24 falls inside factor b's second
  // block of a, not at a digit boundary of either factor: not seen, so the
  // strategy will need a reshard rather than a wrong layout.
  ShardingRule rule = reshapeRule(3, 16, 8);
  std::vector<int64_t> mesh = {2};
  Assignment view = viewThroughRule(rule, rule.operands[0],
                                    layout(1, {{0, Split{0, 1}}}), mesh);
  EXPECT_FALSE(view[0].has_value());
  EXPECT_FALSE(view[1].has_value());
  EXPECT_FALSE(view[2].has_value());
}

TEST(FactorProjection, UnevenSizesStayOnSingleFactorDims) {
  // Explicit (uneven) sizes pass through a dim of one factor, but a merged
  // dim cannot carry them.
  ShardingRule rule = reshapeRule(4, 8, 6);
  std::vector<int64_t> mesh = {2};
  Layout cols(1);
  cols.addSplit(1, Split{0, 1});
  cols.setSizes(1, {4, 2});
  Assignment view = viewThroughRule(rule, rule.operands[0], cols, mesh);
  ASSERT_TRUE(view[2].has_value());
  std::optional<Layout> result = project(rule, rule.results[0], view, mesh, 1);
  ASSERT_TRUE(result.has_value());
  ASSERT_NE(result->getDim(2), nullptr);
  EXPECT_EQ(result->getDim(2)->sizes, (std::vector<int64_t>{4, 2}));

  Assignment merged(rule.factorSizes.size());
  merged[0] = ::shardx::DimSharding{0, {Split{0, 1}}, {3, 1}};
  EXPECT_FALSE(project(rule, rule.operands[0], merged, mesh, 1).has_value());
}

} // namespace
