//===- AutoShardSpace.h - shardx-auto-shard's choices, solver -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The MLIR-free half of shardx-auto-shard (AutoShard.cpp): the layouts a
// parameter group may take, and the surrogate of the step time and peak over
// a choice per group with its solver, a Lagrangian relaxation of the memory
// limit followed by a local search among plans that fit (docs/Memory.md,
// "Automatic sharding under a budget"), and the cache of plans priced.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARDSPACE_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARDSPACE_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/ArrayRef.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir::shardx::autoshard {

/// One layout a group may take: its placements (one per mesh axis) and
/// the canonical layout they make.
struct Choice {
  std::vector<Placement> placements;
  Layout layout;
  std::string text; // "[S(0), R]", as users write it (Layout::str())
};

/// Every layout of `type` that shards each mesh axis on one dim or not at
/// all, evenly; replicated first. `batchOnly` allows dim 0 only.
std::vector<Choice> layoutChoices(RankedTensorType type,
                                  ArrayRef<int64_t> meshShape, bool batchOnly);

/// How a plan's local program recomputes activations (docs/Compiler.md,
/// "Activation recomputation"): the policies shardx-auto-shard tries, in
/// this order, where a plan does not fit its budget without.
enum class Recompute : uint8_t { None, Selective, Aggressive };
inline constexpr Recompute kRecomputePolicies[] = {
    Recompute::None, Recompute::Selective, Recompute::Aggressive};
inline const char *recomputeName(Recompute r) {
  return r == Recompute::None        ? "none"
         : r == Recompute::Selective ? "selective"
                                     : "aggressive";
}

/// A priced plan: its modeled step time and the peak of its local program,
/// with the recomputation it needs to fit (its copies' compute is in
/// `time`: `recomputeUs` of it).
struct Priced {
  double time = std::numeric_limits<double>::infinity();
  int64_t peak = std::numeric_limits<int64_t>::max();
  Recompute recompute = Recompute::None;
  int64_t recomputedOps = 0;
  double recomputeUs = 0;
};

/// A plan: a choice per group.
using Picks = std::vector<unsigned>;

/// The plans priced in full, each priced once, and the smallest peak
/// among them.
class PricedPlans {
public:
  const Priced *lookup(const Picks &plan) const {
    auto it = prices.find(plan);
    return it == prices.end() ? nullptr : &it->second;
  }
  void insert(const Picks &plan, Priced price) {
    prices[plan] = price;
    smallest = std::min(smallest, price.peak);
  }
  /// INT64_MAX while no plan could be priced.
  int64_t smallestPeak() const { return smallest; }
  auto begin() const { return prices.begin(); }
  auto end() const { return prices.end(); }

private:
  std::map<Picks, Priced> prices;
  int64_t smallest = std::numeric_limits<int64_t>::max();
};

/// The surrogate under one input layout.
struct Surrogate {
  /// The plan the changes are measured from.
  std::vector<unsigned> center;
  double baseTime = 0;
  int64_t basePeak = 0;
  std::vector<std::vector<double>> time;  // [group][choice] change
  std::vector<std::vector<double>> bytes; // [group][choice] change
  struct Pair {
    unsigned g, h;
    std::vector<std::vector<double>> time; // [choice of g][choice of h]
  };
  std::vector<Pair> pairs;
  std::vector<std::vector<unsigned>> pairsOf; // group -> indices in pairs
};

/// The surrogate time and peak of `pick` (a choice per group).
std::pair<double, double> evaluate(const Surrogate &s, ArrayRef<unsigned> pick);

/// The surrogate's fastest plan with a peak <= `limit` (none when no plan
/// fits; a plan of no groups is empty).
std::optional<std::vector<unsigned>> solve(const Surrogate &s, double limit);

} // namespace mlir::shardx::autoshard

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARDSPACE_H
