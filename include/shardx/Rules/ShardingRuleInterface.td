//===- ShardingRuleInterface.td - Sharding rules of ops ----*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RULES_SHARDINGRULEINTERFACE_TD
#define SHARDX_RULES_SHARDINGRULEINTERFACE_TD

include "mlir/IR/OpBase.td"

def ShardX_ShardingRuleOpInterface
    : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::shardx";
  let description = [{
    Describes how an op's tensor operands and results may be sharded, in
    factors (einsum-like loop dims): each factor has a size and a kind
    (parallel, reduction, or needing replication), and every operand and
    result dim maps to the factors it is made of, major to minor. A layout
    of one value then maps to the other values through the factors.
    Attached to other dialects' ops as external models.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the op's sharding rule, or failure when this instance has none "
      "(e.g. an elementwise op on scalars).",
      "::mlir::FailureOr<::mlir::shardx::ShardingRule>", "getShardingRule",
      (ins)>
  ];
}

#endif // SHARDX_RULES_SHARDINGRULEINTERFACE_TD
