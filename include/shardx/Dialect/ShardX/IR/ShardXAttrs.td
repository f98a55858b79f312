//===- ShardXAttrs.td - ShardX attributes ------------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_SHARDXATTRS_TD
#define SHARDX_DIALECT_SHARDX_IR_SHARDXATTRS_TD

include "shardx/Dialect/ShardX/IR/ShardXBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def ShardX_DimShardingAttr : ShardX_Attr<"DimSharding", "dim_sharding"> {
  let summary = "the splits of one tensor dim (part of a layout)";
  let description = [{
    The canonical record of how one tensor dim is split: the mesh axes that
    split it, major to minor, the stride of each split (the number of blocks
    of the dim, major to the split, that no mesh axis splits) and, for uneven
    layouts, explicit shard sizes. It appears inside `#shardx.layout` and is
    not written by users:

    ```mlir
    #shardx.dim_sharding<0, axes = [1, 0], strides = [1, 1], sizes = []>
    ```
  }];
  let parameters = (ins
    "int64_t":$dim,
    ArrayRefParameter<"int64_t", "mesh axes, major to minor">:$axes,
    ArrayRefParameter<"int64_t", "stride of each split">:$strides,
    ArrayRefParameter<"int64_t", "explicit shard sizes, or empty">:$sizes
  );
  let hasCustomAssemblyFormat = 1;
}

def ShardX_LayoutAttr : ShardX_Attr<"Layout", "layout"> {
  let summary = "the layout of a global tensor on a device mesh";
  let description = [{
    A DTensor-style layout: one placement per axis of the mesh `@mesh`.

    ```mlir
    #shardx.layout<@mesh, [S(0), R]>          // rows split over axis 0
    #shardx.layout<@mesh, [S(0), S(0)]>       // dim 0 split over axis 0, then axis 1
    #shardx.layout<@mesh, [SS(0, 4), S(0)]>   // StridedShard: axis 1 splits first
    #shardx.layout<@mesh, [P(sum), S(1)]>     // pending sum over axis 0
    #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>
    #shardx.layout<@mesh, [S(0)], strides = {0 = [6]}>
    #shardx.layout<@mesh, [S(0), R], sizes = {0 = [3, 2]}>
    ```

    Placements:
    * `S(d)`: Shard tensor dim `d` over the axis (`torch.chunk` sizes when
      the dim does not divide: ceil-sized chunks, trailing ranks may get less
      or nothing).
    * `SS(d, sf)`: StridedShard. On an axis of size `n`, dim `d` is cut into
      `sf * n` blocks and the axis's rank `j` holds blocks `j, j + n, ...`
      (DTensor's `_StridedShard`), applied to the piece the axes before it
      (in mesh order) left.
    * `R`: Replicate.
    * `P(op)`: Partial; each rank holds a term of a pending `op` reduction,
      `op` one of `sum`, `avg`, `max`, `min`, `prod`.

    Optional clauses:
    * `order = {d = [a, b, ...]}`: the mesh axes that split dim `d`, major to
      minor, when that is not mesh order.
    * `strides = {d = [s_1, ...]}`: per split of dim `d` (in order), the
      number of blocks of the dim major to the split that no mesh axis
      splits. Strides must be non-decreasing, each a multiple of the one
      before; a strided dim's size must divide into its blocks.
    * `sizes = {d = [...]}`: explicit shard sizes of dim `d`, one per
      combined coordinate of its split axes (major to minor), summing to the
      dim's size.

    Canonical form and uniquing: the attribute stores, per sharded dim, the
    ordered splits with their strides, and per axis the Partial op. `SS` is
    resolved into order and strides while parsing (it needs the shape of the
    mesh, so `shardx.mesh @mesh` must be parsed before a layout that uses
    `SS`). The attribute always prints canonically (`S`, `R`, `P` plus
    `order`/`strides`/`sizes` where needed), so `[SS(0, 2), S(0)]` and
    `[S(0), S(0)], order = {0 = [1, 0]}` on a 2x2 mesh are the same
    attribute.

    Constraints checked by the attribute verifier: mesh axes used at most
    once, no axis both Partial and Shard, shard dims non-negative, split
    factors and strides positive, strides each a multiple of the one before,
    an `order` that lists exactly the axes that shard the dim, no explicit
    sizes on a strided dim. Checked where the mesh and the tensor are known
    (ops, function arguments and results): the mesh exists, one placement per
    mesh axis, shard dims within the tensor rank, explicit sizes one per
    shard and summing to the dim, strided dims divisible.
  }];
  let parameters = (ins
    "FlatSymbolRefAttr":$mesh,
    ArrayRefParameter<"DimShardingAttr", "sharded dims, sorted">:$dims,
    ArrayRefParameter<"int64_t",
        "per mesh axis: -1, or the ReductionKind of a Partial axis">:$partials
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  // The storage (ShardXAttrs.cpp) also holds the canonical `::shardx::Layout`,
  // built and checked once when the attribute is uniqued.
  let genStorageClass = 0;
  let builders = [
    AttrBuilderWithInferredContext<(ins "FlatSymbolRefAttr":$mesh,
                                        "const ::shardx::Layout &":$layout)>
  ];
  let extraClassDeclaration = [{
    /// The canonical layout as a plain C++ value, built once when the
    /// attribute was created.
    const ::shardx::Layout &getLayout() const;
    int64_t getMeshRank() const { return getPartials().size(); }
    /// Verifies the layout against a mesh shape and, if given, a tensor type.
    /// Returns the empty string when valid. The answer is computed once per
    /// (mesh shape, type) and kept in the attribute's storage.
    std::string verifyFor(::llvm::ArrayRef<int64_t> meshShape,
                          ::mlir::Type type = {}) const;
    /// The local type of `global` under this layout on a mesh of
    /// `meshShape` (see mlir::shardx::getLocalType), computed once per
    /// (global type, mesh shape) and kept in the attribute's storage.
    ::mlir::RankedTensorType getLocalType(::mlir::RankedTensorType global,
                                          ::llvm::ArrayRef<int64_t> meshShape) const;

  private:
    std::string verifyForUncached(::llvm::ArrayRef<int64_t> meshShape,
                                  ::mlir::Type type) const;

  public:
  }];
}

#endif // SHARDX_DIALECT_SHARDX_IR_SHARDXATTRS_TD
