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

    The rule also answers what propagation must know of the op's body to
    keep a Partial exact: the combiner of its reductions, whether their
    accumulators start at that combiner's identity, whether its results are
    linear in some operands, and whether its results are only a shape or a
    splat. The defaults answer "no", which is always safe: a reduction
    factor stays whole, a pending Partial is reduced first, a value is
    resharded rather than rebuilt.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the op's sharding rule, or failure when this instance has none "
      "(e.g. an elementwise op on scalars).",
      "::mlir::FailureOr<::mlir::shardx::ShardingRule>", "getShardingRule",
      (ins)>,
    InterfaceMethod<
      "Returns the combiner (sum, max, min, prod) that the partial results of "
      "a sharded reduction factor combine with, or none when the op's "
      "reduction factors may not be sharded.",
      "std::optional<::shardx::ReduceOp>", "getReductionKind", (ins), "",
      [{ return std::nullopt; }]>,
    InterfaceMethod<
      "Returns whether the accumulators the op reduces into start at the "
      "identity of its combiner (so each rank's term of a sharded reduction "
      "is exact, e.g. a linalg.fill of 0 for a sum).",
      "bool", "hasIdentityInit", (ins), "", [{ return false; }]>,
    InterfaceMethod<
      "Returns whether the op's results are linear in the operands marked in "
      "`partial` (operand numbers), its inits being accumulators: then those "
      "operands may stay Partial(sum|avg) through it.",
      "bool", "isLinearIn", (ins "const ::llvm::SmallBitVector &":$partial),
      "", [{ return false; }]>,
    InterfaceMethod<
      "Returns whether the op's tensor results are only a shape or a splat "
      "(tensor.empty, a fill of one, a splat constant): rebuilt in any "
      "layout instead of resharded.",
      "bool", "isShapeOnly", (ins), "", [{ return false; }]>
  ];
}

#endif // SHARDX_RULES_SHARDINGRULEINTERFACE_TD
