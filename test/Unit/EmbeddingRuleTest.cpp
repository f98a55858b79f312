//===- EmbeddingRuleTest.cpp - The embedding lookup's sharding rule -------===//
//
// Part of ShardX.
//
// shardx/Rules/EmbeddingRule.h: which linalg.generic is an embedding lookup,
// and the lookup's layouts given its table's and index's (the table leads;
// a row-split table gives a pending sum, a column-split one a split last
// dim, a table pending a sum or an average a result pending the same, a
// whole one the index's split); the aligned gather's match and layouts.
//
//===----------------------------------------------------------------------===//

#include "shardx/Rules/EmbeddingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::Layout;
using ::shardx::ReduceOp;
using ::shardx::Split;

namespace {

// A lookup of %table's rows by %idx, then an elementwise generic that is
// not one.
constexpr const char *kProgram = R"mlir(
func.func @f(%table: tensor<11x8xf32>, %idx: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
  %e = tensor.empty() : tensor<2x3x8xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%idx : tensor<2x3xi64>) outs(%e : tensor<2x3x8xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 2 : index
    %x = tensor.extract %table[%r, %c] : tensor<11x8xf32>
    linalg.yield %x : f32
  } -> tensor<2x3x8xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x3x8xf32>) outs(%e : tensor<2x3x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %y = math.tanh %a : f32
    linalg.yield %y : f32
  } -> tensor<2x3x8xf32>
  return %t : tensor<2x3x8xf32>
}
)mlir";

TEST(EmbeddingRuleTest, MatchesTheLookupOnly) {
  MLIRContext context;
  context.loadDialect<arith::ArithDialect, func::FuncDialect,
                      linalg::LinalgDialect, math::MathDialect,
                      tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kProgram, &context);
  ASSERT_TRUE(module);
  auto fn = *module->getOps<func::FuncOp>().begin();
  SmallVector<linalg::GenericOp> generics(fn.getOps<linalg::GenericOp>());
  ASSERT_EQ(generics.size(), 2u);
  std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(generics[0]);
  ASSERT_TRUE(lookup);
  EXPECT_EQ(lookup->table, fn.getArgument(0));
  EXPECT_TRUE(isa<tensor::ExtractOp>(lookup->extract));
  EXPECT_FALSE(matchEmbeddingLookup(generics[1]));
  EXPECT_FALSE(matchEmbeddingLookup(fn.getBody().front().getTerminator()));

  // As propagation asks it: the op's layouts and the table's, by values.
  Layout rows(2), whole(2);
  rows.addSplit(0, Split{0, 1});
  auto layoutOf = [&](Value v) -> const Layout & {
    return v == fn.getArgument(0) ? rows : whole;
  };
  auto s = shardCapturingOp(generics[0], layoutOf, /*meshRank=*/2);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->operands.size(), 2u);
  ASSERT_EQ(s->results.size(), 1u);
  EXPECT_EQ(s->captured.str(), rows.str());
  EXPECT_TRUE(s->results[0].hasPartial());
  EXPECT_FALSE(shardCapturingOp(generics[1], layoutOf, 2));
}

// The cross-entropy's pick of each row's target log-probability (an
// aligned gather: row i of %logp at the target's column), then a gather
// of a column at the row's target (no loop reads the source's rows).
constexpr const char *kGathers = R"mlir(
func.func @f(%logp: tensor<6x5xf32>, %target: tensor<6x1xi64>) -> (tensor<6x1xf32>, tensor<6x1xf32>) {
  %e = tensor.empty() : tensor<6x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<6x1xi64>) outs(%e : tensor<6x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %r = linalg.index 0 : index
    %c = arith.index_cast %t : i64 to index
    %x = tensor.extract %logp[%r, %c] : tensor<6x5xf32>
    linalg.yield %x : f32
  } -> tensor<6x1xf32>
  %q = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<6x1xi64>) outs(%e : tensor<6x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %c0 = arith.constant 0 : index
    %c = arith.index_cast %t : i64 to index
    %x = tensor.extract %logp[%c, %c0] : tensor<6x5xf32>
    linalg.yield %x : f32
  } -> tensor<6x1xf32>
  return %p, %q : tensor<6x1xf32>, tensor<6x1xf32>
}
)mlir";

TEST(EmbeddingRuleTest, AnAlignedGatherReadsTheRowsItsRankHolds) {
  MLIRContext context;
  context.loadDialect<arith::ArithDialect, func::FuncDialect,
                      linalg::LinalgDialect, tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kGathers, &context);
  ASSERT_TRUE(module);
  auto fn = *module->getOps<func::FuncOp>().begin();
  SmallVector<linalg::GenericOp> generics(fn.getOps<linalg::GenericOp>());
  ASSERT_EQ(generics.size(), 2u);
  std::optional<AlignedGather> pick = matchAlignedGather(generics[0]);
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->source, fn.getArgument(0));
  EXPECT_EQ(pick->aligned, (SmallVector<int64_t, 4>{0, -1}));
  EXPECT_FALSE(matchEmbeddingLookup(generics[0]));

  // The rows split on axis 0: the pick runs on each rank's rows, its
  // target and result split alike.
  Layout rows(2), cols(2), whole(2);
  rows.addSplit(0, Split{0, 1});
  cols.addSplit(1, Split{0, 1});
  const Layout *source = &rows;
  const Layout *target = &whole;
  auto layoutOf = [&](Value v) -> const Layout & {
    return v == fn.getArgument(0) ? *source : *target;
  };
  auto s = shardCapturingOp(generics[0], layoutOf, /*meshRank=*/2);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->operands.size(), 2u);
  EXPECT_EQ(s->operands[0].str(), rows.str());
  EXPECT_EQ(s->operands[1].str(), rows.str());
  EXPECT_EQ(s->results[0].str(), rows.str());
  EXPECT_EQ(s->captured.str(), rows.str());
  // A whole source: the target's split on axis 1 carries through.
  Layout targetRows(2);
  targetRows.addSplit(0, Split{1, 1});
  source = &whole;
  target = &targetRows;
  s = shardCapturingOp(generics[0], layoutOf, 2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->results[0].str(), targetRows.str());
  EXPECT_TRUE(s->captured.isReplicated());
  // Columns split (read at the targets) or a pending source: no rule.
  source = &cols;
  EXPECT_FALSE(shardCapturingOp(generics[0], layoutOf, 2));
  Layout pending(2);
  pending.setPartial(0, ReduceOp::Sum);
  source = &pending;
  EXPECT_FALSE(shardCapturingOp(generics[0], layoutOf, 2));

  // No loop reads the second gather's source: its rows split have no
  // rule, a whole source takes the target's split.
  std::optional<AlignedGather> column = matchAlignedGather(generics[1]);
  ASSERT_TRUE(column);
  EXPECT_EQ(column->aligned, (SmallVector<int64_t, 4>{-1, -1}));
  source = &rows;
  EXPECT_FALSE(shardCapturingOp(generics[1], layoutOf, 2));
  source = &whole;
  s = shardCapturingOp(generics[1], layoutOf, 2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->results[0].str(), targetRows.str());
}

// On a 2-axis mesh: `dims` as (dim, axis) splits.
Layout layout(std::initializer_list<std::pair<int64_t, int64_t>> dims) {
  Layout l(2);
  for (auto [dim, axis] : dims)
    l.addSplit(dim, Split{axis, 1});
  return l;
}

TEST(EmbeddingRuleTest, RowSplitTableGivesAPendingSum) {
  // Table rows on axis 0, index batch on axis 1: the index keeps its split.
  auto s = shardEmbeddingLookup(layout({{0, 0}}), layout({{0, 1}}),
                                /*resultRank=*/3, /*meshRank=*/2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index.str(), layout({{0, 1}}).str());
  EXPECT_EQ(s->init.str(), layout({{0, 1}}).str());
  Layout result = layout({{0, 1}});
  result.setPartial(0, ReduceOp::Sum);
  EXPECT_EQ(s->result.str(), result.str());
  EXPECT_FALSE(s->init.hasPartial());
}

TEST(EmbeddingRuleTest, ColumnSplitTableSplitsTheLastDim) {
  auto s = shardEmbeddingLookup(layout({{1, 1}}), Layout(2), 3, 2);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->index.isReplicated());
  EXPECT_EQ(s->result.str(), layout({{2, 1}}).str());
  EXPECT_EQ(s->init.str(), layout({{2, 1}}).str());
  EXPECT_FALSE(s->result.hasPartial());
}

TEST(EmbeddingRuleTest, TheTableLeadsOnASharedAxis) {
  // Both on axis 0: the index is read whole.
  auto s = shardEmbeddingLookup(layout({{0, 0}}), layout({{0, 0}}), 3, 2);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->index.isReplicated());
  EXPECT_TRUE(s->result.getDims().empty());
  EXPECT_TRUE(s->result.hasPartial());
}

TEST(EmbeddingRuleTest, AWholeTableIsLookedUpInTheIndexLayout) {
  // Data parallelism: the tokens split on axis 0, the table whole; the
  // result split like the tokens, nothing pending.
  auto s = shardEmbeddingLookup(Layout(2), layout({{0, 0}}), 3, 2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index.str(), layout({{0, 0}}).str());
  EXPECT_EQ(s->result.str(), layout({{0, 0}}).str());
  EXPECT_FALSE(s->result.hasPartial());
  // Both whole: the lookup runs whole.
  auto whole = shardEmbeddingLookup(Layout(2), Layout(2), 3, 2);
  ASSERT_TRUE(whole);
  EXPECT_TRUE(whole->result.isReplicated());
}

TEST(EmbeddingRuleTest, NoRuleForAStridedTable) {
  Layout strided(2);
  strided.addSplit(0, Split{0, 2});
  EXPECT_FALSE(shardEmbeddingLookup(strided, Layout(2), 3, 2));
}

TEST(EmbeddingRuleTest, APendingSumTablePendsTheResult) {
  // Rows on axis 0, a pending sum on axis 1, the index split on both: the
  // index is read whole, the result pends both sums.
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    Layout pending = layout({{0, 0}});
    pending.setPartial(1, op);
    auto s = shardEmbeddingLookup(pending, layout({{0, 0}, {1, 1}}), 3, 2);
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->index.isReplicated());
    EXPECT_FALSE(s->init.hasPartial());
    Layout result(2);
    result.setPartial(0, ReduceOp::Sum);
    result.setPartial(1, op);
    EXPECT_EQ(s->result.str(), result.str());
  }
  // Whole otherwise: the index keeps its split on the other axis.
  Layout pending(2);
  pending.setPartial(0, ReduceOp::Sum);
  auto s = shardEmbeddingLookup(pending, layout({{1, 1}}), 3, 2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index.str(), layout({{1, 1}}).str());
  Layout result = layout({{1, 1}});
  result.setPartial(0, ReduceOp::Sum);
  EXPECT_EQ(s->result.str(), result.str());
}

TEST(EmbeddingRuleTest, NoRuleForAPendingMaxMinOrProdTable) {
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod}) {
    Layout pending = layout({{0, 0}});
    pending.setPartial(1, op);
    EXPECT_FALSE(shardEmbeddingLookup(pending, Layout(2), 3, 2));
    Layout whole(2);
    whole.setPartial(0, op);
    EXPECT_FALSE(shardEmbeddingLookup(whole, Layout(2), 3, 2));
  }
}

} // namespace
