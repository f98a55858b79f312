//===- CostModelTest.cpp - Prices of propagation strategies ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "CostModel.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir;
using namespace mlir::shardx;
using Kind = ShardingRule::FactorKind;

namespace {

class CostModelTest : public ::testing::Test {
protected:
  CostModelTest() {
    context.loadDialect<ShardXDialect>();
    context.getLoadedDialect<ShardXDialect>()->recordMeshShape("mesh", {4});
    spec.shape = {4};
  }

  LayoutAttr parse(StringRef placements) {
    return cast<LayoutAttr>(parseAttribute(
        ("#shardx.layout<@mesh, " + placements + ">").str(), &context));
  }
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(&context));
  }
  /// The planner's own price of the reshard, for comparison.
  double plannerCost(ArrayRef<int64_t> shape, LayoutAttr from, LayoutAttr to) {
    ::shardx::Planner planner(spec);
    std::string error;
    const ::shardx::Plan *plan =
        planner.plan(from.getLayout(), to.getLayout(),
                     std::vector<int64_t>(shape.begin(), shape.end()), 4,
                     error);
    EXPECT_TRUE(plan) << error;
    return plan ? plan->cost : -1;
  }

  MLIRContext context;
  ::shardx::MeshSpec spec;
};

} // namespace

TEST_F(CostModelTest, PlanCostIsThePlannersCheapestPlan) {
  CostModel costs(spec, 1e12);
  LayoutAttr partial = parse("[P(sum)]"), replicated = parse("[R]");
  double expected = plannerCost({64, 16}, partial, replicated);
  EXPECT_GT(expected, 0);
  EXPECT_DOUBLE_EQ(costs.planCost(tensor({64, 16}), partial, replicated),
                   expected);
  // Remembered: the same price again, and the Layout form agrees.
  EXPECT_DOUBLE_EQ(costs.planCost(tensor({64, 16}), partial, replicated),
                   expected);
  EXPECT_DOUBLE_EQ(costs.planCost(tensor({64, 16}), partial.getLayout(),
                                  replicated.getLayout()),
                   expected);
  EXPECT_DOUBLE_EQ(costs.planCost(tensor({64, 16}), replicated, replicated),
                   0);
}

TEST_F(CostModelTest, DynamicShapesCannotBePriced) {
  CostModel costs(spec, 1e12);
  EXPECT_TRUE(std::isinf(costs.planCost(tensor({ShapedType::kDynamic, 16}),
                                        parse("[P(sum)]"), parse("[R]"))));
}

TEST_F(CostModelTest, ReshardsCostCountsEachDistinctLayoutOnce) {
  CostModel costs(spec, 1e12);
  LayoutAttr from = parse("[P(sum)]"), r = parse("[R]"), s0 = parse("[S(0)]");
  double toR = plannerCost({64, 16}, from, r);
  double toS0 = plannerCost({64, 16}, from, s0);
  EXPECT_NE(toR, toS0);
  // Two uses need R, one S(0), one the layout it has, one nothing.
  EXPECT_DOUBLE_EQ(
      costs.reshardsCost(tensor({64, 16}), from, {r, s0, r, from, nullptr}),
      toR + toS0);
  EXPECT_DOUBLE_EQ(costs.reshardsCost(tensor({64, 16}), from, {}), 0);
}

TEST_F(CostModelTest, ComputeTimeIsTheLocalLoopAtTheRate) {
  ShardingRule rule;
  rule.addFactor(8, Kind::Parallel);
  rule.addFactor(16, Kind::Parallel);
  rule.addFactor(32, Kind::Reduction);
  EXPECT_DOUBLE_EQ(CostModel::work(rule, 1), 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(CostModel::work(rule, 4), 8 * 16 * 32 / 4);
  // 1e12 iterations per second: a microsecond per million.
  CostModel costs(spec, 1e12);
  EXPECT_DOUBLE_EQ(costs.computeUs(rule, 2), 2048 * 1e-6);
  // Rate 0: loops are free.
  CostModel free(spec, 0);
  EXPECT_DOUBLE_EQ(free.computeUs(rule, 1), 0);
  // A dynamic factor counts as one iteration.
  rule.addFactor(ShapedType::kDynamic, Kind::Parallel);
  EXPECT_DOUBLE_EQ(CostModel::work(rule, 1), 8 * 16 * 32);
}
