//===- CostModel.h - What a propagation strategy costs ----------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The prices shardx-propagate compares strategies by: the planner's
// alpha-beta cost of a reshard (its cheapest plan of collectives), the
// reshards a value needs to reach every distinct layout its consumers want
// (one redistribute per layout, as shardx-insert-reshards shares them), and
// the time an op's local loop takes at a compute rate. Nothing here knows
// how strategies are searched (PropagationSearch.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_COSTMODEL_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_COSTMODEL_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Planner/Planner.h"
#include "shardx/Rules/ShardingRule.h"

#include "llvm/ADT/DenseMap.h"

#include <array>
#include <tuple>

namespace mlir::shardx {

class CostModel {
public:
  /// Prices reshards on the mesh `spec` describes; an op's loop runs
  /// `computeRate` iterations per second per rank (0: loops are free).
  CostModel(MeshSpec spec, double computeRate);

  /// A cost model of the same mesh and compute rate with an empty plan
  /// cache: one per thread (the cache is not shared between threads).
  CostModel withEmptyCache() const {
    return CostModel(planner.getMesh(), computeRate);
  }

  /// Microseconds of the cheapest plan taking a value of `type` from `from`
  /// to `to`; infinity when the planner has none or the shape is dynamic.
  double planCost(Type type, const Layout &from, const Layout &to);
  /// The same, remembered per (type, from, to).
  double planCost(Type type, LayoutAttr from, LayoutAttr to);

  /// Microseconds of resharding a value of `type` held in `from` to each
  /// distinct layout of `needed`, once each, in order (null entries and
  /// `from` itself are free).
  double reshardsCost(Type type, LayoutAttr from, ArrayRef<LayoutAttr> needed);

  /// Iterations per rank of the loop `rule` describes when `shardedWork`
  /// ranks share its iteration space (a dynamic factor counts as 1).
  static double work(const ShardingRule &rule, int64_t shardedWork);
  /// Microseconds those iterations take at the compute rate.
  double computeUs(const ShardingRule &rule, int64_t shardedWork) const {
    return usPerIteration * work(rule, shardedWork);
  }
  double getUsPerIteration() const { return usPerIteration; }
  /// Microseconds of halo exchanges ((mesh axis, bytes) per permute that
  /// shardx-lower-halos emits: one per side, one for both in a group of
  /// two): one step of the axis's alpha-beta cost each.
  double haloUs(ArrayRef<std::pair<int64_t, int64_t>> halos) const {
    double us = 0;
    for (auto [axis, bytes] : halos)
      us += planner.getMesh().groupCost(std::array<int64_t, 1>{axis}).timeUs(
          static_cast<double>(bytes));
    return us;
  }

private:
  Planner planner;
  double computeRate;
  double usPerIteration;
  DenseMap<std::tuple<Type, Attribute, Attribute>, double> planCosts;
};

/// Overrides every axis's link of `spec` with the passes' `bandwidth`
/// (bytes/s, when > 0) and `latency` (seconds, when >= 0) options.
inline void overrideLinkCosts(MeshSpec &spec, double bandwidth,
                              double latency) {
  if (bandwidth <= 0 && latency < 0)
    return;
  spec.costs.resize(spec.shape.size());
  for (auto &c : spec.costs) {
    if (bandwidth > 0)
      c.bandwidthGBps = bandwidth / 1e9;
    if (latency >= 0)
      c.latencyUs = latency * 1e6;
  }
}

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_COSTMODEL_H
