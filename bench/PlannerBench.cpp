//===- PlannerBench.cpp - Planning time and bytes against lower bounds ----===//
//
// Part of ShardX.
//
// Plans every pair of layouts (R, S(0), S(1), P(sum), P(max) on each axis,
// every order of nested splits) of a 2-D tensor on a (2,2,2) mesh, cold
// (empty cache) and cached, and compares the bytes per rank of every
// single-axis transition with the per-rank lower bound of its collective.
// Ratios are measured in the same run; absolute times are for reference.
//
// Usage: shardx-planner-bench [rows cols] [limit]
//
//===----------------------------------------------------------------------===//

#include "shardx/Planner/Planner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

using namespace shardx;

static std::vector<Layout> enumerate(const std::vector<int64_t> &mesh) {
  std::vector<Placement> choices = {
      Placement::replicate(), Placement::shard(0), Placement::shard(1),
      Placement::partial(ReduceOp::Sum), Placement::partial(ReduceOp::Max)};
  std::vector<Layout> out;
  std::vector<Placement> ps(mesh.size());
  std::function<void(size_t)> rec = [&](size_t a) {
    if (a == mesh.size()) {
      LayoutSpelling s;
      s.placements = ps;
      std::string e;
      auto l = Layout::fromSpelling(s, mesh, e);
      if (!l)
        return;
      out.push_back(*l);
      for (const DimSharding &ds : l->getDims()) {
        std::vector<int64_t> axes;
        for (const Split &sp : ds.splits)
          axes.push_back(sp.axis);
        while (std::next_permutation(axes.begin(), axes.end())) {
          LayoutSpelling o = s;
          o.order[ds.dim] = axes;
          if (auto x = Layout::fromSpelling(o, mesh, e))
            out.push_back(*x);
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
  return out;
}

int main(int argc, char **argv) {
  std::vector<int64_t> mesh = {2, 2, 2};
  std::vector<int64_t> shape = {1024, 1024};
  if (argc >= 3)
    shape = {std::atoll(argv[1]), std::atoll(argv[2])};
  size_t limit = argc >= 4 ? std::atoll(argv[3]) : SIZE_MAX;
  std::vector<Layout> layouts = enumerate(mesh);
  std::vector<std::pair<Layout, Layout>> pairs;
  for (const Layout &a : layouts)
    for (const Layout &b : layouts)
      if (pairs.size() < limit)
        pairs.push_back({a, b});

  Planner planner({mesh, {}});
  std::string error;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::vector<Plan> plans;
  for (auto &[a, b] : pairs) {
    const Plan *plan = planner.plan(a, b, shape, 4, error);
    if (!plan) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    plans.push_back(*plan);
  }
  auto t1 = Clock::now();
  for (auto &[a, b] : pairs)
    planner.plan(a, b, shape, 4, error);
  auto t2 = Clock::now();
  double cold =
      std::chrono::duration<double, std::micro>(t1 - t0).count() / pairs.size();
  double cached =
      std::chrono::duration<double, std::micro>(t2 - t1).count() / pairs.size();

  // Bytes per rank against the lower bound, for plans of one collective
  // over one axis.
  double tensorBytes = 4.0 * shape[0] * shape[1];
  int64_t single = 0, atBound = 0;
  double worst = 1.0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Plan &p = plans[i];
    if (p.numCollectives() != 1)
      continue;
    const Step *c = nullptr;
    for (const Step &s : p.steps)
      if (s.isCollective())
        c = &s;
    if (c->axes.size() != 1 || c->kind == Step::Kind::Permute)
      continue;
    int64_t n = mesh[c->axes[0]];
    // The bound is for the bytes the collective acts on: the gathered size
    // for all_gather, the reduced size for the others.
    double acted = 0;
    int64_t shards = 1;
    const Layout &big = c->kind == Step::Kind::AllGather ? c->after : c->before;
    for (int64_t a = 0; a < 3; ++a)
      if (big.getShardedDim(a) >= 0)
        shards *= mesh[a];
    acted = tensorBytes / shards;
    if (c->kind == Step::Kind::AllToAll)
      acted *= n; // the bound is stated for the all-to-all's whole tensor
    double bound = lowerBoundBytes(c->kind, n, acted);
    double ratio = c->bytesPerRank / bound;
    ++single;
    if (ratio <= 1.0 + 1e-12)
      ++atBound;
    worst = std::max(worst, ratio);
  }
  std::printf("mesh 2x2x2, tensor %lldx%lld f32, %zu layouts, %zu pairs\n",
              static_cast<long long>(shape[0]),
              static_cast<long long>(shape[1]), layouts.size(), pairs.size());
  std::printf("planning time per pair: cold %.1f us, cached %.3f us "
              "(cached/cold %.5f)\n",
              cold, cached, cached / cold);
  std::printf("single-axis one-collective plans: %lld, at the lower bound: "
              "%lld, worst bytes/bound ratio %.3f\n",
              static_cast<long long>(single), static_cast<long long>(atBound),
              worst);
  return 0;
}
