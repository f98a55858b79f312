//===- PropagationUnitsTest.cpp - The units of shardx-propagate -----------===//
//
// Part of ShardX.
//
// The units a propagation search is built of, on one small program: the
// rule cache, the layouts one op can take (OpShardingSpace) and the cost of
// a function's layouts with trial changes (FunctionCost).
//
//===----------------------------------------------------------------------===//

#include "FunctionCost.h"
#include "OpShardingSpace.h"
#include "ProgramOrder.h"
#include "RuleCache.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::shardx;

namespace {

// %a is split on the contraction dim: its matmuls can keep it and give a
// pending sum, which the return must reduce.
constexpr const char *kProgram = R"mlir(
shardx.mesh @mesh(shape = 4)
func.func @f(%a: tensor<8x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
             %b: tensor<32x16xf32>, %c: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<8x32xf32>, tensor<32x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  %n = linalg.matmul ins(%a, %c : tensor<8x32xf32>, tensor<32x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = arith.addf %m, %n : tensor<8x16xf32>
  return %s : tensor<8x16xf32>
}
)mlir";

/// Loads the dialects of the programs below, with their sharding rules.
void loadDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<ShardXDialect, arith::ArithDialect, func::FuncDialect,
                  linalg::LinalgDialect, tensor::TensorDialect>();
  registerShardingRuleExternalModels(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

class PropagationUnitsTest : public ::testing::Test {
protected:
  PropagationUnitsTest() {
    loadDialects(context);
    module = parseSourceString<ModuleOp>(kProgram, &context);
    EXPECT_TRUE(module);
    fn = *module->getOps<func::FuncOp>().begin();
    for (Operation &op : fn.getBody().front())
      if (isa<linalg::MatmulOp>(op))
        matmuls.push_back(&op);
    EXPECT_EQ(matmuls.size(), 2u);
  }

  LayoutAttr parse(StringRef placements) {
    return cast<LayoutAttr>(parseAttribute(
        ("#shardx.layout<@mesh, " + placements + ">").str(), &context));
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  func::FuncOp fn;
  SmallVector<Operation *> matmuls;
};

} // namespace

TEST_F(PropagationUnitsTest, RuleCacheNumbersEqualRulesOnce) {
  RuleCache rules;
  FailureOr<ShardingRule> m = rules.get(matmuls[0]);
  FailureOr<ShardingRule> n = rules.get(matmuls[1]);
  ASSERT_TRUE(succeeded(m) && succeeded(n));
  EXPECT_EQ(m->str(), n->str());
  EXPECT_EQ(rules.idOf(*m), rules.idOf(*n));
  Operation *add = matmuls[1]->getNextNode();
  FailureOr<ShardingRule> a = rules.get(add);
  ASSERT_TRUE(succeeded(a));
  EXPECT_NE(rules.idOf(*a), rules.idOf(*m));
  // A prefetched rule is handed over once, then asked again.
  ASSERT_TRUE(rules.prefetch(add).has_value());
  EXPECT_TRUE(succeeded(rules.take(add)));
  EXPECT_TRUE(succeeded(rules.take(add)));
  // No rule for the return.
  EXPECT_TRUE(failed(rules.get(fn.getBody().front().getTerminator())));
}

TEST_F(PropagationUnitsTest, SpaceSplitsTheContractionIntoAPendingSum) {
  ShardingState state(FlatSymbolRefAttr::get(&context, "mesh"), 1);
  OpShardingSpace space({4}, state);
  RuleCache rules;
  Operation *matmul = matmuls[0];
  FailureOr<ShardingRule> rule = rules.get(matmul);
  ASSERT_TRUE(succeeded(rule));
  // %a's layout seen through the rule: its column split is the
  // contraction factor's.
  Assignment a =
      viewThroughRule(*rule, rule->operands[0],
                      space.layoutOf(fn.getArgument(0)), space.getMeshShape());
  SmallVector<Value> results(matmul->getResults());
  OpLayouts s = space.evaluate(matmul, *rule, results, a);
  ASSERT_TRUE(s.valid);
  ASSERT_EQ(s.operandLayouts.size(), 3u);
  EXPECT_EQ(s.operandLayouts[0], parse("[S(1)]").getLayout());
  EXPECT_EQ(s.operandLayouts[1], parse("[S(0)]").getLayout());
  // The init is the sum's identity (a fill of 0), so it is read whole.
  EXPECT_EQ(s.operandLayouts[2], parse("[R]").getLayout());
  EXPECT_EQ(s.resultLayouts[0], parse("[P(sum)]").getLayout());
  EXPECT_EQ(s.shardedWork, 4);
  // Unsplit, everything is replicated; `replicated` says the same.
  OpLayouts whole = space.evaluate(matmul, *rule, results,
                                   Assignment(rule->factorSizes.size()));
  OpLayouts replicated = space.replicated(matmul);
  state.attach(whole);
  state.attach(replicated);
  EXPECT_TRUE(whole.sameLayouts(replicated));
  EXPECT_EQ(whole.shardedWork, 1);
}

TEST_F(PropagationUnitsTest, SpaceKeepsAPendingSumThroughALinearOp) {
  ShardingState state(FlatSymbolRefAttr::get(&context, "mesh"), 1);
  OpShardingSpace space({4}, state);
  RuleCache rules;
  // Both matmuls give a pending sum: the add is linear in both operands.
  for (Operation *matmul : matmuls) {
    FailureOr<ShardingRule> rule = rules.get(matmul);
    ASSERT_TRUE(succeeded(rule));
    Assignment a = viewThroughRule(*rule, rule->operands[0],
                                   space.layoutOf(fn.getArgument(0)),
                                   space.getMeshShape());
    state.set(matmul,
              space.evaluate(matmul, *rule,
                             SmallVector<Value>(matmul->getResults()), a));
  }
  Operation *add = matmuls[1]->getNextNode();
  FailureOr<ShardingRule> rule = rules.get(add);
  ASSERT_TRUE(succeeded(rule));
  SmallVector<Value> results(add->getResults());
  OpLayouts kept =
      space.evaluate(add, *rule, results, Assignment(rule->factorSizes.size()));
  ASSERT_TRUE(kept.valid);
  EXPECT_EQ(kept.operandLayouts[0], parse("[P(sum)]").getLayout());
  EXPECT_EQ(kept.resultLayouts[0], parse("[P(sum)]").getLayout());
  // Without keepPartials the operands are needed reduced.
  OpLayouts reduced =
      space.evaluate(add, *rule, results, Assignment(rule->factorSizes.size()),
                     /*keepPartials=*/false);
  ASSERT_TRUE(reduced.valid);
  EXPECT_EQ(reduced.operandLayouts[0], parse("[R]").getLayout());
  EXPECT_EQ(reduced.resultLayouts[0], parse("[R]").getLayout());
}

TEST_F(PropagationUnitsTest, FunctionCostTrialIsPricedAndUndone) {
  ::shardx::MeshSpec spec;
  spec.shape = {4};
  CostModel costs(spec, 1e12);
  ShardingState state(FlatSymbolRefAttr::get(&context, "mesh"), 1);
  OpShardingSpace space({4}, state);
  RuleCache rules;
  MovableOps movable;
  llvm::StringSet<> warned;
  ASSERT_TRUE(succeeded(
      ProgramOrderSearch(fn, state, space, rules, costs, movable, false, warned)
          .run()));
  ASSERT_EQ(movable.ops.size(), 5u); // empty, fill, two matmuls, add
  ASSERT_TRUE(movable.position.count(matmuls[0]));
  FunctionCost cost(fn, state, costs, movable);
  cost.indexUses();
  double total = cost.totalCost();
  // In program order the matmuls keep %a split and the add keeps their
  // pending sum: one all-reduce, for the return.
  EXPECT_GT(total, 0);
  Operation *matmul = matmuls[0];
  OpLayouts before = state.get(matmul);
  OpLayouts whole = space.replicated(matmul);
  state.attach(whole);
  ASSERT_FALSE(whole.sameLayouts(before));

  FunctionCost::Trial trial;
  cost.change(matmul, whole, trial);
  EXPECT_TRUE(state.get(matmul).sameLayouts(whole));
  double delta = cost.costDelta(trial);
  EXPECT_NE(delta, 0);
  EXPECT_NEAR(cost.totalCost(), total + delta, 1e-9);
  // The whole matmul does four times the local work.
  EXPECT_DOUBLE_EQ(trial.workDelta,
                   cost.work(matmul, whole) - cost.work(matmul, before));
  EXPECT_GT(trial.workDelta, 0);

  cost.revert(trial);
  EXPECT_TRUE(state.get(matmul).sameLayouts(before));
  EXPECT_DOUBLE_EQ(cost.totalCost(), total);
}

namespace {

// A "same" 3x3 convolution with its padded input's rows and columns split
// on a 2x2 mesh: each dim reads a one-row halo from its neighbour.
constexpr const char *kConvProgram = R"mlir(
shardx.mesh @mesh(shape = 2x2, axes = ["h", "w"])
func.func @conv(%p: tensor<1x4x18x18xf32>, %w: tensor<8x4x3x3xf32>,
                %f: tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32> {
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%p, %w : tensor<1x4x18x18xf32>, tensor<8x4x3x3xf32>) outs(%f : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
  return %y : tensor<1x8x16x16xf32>
}
)mlir";

} // namespace

// The halos are priced as shardx-lower-halos emits them: in a group of two,
// one permute of the wider side's rows per dim, and the second dim's rows
// widened by the one row a member received in the first (the largest
// member's extent: 9 + 1 padded rows, not 9 + 2).
TEST(PropagationHalosTest, GroupOfTwoWidensByOneSide) {
  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kConvProgram, &context);
  ASSERT_TRUE(module);
  func::FuncOp fn = *module->getOps<func::FuncOp>().begin();
  Operation *conv = &fn.getBody().front().front();
  ShardingState state(FlatSymbolRefAttr::get(&context, "mesh"), 2);
  OpShardingSpace space({2, 2}, state);
  RuleCache rules;
  FailureOr<ShardingRule> rule = rules.get(conv);
  ASSERT_TRUE(succeeded(rule));
  auto split = cast<LayoutAttr>(
      parseAttribute("#shardx.layout<@mesh, [S(2), S(3)]>", &context));
  Assignment a = viewThroughRule(*rule, rule->operands[0], split.getLayout(),
                                 space.getMeshShape());
  OpLayouts s =
      space.evaluate(conv, *rule, SmallVector<Value>(conv->getResults()), a);
  ASSERT_TRUE(s.valid);
  // Rows: 4 channels x 9 columns of f32; columns: 4 channels x 10 rows.
  ASSERT_EQ(s.halos.size(), 2u);
  EXPECT_EQ(s.halos[0].first, 0);
  EXPECT_EQ(s.halos[0].second, 4 * 9 * 4);
  EXPECT_EQ(s.halos[1].first, 1);
  EXPECT_EQ(s.halos[1].second, 4 * 10 * 4);
}
