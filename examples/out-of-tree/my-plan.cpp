//===- my-plan.cpp - Plans a reshard with ShardX's planner ----------------===//
//
// Plans the reshard of a 16x32 f32 tensor on a 2x2 mesh from rows split
// over the first axis and columns over the second ([S(0), S(1)]) to rows
// split over both ([S(0), S(0)]), and prints each step. The planner needs
// no MLIR or LLVM.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/Layout.h"
#include "shardx/Planner/Planner.h"

#include <cstdio>

int main() {
  using shardx::Placement;
  std::vector<int64_t> meshShape = {2, 2};
  std::string error;
  std::optional<shardx::Layout> src = shardx::Layout::fromPlacements(
      {Placement::shard(0), Placement::shard(1)}, meshShape, error);
  std::optional<shardx::Layout> dst = shardx::Layout::fromPlacements(
      {Placement::shard(0), Placement::shard(0)}, meshShape, error);
  if (!src || !dst) {
    std::fprintf(stderr, "bad layout: %s\n", error.c_str());
    return 1;
  }
  shardx::Planner planner(shardx::MeshSpec{meshShape, {}});
  const shardx::Plan *plan = planner.plan(*src, *dst, /*shape=*/{16, 32},
                                          /*elementBytes=*/4, error);
  if (!plan) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::printf("%s -> %s: %zu step(s), %lld collective(s), %.0f bytes per "
              "rank\n",
              src->str().c_str(), dst->str().c_str(), plan->steps.size(),
              static_cast<long long>(plan->numCollectives()),
              plan->bytesPerRank);
  for (const shardx::Step &step : plan->steps)
    std::printf("  %s\n", step.str().c_str());
  return 0;
}
