//===- CostModel.cpp - What a propagation strategy costs ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "CostModel.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/Sequence.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace mlir::shardx;

CostModel::CostModel(MeshSpec spec, double computeRate)
    : planner(std::move(spec)), computeRate(computeRate),
      usPerIteration(computeRate > 0 ? 1e6 / computeRate : 0) {}

double CostModel::planCost(Type type, const Layout &from, const Layout &to) {
  auto tensor = cast<RankedTensorType>(type);
  // The planner moves integers and floats only (an `index` has no width):
  // any other reshard cannot be planned, and shardx-reshard-planning says so.
  if (!tensor.hasStaticShape() || !tensor.getElementType().isIntOrFloat())
    return std::numeric_limits<double>::infinity();
  std::string error;
  int64_t bytes = std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
  const Plan *plan = planner.plan(
      from, to,
      std::vector<int64_t>(tensor.getShape().begin(), tensor.getShape().end()),
      bytes, error);
  if (!plan)
    return std::numeric_limits<double>::infinity();
  return plan->cost;
}

double CostModel::planCost(Type type, LayoutAttr from, LayoutAttr to) {
  auto key = std::make_tuple(type, Attribute(from), Attribute(to));
  auto it = planCosts.find(key);
  if (it != planCosts.end())
    return it->second;
  double cost = planCost(type, from.getLayout(), to.getLayout());
  planCosts[key] = cost;
  return cost;
}

double CostModel::reshardsCost(Type type, LayoutAttr from,
                               ArrayRef<LayoutAttr> needed) {
  SmallVector<LayoutAttr, 4> seen;
  double cost = 0;
  for (LayoutAttr to : needed) {
    if (!to || to == from || llvm::is_contained(seen, to))
      continue;
    seen.push_back(to);
    cost += planCost(type, from, to);
  }
  return cost;
}

double CostModel::work(const ShardingRule &rule, int64_t shardedWork) {
  auto nestSize = [&](auto &&factors) {
    double iterations = 1;
    for (int64_t f : factors) {
      int64_t size = rule.factorSizes[f];
      iterations *= size == ShapedType::kDynamic ? 1 : size;
    }
    return iterations;
  };
  double iterations = 0;
  if (rule.nests.empty())
    iterations = nestSize(llvm::seq<int64_t>(0, rule.factorSizes.size()));
  for (ArrayRef<int64_t> nest : rule.nests)
    iterations += nestSize(nest);
  return iterations / shardedWork;
}
