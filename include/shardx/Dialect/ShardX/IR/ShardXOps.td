//===- ShardXOps.td - ShardX operations --------------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_SHARDXOPS_TD
#define SHARDX_DIALECT_SHARDX_IR_SHARDXOPS_TD

include "shardx/Dialect/ShardX/IR/ShardXAttrs.td"
include "shardx/Dialect/ShardX/IR/ShardXInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def ShardX_MeshOp : ShardX_Op<"mesh", [Symbol]> {
  let summary = "a named mesh of devices";
  let description = [{
    Declares a mesh of devices: its shape (one size per axis), optional axis
    names and optional per-axis cost hints for the cost model: `bandwidth` in
    GB/s and `latency` in microseconds per collective step.

    ```mlir
    shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
    shardx.mesh @node(shape = 8, bandwidth = [400.0], latency = [5.0])
    ```

    Constraints: every axis size is positive and the mesh has at most 2^31
    devices (the product of its axis sizes; rank ids fit a 32-bit int, and
    code past the verifier multiplies axis sizes without overflow checks);
    `axes`, `bandwidth` and
    `latency`, when present, have one entry per axis; axis names are unique
    and non-empty; cost hints are positive.
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    DenseI64ArrayAttr:$shape,
    OptionalAttr<StrArrayAttr>:$axes,
    OptionalAttr<DenseF64ArrayAttr>:$bandwidth,
    OptionalAttr<DenseF64ArrayAttr>:$latency
  );
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getRank() { return getShape().size(); }
    /// The number of devices (at most kMaxMeshDevices on a verified mesh).
    int64_t getNumDevices();
    /// The name of `axis` ("dp"), or its index as a string when unnamed.
    std::string getAxisName(int64_t axis);
  }];
}

//===----------------------------------------------------------------------===//
// Layout constraints and reshards on global tensors
//===----------------------------------------------------------------------===//

def ShardX_AnnotateOp : ShardX_Op<"annotate", [
    Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "constrains the layout of a global tensor";
  let description = [{
    A user constraint: the result is `%x` with layout `#layout`. Propagation
    treats it as a hard constraint (like `sdy.sharding_constraint` or
    `DTensor.redistribute` in eager code).

    ```mlir
    %y = shardx.annotate %x : tensor<8x4xf32> to #shardx.layout<@mesh, [S(0), R]>
    ```

    Constraints: the mesh exists, the layout has one placement per mesh axis
    and is valid for the tensor's shape.
  }];
  let arguments = (ins AnyRankedTensor:$input, ShardX_LayoutAttr:$layout);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `:` type($result) `to` custom<Layout>($layout) attr-dict";
}

def ShardX_RedistributeOp : ShardX_Op<"redistribute", [
    Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "an explicit reshard of a global tensor";
  let description = [{
    Moves the global tensor `%x` from layout `#a` to layout `#b`. The value
    is unchanged; the reshard planner lowers it to collectives.

    ```mlir
    %y = shardx.redistribute %x : tensor<8xf32>
        from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [R]>
    ```

    Constraints: both layouts name the same existing mesh and are valid for
    the tensor's shape.
  }];
  let arguments = (ins AnyRankedTensor:$input, ShardX_LayoutAttr:$source,
                       ShardX_LayoutAttr:$target);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$input `:` type($result) `from` custom<Layout>($source) `to` "
      "custom<Layout>($target) attr-dict";
}

//===----------------------------------------------------------------------===//
// Collectives on local tensors
//===----------------------------------------------------------------------===//

class ShardX_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : ShardX_Op<mnemonic, !listconcat(traits, [
          DeclareOpInterfaceMethods<SymbolUserOpInterface>,
          ShardX_CollectiveOpInterface])> {
  code commonDescription = [{
    The group is the set of ranks that differ only in the coordinates of the
    mesh axes `axes`; within the group, ranks are numbered by their
    coordinates on `axes` linearized in the order given (major first).
    Common constraints: the mesh exists; `axes` is non-empty, each axis in
    range and listed once; operand and result element types are equal.
  }];
}

def ShardX_AllGatherOp : ShardX_CollectiveOp<"all_gather"> {
  let summary = "concatenates the group's local tensors along a dim";
  let description = [{
    Every rank receives the concatenation, in group order, of the group's
    local tensors along `dim`. With `stride = s` (strided layouts) each
    piece's `dim` is viewed as `s` blocks and the concatenation happens per
    block: the result is `[b0 of every member, b1 of every member, ...]`.
    Uneven pieces name their sizes with `sizes` (one per group member); the
    result's `dim` is then their sum.

    ```mlir
    %y = shardx.all_gather %x on @mesh axes = [0] dim = 0
        : tensor<2x4xf32> -> tensor<8x4xf32>
    %z = shardx.all_gather %u on @mesh axes = [0] dim = 0 sizes = [2, 2, 2, 1]
        : tensor<?x4xf32> -> tensor<7x4xf32>
    ```
  }] # commonDescription # [{
    Also: `dim` is within the rank; `stride` positive and dividing a static
    operand dim; the result equals the operand except on `dim`, where it is
    the group size times the operand's (or the sum of `sizes`, which has one
    non-negative entry per group member and excludes a stride).
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim,
                       DefaultValuedAttr<I64Attr, "1">:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim
    (`stride` `=` $stride^)? (`sizes` `=` $sizes^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def ShardX_ReduceScatterOp : ShardX_CollectiveOp<"reduce_scatter"> {
  let summary = "reduces over the group and keeps this rank's piece";
  let description = [{
    Reduces the group's local tensors elementwise with `reduction` and gives
    group member `i` the `i`-th piece of the result along `dim` (of each of
    the `stride` blocks of `dim`, like `shardx.chunk`).

    ```mlir
    %y = shardx.reduce_scatter %x on @mesh axes = [1] dim = 0 reduction = sum
        : tensor<8x4xf32> -> tensor<2x4xf32>
    ```
  }] # commonDescription # [{
    Also: `dim` is within the rank; the operand equals the result except on
    `dim`, where it is the group size times the result's (or the sum of
    `sizes`).
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim,
                       ShardX_ReductionKindAttr:$reduction,
                       DefaultValuedAttr<I64Attr, "1">:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim `reduction` `=` ``
    $reduction (`stride` `=` $stride^)? (`sizes` `=` $sizes^)? attr-dict `:`
    type($input) `->` type($result)
  }];
}

def ShardX_AllReduceOp : ShardX_CollectiveOp<"all_reduce",
    [SameOperandsAndResultType]> {
  let summary = "reduces the group's local tensors elementwise";
  let description = [{
    ```mlir
    %y = shardx.all_reduce %x on @mesh axes = [0, 1] reduction = max
        : tensor<8x4xf32>
    ```
  }] # commonDescription;
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes,
                       ShardX_ReductionKindAttr:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `reduction` `=` `` $reduction attr-dict
    `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives
//===----------------------------------------------------------------------===//

def ShardX_AllReduceStartOp : ShardX_CollectiveOp<"all_reduce_start",
    [SameOperandsAndResultType]> {
  let summary = "starts an all_reduce; shardx.wait gives its result";
  let description = [{
    The asynchronous form of `shardx.all_reduce`, as XLA's
    `all-reduce-start`/`all-reduce-done`: the op starts the reduction of
    `%x` and returns the pending result, which only one `shardx.wait` in
    the same block may read. Ops between the start and the wait run while
    the data moves. `shardx-schedule-collectives` forms these pairs.

    ```mlir
    %p = shardx.all_reduce_start %x on @mesh axes = [0] reduction = sum
        : tensor<8x4xf32>
    // ... compute that does not need %y ...
    %y = shardx.wait %p : tensor<8x4xf32>
    ```
  }] # commonDescription # [{
    Also: the result has exactly one use, a `shardx.wait` in the same block.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes,
                       ShardX_ReductionKindAttr:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `reduction` `=` `` $reduction attr-dict
    `:` type($result)
  }];
  let hasVerifier = 1;
}

def ShardX_AllGatherStartOp : ShardX_CollectiveOp<"all_gather_start"> {
  let summary = "starts an all_gather; shardx.wait gives its result";
  let description = [{
    The asynchronous form of `shardx.all_gather`, with the same attributes
    and result: FSDP's prefetch of the next layer's weights. The result is
    pending until the one `shardx.wait` that reads it (same block).

    ```mlir
    %p = shardx.all_gather_start %x on @mesh axes = [0] dim = 0
        sizes = [2, 2, 2, 1] : tensor<?x4xf32> -> tensor<7x4xf32>
    // ... compute that does not need %y ...
    %y = shardx.wait %p : tensor<7x4xf32>
    ```
  }] # commonDescription # [{
    Also: those of `shardx.all_gather`, and the result has exactly one use,
    a `shardx.wait` in the same block.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim,
                       DefaultValuedAttr<I64Attr, "1">:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim
    (`stride` `=` $stride^)? (`sizes` `=` $sizes^)?
    attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def ShardX_ReduceScatterStartOp
    : ShardX_CollectiveOp<"reduce_scatter_start"> {
  let summary = "starts a reduce_scatter; shardx.wait gives its result";
  let description = [{
    The asynchronous form of `shardx.reduce_scatter`, with the same
    attributes and result: FSDP's reduce-scatter of gradients while
    backward goes on. The result is pending until the one `shardx.wait`
    that reads it (same block).

    ```mlir
    %p = shardx.reduce_scatter_start %g on @mesh axes = [0] dim = 0
        reduction = sum : tensor<8x4xf32> -> tensor<2x4xf32>
    %y = shardx.wait %p : tensor<2x4xf32>
    ```
  }] # commonDescription # [{
    Also: those of `shardx.reduce_scatter`, and the result has exactly one
    use, a `shardx.wait` in the same block.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim,
                       ShardX_ReductionKindAttr:$reduction,
                       DefaultValuedAttr<I64Attr, "1">:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim `reduction` `=` ``
    $reduction (`stride` `=` $stride^)? (`sizes` `=` $sizes^)? attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def ShardX_WaitOp : ShardX_Op<"wait", [SameOperandsAndResultType]> {
  let summary = "waits for an asynchronous collective and returns its result";
  let description = [{
    Blocks until the collective that produced `%p` (a `*_start` op) is
    complete on this rank and returns its result. The only reader of a
    start's result.

    ```mlir
    %y = shardx.wait %p : tensor<8x4xf32>
    ```

    Constraints: the operand is the result of a `*_start` op
    (`all_reduce_start`, `all_gather_start`, `reduce_scatter_start`) in the
    same block.
  }];
  let arguments = (ins AnyRankedTensor:$pending);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$pending attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def ShardX_AllToAllOp : ShardX_CollectiveOp<"all_to_all"> {
  let summary = "splits along one dim, exchanges, concatenates along another";
  let description = [{
    Group member `i` splits its tensor into group-size pieces along
    `split_dim`, sends piece `j` to member `j`, and concatenates what it
    receives, in group order, along `concat_dim`. The strides view each dim
    as blocks, as in `shardx.chunk` (split) and `shardx.all_gather`
    (concat); `split_dim` may equal `concat_dim` (moving a split within a
    dim). With `sizes` (one per member, no split stride) the split follows
    those sizes (explicit uneven target shards); the result's `split_dim`
    is then dynamic unless all sizes are equal.

    ```mlir
    %y = shardx.all_to_all %x on @mesh axes = [0] split_dim = 1 concat_dim = 0
        : tensor<2x8xf32> -> tensor<8x2xf32>
    ```
  }] # commonDescription # [{
    Also: both dims within the rank; strides positive; the result's
    `split_dim` is the operand's divided by the group size (which must
    divide it, times `split_stride`) and its `concat_dim` the operand's
    times the group size; other dims are equal.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim,
                       DefaultValuedAttr<I64Attr, "1">:$split_stride,
                       DefaultValuedAttr<I64Attr, "1">:$concat_stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `split_dim` `=` $split_dim
    `concat_dim` `=` $concat_dim (`split_stride` `=` $split_stride^)?
    (`concat_stride` `=` $concat_stride^)? (`sizes` `=` $sizes^)? attr-dict
    `:` type($input) `->` type($result)
  }];
}

def ShardX_PermuteOp : ShardX_CollectiveOp<"permute",
    [SameOperandsAndResultType]> {
  let summary = "collective permute within the group";
  let description = [{
    Each pair `[s, t]` sends group member `s`'s tensor to member `t`. A
    member that is no pair's target keeps its own tensor (the planner
    leaves out the members that stay in place).

    ```mlir
    %y = shardx.permute %x on @mesh axes = [0] pairs = [[0, 1], [1, 0]]
        : tensor<4xf32>
    ```
  }] # commonDescription # [{
    Also: every index is within the group; no member is a source twice or a
    target twice.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes,
                       DenseI64ArrayAttr:$pairs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `pairs` `=` custom<Pairs>($pairs)
    attr-dict `:` type($result)
  }];
}

def ShardX_BroadcastOp : ShardX_CollectiveOp<"broadcast",
    [SameOperandsAndResultType]> {
  let summary = "every group member receives the root's tensor";
  let description = [{
    ```mlir
    %y = shardx.broadcast %x on @mesh axes = [1] root = 0 : tensor<4xf32>
    ```
  }] # commonDescription # [{
    Also: `root` is within the group.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$root);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `root` `=` $root attr-dict
    `:` type($result)
  }];
}

def ShardX_ExchangeOp : ShardX_CollectiveOp<"exchange"> {
  let summary = "one reshard step within the group, given by its layouts";
  let description = [{
    The general form of a data-moving reshard step (what `all_gather`,
    `reduce_scatter`, `all_to_all`, `chunk` and `permute` do for even
    shards): every rank receives its shard of the global tensor of shape
    `shape` under `target`, taken from the group members that hold it under
    `source`, and reduced with the source's Partial op over the group axes
    on which `source` is Partial and `target` is not. Local shapes may
    differ between ranks (uneven, nested or strided shards); each rank's
    sizes follow from the layouts. `shardx-lower-reshards` emits it for the
    steps whose local shapes are not the same on every rank.

    ```mlir
    %y = shardx.exchange %x on @mesh axes = [0]
        from #shardx.layout<@mesh, [S(0), S(0)]>
        to #shardx.layout<@mesh, [R, S(0)]> shape = [5, 3]
        : tensor<?x3xf32> -> tensor<?x3xf32>
    ```
  }] # commonDescription # [{
    Also: both layouts are on `mesh` and valid for `shape`; the operand is
    the local type of `shape` under `source` and the result its local type
    under `target` (a dim is dynamic exactly when ranks differ in it); the
    layouts agree outside the group: the same Partials on the other axes,
    and the group does not create a Partial.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, ShardX_LayoutAttr:$source,
                       ShardX_LayoutAttr:$target, DenseI64ArrayAttr:$shape);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `from` custom<Layout>($source)
    `to` custom<Layout>($target) `shape` `=` $shape attr-dict
    `:` type($input) `->` type($result)
  }];
}

def ShardX_HaloOp : ShardX_CollectiveOp<"halo"> {
  let summary = "widens each shard by its neighbours' edge rows (halo)";
  let description = [{
    The neighbour exchange of windowed ops on a split dim (a convolution's
    or pooling's rows: PhysicsNeMo ShardTensor's halo, upstream
    `shard.update_halo`). Along `dim`, group member `j > 0` receives the
    last `low` rows of member `j - 1` in front of its own tensor and member
    `j < n - 1` the first `high` rows of member `j + 1` behind it. The
    members at the ends of the group receive nothing on their outer side
    (their shards already hold the zero padding of the padded tensor, see
    docs/Rules.md, "Windowed ops"), so the result dim is the operand's plus
    `low` and `high`, less `low` on member 0 and `high` on member `n - 1`:
    dynamic when members differ. Uneven shards name the members' operand
    sizes with `sizes`. Lowered inside the dialect to two `shardx.permute`
    of the edge slices (`shardx-lower-halos`).

    ```mlir
    %y = shardx.halo %x on @mesh axes = [0] dim = 2 low = 1 high = 1
        : tensor<2x3x5x8xf32> -> tensor<2x3x?x8xf32>
    %z = shardx.halo %u on @mesh axes = [0] dim = 0 low = 2 high = 0
        sizes = [4, 3] : tensor<?x8xf32> -> tensor<?x8xf32>
    ```
  }] # commonDescription # [{
    Also: `dim` is within the rank; `low` and `high` are non-negative and,
    in a group of more than one member, no wider than the smallest shard
    (the operand's static `dim`, or the smallest of `sizes`, which has one
    entry per member and no negative one): a halo reaches only the
    neighbour's shard, so a window wider than a shard is refused; the
    result equals the operand except on `dim`, which is static only when
    every member's result has that size.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim, I64Attr:$low,
                       I64Attr:$high, OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim `low` `=` $low
    `high` `=` $high (`sizes` `=` $sizes^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def ShardX_RaggedAllToAllOp : ShardX_CollectiveOp<"ragged_all_to_all"> {
  let summary = "all-to-all of rows with per-member counts known at run time";
  let description = [{
    The token exchange of a capacity-free (dropless) mixture of experts
    (torchtitan's dispatch: the counts exchanged first, then one
    variable-count all-to-all). The operand's rows (dim 0) are grouped by
    destination: the first `send_counts[0]` rows go to group member 0, the
    next `send_counts[1]` to member 1, and so on; rows after the last group
    are not sent. Each rank receives the rows sent to it in group order,
    packed from row 0 of `result`; the rows after them are zero. The counts
    are tensors computed by the program (the routing); the shapes are
    static: `result` is sized for the most rows a rank may receive (a
    worst-case buffer), while the collective moves only the counted rows.

    Two forms, by who knows how many rows each member sends:
    - Without `recv_counts`, the members' send counts are exchanged first
      (one int64 per member) and returned as the second result,
      `received_counts` (`received_counts[j]` rows came from member `j`);
      the same op given them as `send_counts` sends every row back.
    - With `recv_counts` (`recv_counts[j]`: the rows member `j` sends this
      rank, known to the program, e.g. the combine of an MoE, which
      receives exactly the counts its dispatch sent), nothing but the rows
      is exchanged (one collective instead of two) and the op has no second
      result.

    A count that is negative, send counts that sum past the operand's rows,
    or received counts (exchanged or given) that sum past the result's
    rows fail the run with the cause. A given `recv_counts[j]` that is not
    what member `j` sends fails the rows' exchange on the threads backend
    (it compares the two); on MPI one smaller than what is sent fails with
    MPI's truncation error (which ends the job), while one larger is not
    certain to be detected (the rows after those that arrived are then
    unspecified). Either way no buffer is written past its end.

    ```mlir
    %y, %r = shardx.ragged_all_to_all %x, %counts on @mesh axes = [0]
        : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
    %back = shardx.ragged_all_to_all %y, %r recv_counts = %counts
        on @mesh axes = [0]
        : tensor<16x4xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x4xf32>
    ```
  }] # commonDescription # [{
    Also: operand and result have the same rank (at least 1) and the same
    static dims after dim 0; the result's dim 0 is static; the op has
    either a `recv_counts` operand or a `received_counts` result, not both;
    `send_counts`, `recv_counts` and `received_counts` are
    `tensor<n x i64>`, `n` the group size.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       RankedTensorOf<[I64]>:$send_counts,
                       Optional<RankedTensorOf<[I64]>>:$recv_counts,
                       FlatSymbolRefAttr:$mesh, DenseI64ArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$result,
                      Optional<RankedTensorOf<[I64]>>:$received_counts);
  let assemblyFormat = [{
    $input `,` $send_counts (`recv_counts` `=` $recv_counts^)? `on` $mesh
    `axes` `=` $axes attr-dict `:` type($input) `,` type($send_counts)
    (`,` type($recv_counts)^)? `->` type($result)
    (`,` type($received_counts)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Local steps
//===----------------------------------------------------------------------===//

def ShardX_ChunkOp : ShardX_CollectiveOp<"chunk", [Pure]> {
  let summary = "keeps this rank's piece of a replicated tensor (R -> S)";
  let description = [{
    No communication: the dim is viewed as `(stride, n, rest)` blocks, `n`
    the group size, and this rank keeps `[:, i, :]`, `i` its index in the
    group. With `stride = 1` (the default) and a dim that does not divide,
    the pieces follow `torch.chunk` (the result dim is then dynamic); with
    `sizes`, member `i` keeps the `i`-th run of the given sizes.

    ```mlir
    %y = shardx.chunk %x on @mesh axes = [0] dim = 0
        : tensor<8x4xf32> -> tensor<2x4xf32>
    %z = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 2
        : tensor<8x4xf32> -> tensor<2x4xf32>
    ```
  }] # commonDescription # [{
    Also: `dim` within the rank; `stride` positive; a static result dim is
    exactly the operand's divided by the group size (which must divide it,
    times `stride`), or with `sizes` (one per member) dynamic or equal when
    all sizes are; other dims equal.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes, I64Attr:$dim,
                       DefaultValuedAttr<I64Attr, "1">:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim
    (`stride` `=` $stride^)? (`sizes` `=` $sizes^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def ShardX_PartitionValueOp : ShardX_CollectiveOp<"partition_value",
    [Pure, SameOperandsAndResultType]> {
  let summary = "turns a replicated tensor into a Partial one (R -> P)";
  let description = [{
    No communication: every group member keeps a term such that reducing the
    terms with `reduction` gives back the value. For `sum`, member 0 keeps
    the value and the others zero; for `prod`, the others one; for `max`,
    `min` and `avg` every member keeps the value.

    ```mlir
    %y = shardx.partition_value %x on @mesh axes = [0] reduction = sum
        : tensor<4xf32>
    ```
  }] # commonDescription;
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$axes,
                       ShardX_ReductionKindAttr:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `reduction` `=` `` $reduction attr-dict
    `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Index queries
//===----------------------------------------------------------------------===//

def ShardX_AxisIndexOp : ShardX_CollectiveOp<"axis_index", [Pure]> {
  let summary = "this rank's index within the group of `axes`";
  let description = [{
    ```mlir
    %i = shardx.axis_index on @mesh axes = [0, 1] : index
    ```
  }] # commonDescription;
  let arguments = (ins FlatSymbolRefAttr:$mesh, DenseI64ArrayAttr:$axes);
  let results = (outs Index:$result);
  let assemblyFormat = "`on` $mesh `axes` `=` $axes attr-dict `:` type($result)";
}

def ShardX_LocalSizeOp : ShardX_Op<"local_size", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the size of this rank's shard of one dim";
  let description = [{
    The number of elements of tensor dim `dim` that this rank holds for a
    tensor of global shape `shape` with layout `#layout`.

    ```mlir
    %n = shardx.local_size #shardx.layout<@mesh, [S(0)]> shape = [7, 4] dim = 0
        : index
    ```

    Constraints: the layout's mesh exists and the layout is valid for
    `shape`; `dim` is within its rank.
  }];
  let arguments = (ins ShardX_LayoutAttr:$layout, DenseI64ArrayAttr:$shape,
                       I64Attr:$dim);
  let results = (outs Index:$result);
  let assemblyFormat = [{
    custom<Layout>($layout) `shape` `=` $shape `dim` `=` $dim attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

class ShardX_AttentionOp<string mnemonic>
    : ShardX_Op<mnemonic, [Pure, AttrSizedOperandSegments]> {
  code attentionDescription = [{
    Shapes: `q` is `[B, H, Sq, D]`, `k` `[B, Hk, Sk, D]` and `v`
    `[B, Hk, Sk, Dv]`, with `H` a multiple of `Hk` (grouped-query
    attention: query head `h` reads key/value head `h / (H / Hk)`, as
    `enable_gqa` repeats them). The scores are `scale * q @ k^T` over `D`;
    with `causal(%qpos, %kpos)` (positions: `[Sq]` and `[Sk]` integers) key
    `j` is seen by query `i` only when `kpos[j] <= qpos[i]`, so a shard of
    the sequence carries its own positions (PyTorch's `is_causal`: positions
    from 0 on both sides). A query that sees no key gets a zero output and
    `lse = -inf`. The element type is f32 or f64 throughout. The op has no
    memory effects; `shardx-decompose-for-codegen` writes it as linalg ops.

    With `products = bf16` (or `f16`; f32 tensors only) the op computes at
    the precision of a GPU's fused (flash) attention: the operands of every
    product are values of that type. `q`, `k`, `v` and `dout` are rounded
    to it where they enter a product, and so are the probabilities before
    `P @ v` (or, where the keys are taken in blocks, each block's
    exponentials before the row is normalized, as a one-pass fused kernel
    rounds them: the two differ by an ulp of the type per term) and
    `P^T @ dout`, and `dS` before its two products; every sum accumulates
    in f32. The cuda target calls fused attention kernels on
    tensor cores for such ops (head width 32, 64 or 128); the cpu target
    writes the roundings as linalg ops.
  }];
  code attentionConstraints = [{
    Constraints: the shapes above (dims that are static agree), every tensor
    of one float element type (f32 or f64), positions both present or both
    absent, of an integer type, rank 1; `scale` finite; `products`, where
    given, bf16 or f16 with f32 tensors.
  }];
}

def ShardX_AttentionOp : ShardX_AttentionOp<"attention"> {
  let summary = "scaled dot-product attention and its log-sum-exp";
  let description = [{
    `out = softmax(scale * q @ k^T) @ v` per query row, and `lse`, the
    natural log of the softmax's normalizer (`[B, H, Sq]`), from which the
    backward ops compute the probabilities again (as flash attention does):
    no `[B, H, Sq, Sk]` tensor passes from the forward to the backward. The importer writes PyTorch's
    `scaled_dot_product_attention` of f32/f64 tensors as this op.

    ```mlir
    %o, %lse = shardx.attention %q, %k, %v causal(%qp, %kp) scale = 0.25
        : tensor<1x4x16x16xf32>, tensor<1x2x16x16xf32>,
          tensor<1x2x16x16xf32>, tensor<16xi64>, tensor<16xi64>
        -> tensor<1x4x16x16xf32>, tensor<1x4x16xf32>
    ```
  }] # attentionDescription # attentionConstraints;
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k,
                       AnyRankedTensor:$v,
                       Optional<AnyRankedTensor>:$qpos,
                       Optional<AnyRankedTensor>:$kpos, F64Attr:$scale,
                       OptionalAttr<TypeAttr>:$products);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`causal` `(` $qpos^ `,` $kpos `)`)? `scale` `=` $scale
    (`products` `=` $products^)? attr-dict `:` type($q) `,` type($k) `,` type($v)
    (`,` type($qpos)^ `,` type($kpos))? `->` type($out) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def ShardX_AttentionDqOp : ShardX_AttentionOp<"attention_dq"> {
  let summary = "the query gradient of `shardx.attention`";
  let description = [{
    `dq = scale * dS @ k`, with `P = exp(scale * q @ k^T - lse)` (masked
    entries 0), `dP = dout @ v^T`, `delta = rowsum(dout * out)` and
    `dS = P * (dP - delta)`, from the forward's `out` and `lse`. Given the
    rows' `lse` and `out`, `dq` is a sum over key blocks: a shard of the
    keys gives a partial sum of it.

    ```mlir
    %dq = shardx.attention_dq %q, %k, %v, %o, %lse, %do scale = 0.25
        : tensor<1x4x16x16xf32>, tensor<1x2x16x16xf32>,
          tensor<1x2x16x16xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16xf32>,
          tensor<1x4x16x16xf32> -> tensor<1x4x16x16xf32>
    ```
  }] # attentionDescription # attentionConstraints # [{
    Also: `out` and `dout` are `[B, H, Sq, Dv]`, `lse` `[B, H, Sq]`, `dq`
    has `q`'s type.
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k,
                       AnyRankedTensor:$v, AnyRankedTensor:$out,
                       AnyRankedTensor:$lse, AnyRankedTensor:$dout,
                       Optional<AnyRankedTensor>:$qpos,
                       Optional<AnyRankedTensor>:$kpos, F64Attr:$scale,
                       OptionalAttr<TypeAttr>:$products);
  let results = (outs AnyRankedTensor:$dq);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $lse `,` $dout
    (`causal` `(` $qpos^ `,` $kpos `)`)? `scale` `=` $scale
    (`products` `=` $products^)? attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($out) `,` type($lse) `,`
    type($dout) (`,` type($qpos)^ `,` type($kpos))? `->` type($dq)
  }];
  let hasVerifier = 1;
}

def ShardX_AttentionDkvOp : ShardX_AttentionOp<"attention_dkv"> {
  let summary = "the key and value gradients of `shardx.attention`";
  let description = [{
    `dk = scale * dS^T @ q` and `dv = P^T @ dout`, summed over the query
    heads of each key/value head, with `P` and `dS` as `attention_dq`
    computes them. Both are sums over query rows: a shard of the queries
    gives partial sums.

    ```mlir
    %dk, %dv = shardx.attention_dkv %q, %k, %v, %o, %lse, %do scale = 0.25
        : tensor<1x4x16x16xf32>, tensor<1x2x16x16xf32>,
          tensor<1x2x16x16xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16xf32>,
          tensor<1x4x16x16xf32> -> tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>
    ```
  }] # attentionDescription # attentionConstraints # [{
    Also: `out` and `dout` are `[B, H, Sq, Dv]`, `lse` `[B, H, Sq]`, `dk`
    has `k`'s type and `dv` `v`'s.
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k,
                       AnyRankedTensor:$v, AnyRankedTensor:$out,
                       AnyRankedTensor:$lse, AnyRankedTensor:$dout,
                       Optional<AnyRankedTensor>:$qpos,
                       Optional<AnyRankedTensor>:$kpos, F64Attr:$scale,
                       OptionalAttr<TypeAttr>:$products);
  let results = (outs AnyRankedTensor:$dk, AnyRankedTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $lse `,` $dout
    (`causal` `(` $qpos^ `,` $kpos `)`)? `scale` `=` $scale
    (`products` `=` $products^)? attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($out) `,` type($lse) `,`
    type($dout) (`,` type($qpos)^ `,` type($kpos))? `->` type($dk) `,`
    type($dv)
  }];
  let hasVerifier = 1;
}

#endif // SHARDX_DIALECT_SHARDX_IR_SHARDXOPS_TD
