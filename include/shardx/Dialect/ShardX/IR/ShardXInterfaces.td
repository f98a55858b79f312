//===- ShardXInterfaces.td - ShardX op interfaces ----------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_SHARDXINTERFACES_TD
#define SHARDX_DIALECT_SHARDX_IR_SHARDXINTERFACES_TD

include "mlir/IR/OpBase.td"

def ShardX_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let description = [{
    An op that runs over a group of ranks: the ranks that differ only in
    their coordinates on the mesh axes `getAxes()` of the mesh
    `getMeshAttr()`. Passes that handle every collective alike (the lowering
    to runtime calls, the optimizer) read the group, the reduction and the
    explicit per-member sizes through this interface, not through attribute
    names.
  }];
  let cppNamespace = "::mlir::shardx";
  let methods = [
    InterfaceMethod<
      "The mesh the group lives on.",
      "::mlir::FlatSymbolRefAttr", "getMeshAttr">,
    InterfaceMethod<
      "The group's mesh axes, major first (the group order).",
      "::llvm::ArrayRef<int64_t>", "getAxes">,
    InterfaceMethod<
      "How the op combines the members' values (`all_reduce`, "
      "`reduce_scatter`, `partition_value`), or none when it only moves "
      "them.",
      "std::optional<::mlir::shardx::ReductionKind>", "getCollectiveReduction",
      (ins), [{}], [{
        if constexpr (::mlir::shardx::detail::hasReduction<ConcreteOp>)
          return $_op.getReduction();
        else
          return std::nullopt;
      }]>,
    InterfaceMethod<
      "The explicit per-member sizes of the moved dim (uneven shards), if "
      "the op has them.",
      "std::optional<::llvm::ArrayRef<int64_t>>", "getMemberSizes",
      (ins), [{}], [{
        if constexpr (::mlir::shardx::detail::hasSizes<ConcreteOp>)
          return $_op.getSizes();
        else
          return std::nullopt;
      }]>,
    InterfaceMethod<
      "The number of ranks in the group; an error at the op when its mesh "
      "is unknown.",
      "::mlir::FailureOr<int64_t>", "getGroupSize", (ins), [{}], [{
        return ::mlir::shardx::detail::getGroupSize(
            $_op.getOperation(), $_op.getMeshAttr(), $_op.getAxes());
      }]>,
  ];
}

#endif // SHARDX_DIALECT_SHARDX_IR_SHARDXINTERFACES_TD
