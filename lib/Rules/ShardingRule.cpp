//===- ShardingRule.cpp - Sharding rules of ops ---------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Rules/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shardx;

#include "shardx/Rules/ShardingRuleInterface.cpp.inc"

/// Factor names i, j, k, l, m, n, ... then f<index>.
static std::string factorName(int64_t f) {
  static const char *names = "ijklmnopqrstuvwxyzabcdefgh";
  return f < 26 ? std::string(1, names[f]) : "f" + std::to_string(f);
}

static std::string
valuesStr(const SmallVector<SmallVector<SmallVector<int64_t>>> &values) {
  std::string s = "(";
  for (size_t v = 0; v < values.size(); ++v) {
    s += v ? ", [" : "[";
    for (size_t d = 0; d < values[v].size(); ++d) {
      if (d)
        s += ", ";
      if (values[v][d].empty())
        s += "1";
      for (size_t k = 0; k < values[v][d].size(); ++k)
        s += (k ? "*" : "") + factorName(values[v][d][k]);
    }
    s += "]";
  }
  return s + ")";
}

std::string ShardingRule::str() const {
  std::string s = valuesStr(operands) + " -> " + valuesStr(results) + " {";
  for (size_t f = 0; f < factorSizes.size(); ++f)
    s += (f ? ", " : "") + factorName(f) + "=" +
         (ShapedType::isDynamic(factorSizes[f])
              ? std::string("?")
              : std::to_string(factorSizes[f]));
  s += "}";
  for (FactorKind kind : {FactorKind::Reduction, FactorKind::NeedReplication}) {
    std::string list;
    for (size_t f = 0; f < factorKinds.size(); ++f)
      if (factorKinds[f] == kind)
        list += (list.empty() ? "" : ", ") + factorName(f);
    if (!list.empty())
      s += std::string(kind == FactorKind::Reduction ? " reduction={"
                                                     : " need_replication={") +
           list + "}";
  }
  for (const WindowedDim &w : windows)
    s += std::string(" window(") + (w.result ? "result " : "operand ") +
         std::to_string(w.tensor) + " dim " + std::to_string(w.dim) +
         ": low=" + std::to_string(w.low) + " high=" + std::to_string(w.high) +
         (w.halo ? " halo" : "") +
         (w.stride != 1 ? " stride=" + std::to_string(w.stride) : "") +
         (w.unread ? " unread=" + std::to_string(w.unread) : "") + ")";
  return s;
}

void mlir::shardx::registerShardingRuleExternalModels(
    DialectRegistry &registry) {
  registerElementwiseShardingRules(registry);
  registerLinalgShardingRules(registry);
  registerTensorShardingRules(registry);
  registerAttentionShardingRules(registry);
}

bool mlir::shardx::isRematerializable(Value v) {
  auto rule = v.getDefiningOp<ShardingRuleOpInterface>();
  return rule && rule.isShapeOnly();
}
