//===- PlannerTest.cpp - Reshard plans: correctness and optimality --------===//
//
// Part of ShardX.
//
// Every plan is executed by the reference executor on simulated ranks and
// compared with the target layout's shards of the same global tensor.
//
//===----------------------------------------------------------------------===//

#include "ReferenceExecutor.h"

#include "shardx/Planner/Planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

using namespace shardx;
using shardx::testing::LocalTensor;
using shardx::testing::ReferenceExecutor;

namespace {

Layout layoutOf(const std::vector<Placement> &ps,
                const std::vector<int64_t> &mesh) {
  std::string error;
  std::optional<Layout> l = Layout::fromPlacements(ps, mesh, error);
  EXPECT_TRUE(l.has_value()) << error;
  return l ? *l : Layout(mesh.size());
}

Plan mustPlan(Planner &planner, const Layout &src, const Layout &dst,
              const std::vector<int64_t> &shape, int64_t bytes = 4) {
  std::string error;
  const Plan *plan = planner.plan(src, dst, shape, bytes, error);
  EXPECT_TRUE(plan) << error;
  return plan ? *plan : Plan();
}

std::string planStr(const Plan &plan) {
  std::string s;
  for (const Step &step : plan.steps)
    s += step.str() + "; ";
  return s;
}

/// Runs `plan` on simulated ranks and checks every rank against the target
/// layout's shard of the same global tensor. Returns a failure message or
/// the empty string.
std::string execute(const std::vector<int64_t> &mesh, const Layout &src,
                    const Layout &dst, const std::vector<int64_t> &shape,
                    const Plan &plan) {
  ReferenceExecutor exec(mesh);
  std::vector<double> global = ReferenceExecutor::iota(shape);
  std::vector<LocalTensor> locals = exec.scatter(src, shape, global);
  Layout current = src;
  for (const Step &step : plan.steps) {
    if (step.before != current)
      return "step " + step.str() + " starts from " + step.before.str() +
             " but the plan is at " + current.str();
    exec.apply(step, locals);
    current = step.after;
  }
  if (current != dst)
    return "plan ends at " + current.str() + ", not " + dst.str();
  std::vector<LocalTensor> got = exec.materialize(dst, locals);
  std::vector<LocalTensor> want =
      exec.materialize(dst, exec.scatter(dst, shape, global));
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].shape != want[r].shape)
      return "rank " + std::to_string(r) + " has the wrong local shape";
    for (size_t i = 0; i < got[r].data.size(); ++i) {
      double a = got[r].data[i], b = want[r].data[i];
      if (std::abs(a - b) > 1e-9 * std::max(1.0, std::abs(b)))
        return "rank " + std::to_string(r) + " element " + std::to_string(i) +
               " is " + std::to_string(a) + ", expected " + std::to_string(b);
    }
  }
  return "";
}

/// Layouts of a rank-`rank` tensor on `mesh`: every assignment of the given
/// placement kinds, every order of the axes that split one dim, and a
/// strided variant of single-split dims.
std::vector<Layout> enumerateLayouts(const std::vector<int64_t> &mesh,
                                     int64_t rank,
                                     const std::vector<ReduceOp> &partials,
                                     bool variants = true) {
  std::vector<Placement> choices = {Placement::replicate()};
  for (int64_t d = 0; d < rank; ++d)
    choices.push_back(Placement::shard(d));
  for (ReduceOp op : partials)
    choices.push_back(Placement::partial(op));
  std::vector<Layout> result;
  std::vector<Placement> ps(mesh.size());
  std::function<void(size_t)> rec = [&](size_t a) {
    if (a == mesh.size()) {
      LayoutSpelling base;
      base.placements = ps;
      std::string error;
      std::optional<Layout> l = Layout::fromSpelling(base, mesh, error);
      if (!l)
        return;
      result.push_back(*l);
      if (!variants)
        return;
      for (const DimSharding &ds : l->getDims()) {
        std::vector<int64_t> axes;
        for (const Split &s : ds.splits)
          axes.push_back(s.axis);
        while (std::next_permutation(axes.begin(), axes.end())) {
          LayoutSpelling s = base;
          s.order[ds.dim] = axes;
          if (auto o = Layout::fromSpelling(s, mesh, error))
            result.push_back(*o);
        }
        if (ds.splits.size() == 1) {
          LayoutSpelling s = base;
          s.strides[ds.dim] = {2};
          if (auto o = Layout::fromSpelling(s, mesh, error))
            result.push_back(*o);
        }
      }
      return;
    }
    for (const Placement &p : choices) {
      ps[a] = p;
      rec(a + 1);
    }
  };
  rec(0);
  return result;
}

} // namespace

//===----------------------------------------------------------------------===//
// Optimality of single transitions
//===----------------------------------------------------------------------===//

TEST(Planner, ShardToShardIsOneAllToAll) {
  Planner planner({{4}, {}});
  Plan plan = mustPlan(planner, layoutOf({Placement::shard(0)}, {4}),
                       layoutOf({Placement::shard(1)}, {4}), {8, 8});
  ASSERT_EQ(plan.steps.size(), 1u) << planStr(plan);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::AllToAll);
  // (n - 1) / n of the local shard: the per-rank lower bound.
  EXPECT_DOUBLE_EQ(plan.bytesPerRank,
                   lowerBoundBytes(Step::Kind::AllToAll, 4, 8 * 8 * 4));
}

TEST(Planner, UnevenAllToAllIsPricedAtTheLargestReceive) {
  // 3 experts x 10 tokens x 16 on 2 ranks: experts split 2 and 1, tokens 5
  // and 5. Either way rank 0 or 1 lacks 2 experts of 5 tokens of its new
  // shard (160 floats); (n - 1) / n of the largest shard would say 120 or
  // 160, the even formula on the source 120.
  Planner planner({{2}, {}});
  Layout experts = layoutOf({Placement::shard(0)}, {2});
  Layout tokens = layoutOf({Placement::shard(1)}, {2});
  for (const auto &[src, dst] :
       {std::pair(tokens, experts), std::pair(experts, tokens)}) {
    Plan plan = mustPlan(planner, src, dst, {3, 10, 16});
    ASSERT_EQ(plan.steps.size(), 1u) << planStr(plan);
    EXPECT_EQ(plan.steps[0].kind, Step::Kind::AllToAll);
    EXPECT_DOUBLE_EQ(plan.bytesPerRank, 2 * 5 * 16 * 4) << planStr(plan);
  }
}

TEST(Planner, PartialToShardIsOneReduceScatter) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                      ReduceOp::Min, ReduceOp::Prod}) {
    Planner planner({{4}, {}});
    Plan plan = mustPlan(planner, layoutOf({Placement::partial(op)}, {4}),
                         layoutOf({Placement::shard(0)}, {4}), {8, 8});
    ASSERT_EQ(plan.steps.size(), 1u) << planStr(plan);
    EXPECT_EQ(plan.steps[0].kind, Step::Kind::ReduceScatter);
    EXPECT_EQ(plan.steps[0].reduce, op);
    EXPECT_DOUBLE_EQ(plan.bytesPerRank,
                     lowerBoundBytes(Step::Kind::ReduceScatter, 4, 256));
  }
}

TEST(Planner, PartialToReplicateIsOneAllReduce) {
  Planner planner({{2, 4}, {}});
  Plan plan = mustPlan(
      planner,
      layoutOf({Placement::partial(ReduceOp::Sum), Placement::shard(0)},
               {2, 4}),
      layoutOf({Placement::replicate(), Placement::shard(0)}, {2, 4}), {8, 8});
  ASSERT_EQ(plan.steps.size(), 1u) << planStr(plan);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::AllReduce);
  EXPECT_EQ(plan.steps[0].axes, std::vector<int64_t>{0});
  EXPECT_DOUBLE_EQ(plan.bytesPerRank,
                   lowerBoundBytes(Step::Kind::AllReduce, 2, 2 * 8 * 4));
}

TEST(Planner, ShardToReplicateIsOneAllGather) {
  Planner planner({{4}, {}});
  Plan plan = mustPlan(planner, layoutOf({Placement::shard(1)}, {4}),
                       layoutOf({Placement::replicate()}, {4}), {8, 8});
  ASSERT_EQ(plan.steps.size(), 1u) << planStr(plan);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::AllGather);
  EXPECT_DOUBLE_EQ(plan.bytesPerRank,
                   lowerBoundBytes(Step::Kind::AllGather, 4, 256));
}

TEST(Planner, NestedShardsBeatDTensorsMinCostPlan) {
  // [S(0), S(0)] -> [R, S(0)]: DTensor's graph planner all-gathers the minor
  // axis, then the major one, then chunks: two collectives receiving 1 + 2
  // local shards. Under the same alpha-beta model ShardX's plan is never
  // dearer; on large tensors it receives 2 local shards (a strided
  // intermediate and an all-to-all), on small ones 3 in one collective.
  std::vector<int64_t> mesh = {2, 2};
  Planner planner({mesh, {}});
  Layout src = layoutOf({Placement::shard(0), Placement::shard(0)}, mesh);
  Layout dst = layoutOf({Placement::replicate(), Placement::shard(0)}, mesh);
  AxisCost c;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{16, 8}, std::vector<int64_t>{4096, 1024}}) {
    double local = shape[0] / 4.0 * shape[1] * 4;
    double dtensor = 2 * c.latencyUs + 3 * local / (c.bandwidthGBps * 1e3);
    Plan plan = mustPlan(planner, src, dst, shape);
    EXPECT_LE(plan.cost, dtensor) << planStr(plan);
    EXPECT_LE(plan.bytesPerRank, 3 * local) << planStr(plan);
    EXPECT_EQ(
        execute(mesh, src, dst, {16, 8}, mustPlan(planner, src, dst, {16, 8})),
        "");
    if (shape[0] == 4096)
      EXPECT_DOUBLE_EQ(plan.bytesPerRank, 2 * local) << planStr(plan);
  }
  // [S(0), S(0)] -> [S(0), R]: one all-gather of the minor axis, as DTensor.
  Plan toMajor = mustPlan(
      planner, src,
      layoutOf({Placement::shard(0), Placement::replicate()}, mesh), {16, 8});
  ASSERT_EQ(toMajor.steps.size(), 1u) << planStr(toMajor);
  EXPECT_EQ(toMajor.steps[0].kind, Step::Kind::AllGather);
  EXPECT_DOUBLE_EQ(toMajor.bytesPerRank, 16 / 4 * 8 * 4);
}

TEST(Planner, ReorderIsOnePermute) {
  // FSDP-over-TP StridedShard <-> plain nested shards: whole shards move.
  std::vector<int64_t> mesh = {2, 2};
  Planner planner({mesh, {}});
  Layout ss =
      layoutOf({Placement::stridedShard(0, 2), Placement::shard(0)}, mesh);
  Layout plain = layoutOf({Placement::shard(0), Placement::shard(0)}, mesh);
  Plan plan = mustPlan(planner, ss, plain, {8, 4});
  ASSERT_EQ(plan.numCollectives(), 1) << planStr(plan);
  EXPECT_EQ(execute(mesh, ss, plain, {8, 4}, plan), "");
}

TEST(Planner, ImpossibleRequestsSayWhy) {
  Planner planner({{2, 2}, {}});
  std::string error;
  Layout src = layoutOf({Placement::shard(0), Placement::replicate()}, {2, 2});
  Layout strided =
      layoutOf({Placement::stridedShard(0, 3), Placement::replicate()}, {2, 2});
  EXPECT_FALSE(planner.plan(src, strided, {7, 4}, 4, error));
  EXPECT_EQ(error, "Cannot reshard: [S(0), R] -> [S(0), R], strides = {0 = "
                   "[3]}: the target layout is invalid: dim 0 of size 7 is "
                   "not a multiple of the 6 blocks its strided splits need");
  EXPECT_FALSE(
      planner.plan(src, layoutOf({Placement::shard(0)}, {4}), {8}, 4, error));
  EXPECT_NE(error.find("different rank"), std::string::npos) << error;
  EXPECT_FALSE(planner.plan(
      layoutOf({Placement::shard(2), Placement::replicate()}, {2, 2}), src,
      {8, 8}, 4, error));
  EXPECT_NE(error.find("the source layout is invalid: shard dim 2"),
            std::string::npos)
      << error;
}

TEST(Planner, PlansAreCached) {
  Planner planner({{2, 2}, {}});
  Layout a = layoutOf({Placement::shard(0), Placement::shard(1)}, {2, 2});
  Layout b = layoutOf({Placement::shard(1), Placement::partial(ReduceOp::Max)},
                      {2, 2});
  Plan first = mustPlan(planner, a, b, {8, 8});
  Plan second = mustPlan(planner, a, b, {8, 8});
  EXPECT_EQ(planner.getCacheMisses(), 1);
  EXPECT_EQ(planner.getCacheHits(), 1);
  EXPECT_EQ(planStr(first), planStr(second));
  mustPlan(planner, a, b, {8, 16});
  EXPECT_EQ(planner.getCacheMisses(), 2);
}

TEST(Planner, NeverDropsAPendingReduction) {
  // Every Partial source reaches every target exactly: a plan may only end
  // in the requested layout, and the numbers prove no reduction was lost.
  std::vector<int64_t> mesh = {2, 3};
  Planner planner({mesh, {}});
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                               ReduceOp::Min, ReduceOp::Prod};
  std::vector<Layout> layouts = enumerateLayouts(mesh, 2, ops);
  int64_t pairs = 0;
  for (const Layout &src : layouts)
    for (const Layout &dst : layouts) {
      if (!src.hasPartial() && !dst.hasPartial())
        continue;
      for (const std::vector<int64_t> &shape :
           {std::vector<int64_t>{6, 12}, std::vector<int64_t>{5, 7}}) {
        std::string error;
        if (!src.verifyForShape(mesh, shape).empty() ||
            !dst.verifyForShape(mesh, shape).empty())
          continue;
        const Plan *plan = planner.plan(src, dst, shape, 4, error);
        ASSERT_TRUE(plan) << error;
        ASSERT_EQ(execute(mesh, src, dst, shape, *plan), "")
            << src.str() << " -> " << dst.str() << ": " << planStr(*plan);
        ++pairs;
      }
    }
  EXPECT_GT(pairs, 1000);
  std::printf("partial pairs executed: %lld\n", static_cast<long long>(pairs));
}

TEST(Planner, EveryPairExecutesExactly) {
  // All pairs of layouts (every placement kind, every order) for 2-D and
  // 3-D tensors on 1-D to 3-D meshes, with dims that divide and dims that
  // do not.
  struct Case {
    std::vector<int64_t> mesh;
    std::vector<std::vector<int64_t>> shapes;
  };
  std::vector<Case> cases = {
      {{4}, {{8, 12}, {7, 5}, {1, 6}, {8, 4, 6}, {7, 5, 1}}},
      {{2, 2}, {{8, 12}, {7, 5}, {1, 6}, {8, 4, 6}, {7, 5, 1}}},
      {{2, 3}, {{12, 6}, {7, 5}, {1, 6}, {12, 6, 2}, {7, 5, 1}}},
      {{3, 2}, {{12, 6}, {7, 5}, {12, 6, 2}, {5, 7, 1}}},
      {{2, 2, 2}, {{8, 8}, {7, 5}, {8, 4, 2}, {5, 3, 1}}},
  };
  int64_t pairs = 0;
  for (const Case &c : cases) {
    Planner planner({c.mesh, {}});
    for (const auto &shape : c.shapes) {
      std::vector<Layout> layouts = enumerateLayouts(
          c.mesh, static_cast<int64_t>(shape.size()), {ReduceOp::Sum});
      for (const Layout &src : layouts) {
        if (!src.verifyForShape(c.mesh, shape).empty())
          continue;
        for (const Layout &dst : layouts) {
          if (!dst.verifyForShape(c.mesh, shape).empty())
            continue;
          std::string error;
          const Plan *plan = planner.plan(src, dst, shape, 4, error);
          ASSERT_TRUE(plan) << error;
          std::string failure = execute(c.mesh, src, dst, shape, *plan);
          ASSERT_EQ(failure, "")
              << src.str() << " -> " << dst.str() << ": " << planStr(*plan);
          ++pairs;
        }
      }
    }
  }
  EXPECT_GT(pairs, 10000);
  std::printf("pairs executed: %lld\n", static_cast<long long>(pairs));
}

TEST(Planner, CostsObeyTheTriangleInequality) {
  std::vector<int64_t> mesh = {2, 2, 2};
  std::vector<int64_t> shape = {8, 8};
  Planner planner({mesh, {}});
  std::vector<Layout> layouts =
      enumerateLayouts(mesh, 2, {ReduceOp::Sum, ReduceOp::Max}, true);
  std::vector<Layout> valid;
  for (const Layout &l : layouts)
    if (l.verifyForShape(mesh, shape).empty())
      valid.push_back(l);
  size_t n = valid.size();
  std::vector<double> cost(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      cost[i * n + j] = mustPlan(planner, valid[i], valid[j], shape).cost;
  int64_t triples = 0, violations = 0;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      for (size_t c = 0; c < n; ++c) {
        if (cost[a * n + c] > cost[a * n + b] + cost[b * n + c] + 1e-9) {
          if (violations++ < 5)
            std::printf("%s -> %s via %s: %f > %f + %f\n",
                        valid[a].str().c_str(), valid[c].str().c_str(),
                        valid[b].str().c_str(), cost[a * n + c],
                        cost[a * n + b], cost[b * n + c]);
        }
        ++triples;
      }
  std::printf("layouts: %zu, triples: %lld violations %lld\n", n,
              static_cast<long long>(triples), (long long)violations);
  EXPECT_EQ(violations, 0);
}

TEST(Planner, FourDimensionalMeshesExecuteExactly) {
  // Every pair of R / S(0) / S(1) / P(sum) layouts on 4-D meshes, one with
  // an axis of size 1.
  int64_t pairs = 0;
  for (const std::vector<int64_t> &mesh :
       {std::vector<int64_t>{2, 1, 3, 2}, std::vector<int64_t>{2, 2, 2, 2}}) {
    Planner planner({mesh, {}});
    std::vector<Layout> layouts =
        enumerateLayouts(mesh, 2, {ReduceOp::Sum}, /*variants=*/false);
    for (const std::vector<int64_t> &shape :
         {std::vector<int64_t>{24, 12}, std::vector<int64_t>{7, 5}}) {
      for (const Layout &src : layouts)
        for (const Layout &dst : layouts) {
          if (!src.verifyForShape(mesh, shape).empty() ||
              !dst.verifyForShape(mesh, shape).empty())
            continue;
          // Every 8th pair keeps the test fast; the sweep is deterministic.
          if ((pairs++ & 7) != 0)
            continue;
          std::string error;
          const Plan *plan = planner.plan(src, dst, shape, 4, error);
          ASSERT_TRUE(plan) << error;
          ASSERT_EQ(execute(mesh, src, dst, shape, *plan), "")
              << src.str() << " -> " << dst.str() << ": " << planStr(*plan);
        }
    }
  }
  EXPECT_GT(pairs, 50000);
  std::printf("4-D mesh pairs visited: %lld (every 8th executed)\n",
              static_cast<long long>(pairs));
}

TEST(Planner, ExplicitSizesExecuteExactly) {
  // Layouts with explicit uneven sizes, on one axis and nested over two,
  // to and from every layout of the sweep.
  std::vector<int64_t> mesh = {2, 2};
  std::vector<int64_t> shape = {7, 5};
  Planner planner({mesh, {}});
  std::vector<Layout> explicitSizes;
  for (auto [placements, sizes] :
       std::vector<std::pair<std::vector<Placement>,
                             std::map<int64_t, std::vector<int64_t>>>>{
           {{Placement::shard(0), Placement::replicate()}, {{0, {5, 2}}}},
           {{Placement::replicate(), Placement::shard(1)}, {{1, {0, 5}}}},
           {{Placement::shard(0), Placement::shard(0)}, {{0, {1, 2, 3, 1}}}},
           {{Placement::shard(0), Placement::shard(1)},
            {{0, {4, 3}}, {1, {2, 3}}}},
           {{Placement::partial(ReduceOp::Sum), Placement::shard(0)},
            {{0, {6, 1}}}}}) {
    LayoutSpelling s;
    s.placements = placements;
    s.sizes = sizes;
    std::string error;
    std::optional<Layout> l = Layout::fromSpelling(s, mesh, error);
    ASSERT_TRUE(l) << error;
    ASSERT_EQ(l->verifyForShape(mesh, shape), "");
    explicitSizes.push_back(*l);
  }
  std::vector<Layout> others = enumerateLayouts(
      mesh, 2, {ReduceOp::Sum, ReduceOp::Max}, /*variants=*/true);
  int64_t pairs = 0;
  for (const Layout &a : explicitSizes)
    for (const Layout &b : others) {
      if (!b.verifyForShape(mesh, shape).empty())
        continue;
      for (auto [src, dst] : {std::pair{a, b}, std::pair{b, a}}) {
        std::string error;
        const Plan *plan = planner.plan(src, dst, shape, 4, error);
        ASSERT_TRUE(plan) << error;
        ASSERT_EQ(execute(mesh, src, dst, shape, *plan), "")
            << src.str() << " -> " << dst.str() << ": " << planStr(*plan);
        ++pairs;
      }
    }
  EXPECT_GT(pairs, 250);
  std::printf("explicit-sizes pairs executed: %lld\n",
              static_cast<long long>(pairs));
}

// The mesh model's group cost, the one alpha-beta model the planner, the
// collective scheduler and the bucketing pass share.
TEST(MeshModel, GroupCostOfOneAxisIsTheAxisCost) {
  MeshSpec mesh{{8}, {{7.5, 50.0}}};
  AxisCost c = mesh.groupCost(std::vector<int64_t>{0});
  EXPECT_EQ(c.latencyUs, 7.5);
  EXPECT_EQ(c.bandwidthGBps, 50.0);
  // 1e6 bytes at 50 GB/s: 20 us, plus the latency.
  EXPECT_DOUBLE_EQ(c.timeUs(1e6), 27.5);
  EXPECT_EQ(mesh.groupSize(std::vector<int64_t>{0}), 8);
  // No per-axis costs: every axis has the defaults.
  MeshSpec defaults{{4}, {}};
  AxisCost d = defaults.groupCost(std::vector<int64_t>{0});
  EXPECT_EQ(d.latencyUs, AxisCost().latencyUs);
  EXPECT_EQ(d.bandwidthGBps, AxisCost().bandwidthGBps);
}

TEST(MeshModel, GroupCostTakesTheSlowestLatencyAndNarrowestBandwidth) {
  // Axis 0 across nodes (slow link, high latency), axis 1 within a node.
  MeshSpec mesh{{2, 4}, {{20.0, 25.0}, {3.0, 400.0}}};
  AxisCost inter = mesh.groupCost(std::vector<int64_t>{0});
  AxisCost intra = mesh.groupCost(std::vector<int64_t>{1});
  AxisCost both = mesh.groupCost(std::vector<int64_t>{0, 1});
  AxisCost swapped = mesh.groupCost(std::vector<int64_t>{1, 0});
  EXPECT_EQ(inter.latencyUs, 20.0);
  EXPECT_EQ(intra.bandwidthGBps, 400.0);
  EXPECT_EQ(both.latencyUs, 20.0);
  EXPECT_EQ(both.bandwidthGBps, 25.0);
  EXPECT_EQ(swapped.latencyUs, both.latencyUs);
  EXPECT_EQ(swapped.bandwidthGBps, both.bandwidthGBps);
  EXPECT_DOUBLE_EQ(both.timeUs(5e5), 40.0);
  EXPECT_DOUBLE_EQ(intra.timeUs(4e5), 4.0);
  EXPECT_EQ(mesh.groupSize(std::vector<int64_t>{0, 1}), 8);
  // A mixed group: latency from one axis, bandwidth from the other.
  MeshSpec mixed{{2, 2}, {{10.0, 300.0}, {1.0, 100.0}}};
  AxisCost m = mixed.groupCost(std::vector<int64_t>{0, 1});
  EXPECT_EQ(m.latencyUs, 10.0);
  EXPECT_EQ(m.bandwidthGBps, 100.0);
  EXPECT_TRUE(mixed.hasAxes(std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(mixed.hasAxes(std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(mixed.hasAxes(std::vector<int64_t>{-1}));
}

TEST(MeshModel, PlannerStepsCostTheirGroup) {
  MeshSpec mesh{{2, 4}, {{20.0, 25.0}, {3.0, 400.0}}};
  Planner planner(mesh);
  std::vector<int64_t> meshShape = mesh.shape;
  // P(sum) over both axes -> R: one all-reduce over the flattened group.
  Plan plan = mustPlan(
      planner,
      layoutOf({Placement::partial(ReduceOp::Sum),
                Placement::partial(ReduceOp::Sum)},
               meshShape),
      layoutOf({Placement::replicate(), Placement::replicate()}, meshShape),
      {64, 64});
  ASSERT_FALSE(plan.steps.empty()) << planStr(plan);
  double total = 0;
  for (const Step &step : plan.steps) {
    if (!step.isCollective())
      continue;
    EXPECT_EQ(step.cost, mesh.groupCost(step.axes).timeUs(step.bytesPerRank))
        << step.str();
    total += step.cost;
  }
  EXPECT_DOUBLE_EQ(plan.cost, total);
}
