//===- Passes.td - ShardX conversion passes ----------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_CONVERSION_PASSES_TD
#define SHARDX_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// ShardXToRuntime
//===----------------------------------------------------------------------===//

def ConvertShardXToRuntimePass
    : Pass<"shardx-convert-to-runtime", "ModuleOp"> {
  let summary = "lowers the ShardX collectives on local tensors to runtime "
                "C-ABI calls";
  let description = [{
    The first step of code generation (`buildBufferizationPipeline`, both
    targets):
    every collective and local step of the local SPMD program becomes tensor
    reshapes and transposes around one call of a flat runtime collective
    (`shardx_rt_cg_<kind>_<f32|f64|i32|i64>`, lib/Runtime/CompiledCode.cpp),
    which moves contiguous buffers only; the dim, stride and group order of
    each op are layout changes done here. One conversion pattern per op
    (`populateShardXToRuntimePatterns`), reading the group, reduction and
    uneven sizes through `CollectiveOpInterface`. `shardx.mesh` stays (code
    generation drops it after this pass); any other ShardX op is an error.
    A call that returns a rank-dependent value (`shardx_rt_cg_axis_index`,
    an exchange's `shardx_rt_cg_exchange_dim`) carries it as
    `shardx.rank_value` (the mesh's shape, and the group's axes or the
    value per rank), which the memory model computes uneven sizes from.

    ```mlir
    %y = shardx.all_reduce %x on @mesh axes = [0] reduction = sum
        : tensor<4xf32>
    ```
    becomes
    ```mlir
    %b = bufferization.to_buffer %x read_only : ...
    %c = memref.alloc() : memref<4xf32>
    memref.copy %b, %c : ...
    %o = memref.alloc() : memref<4xf32>
    func.call @shardx_rt_cg_all_reduce_f32(%in, %out, %c0_i32, %axes)
        : (memref<?xf32, strided<[?], offset: ?>>, ..., i32,
           memref<?xi64, strided<[?], offset: ?>>) -> ()
    %y = bufferization.to_tensor %o restrict writable : memref<4xf32> to ...
    ```

    Booleans move as i32 (a reduction of booleans is an error); uneven
    shards use the runtime's variable-count collectives (`*_v`) or
    `shardx_rt_cg_exchange`, whose result sizes the runtime computes from the
    layouts.
  }];
  let dependentDialects = [
    "arith::ArithDialect",
    "bufferization::BufferizationDialect",
    "func::FuncDialect",
    "linalg::LinalgDialect",
    "memref::MemRefDialect",
    "tensor::TensorDialect",
  ];
}

//===----------------------------------------------------------------------===//
// ShardToShardX
//===----------------------------------------------------------------------===//

def ImportShardPass : Pass<"shardx-import-shard", "ModuleOp"> {
  let summary = "imports the annotations of upstream MLIR's `shard` dialect "
                "as ShardX meshes and layouts";
  let description = [{
    Turns a program annotated for upstream MLIR's partitioner (`shard.grid`,
    `shard.sharding`, `shard.shard`) into a ShardX program, so that ShardX's
    propagation, planner and back end run it (docs/ShardImport.md):
    - `shard.grid @g(shape = 2x4)` becomes `shardx.mesh @g(shape = 2x4,
      axes = ["0", "1"])` (the same symbol; upstream axes have no names).
    - `split_axes` give the splits of each tensor dim in the order listed:
      upstream orders a dim's grid axes outer to inner, ShardX major to
      minor, so `[[1, 0]]` is `[S(0), S(0)], order = {0 = [1, 0]}`.
      `sharded_dims_offsets` become explicit shard `sizes`.
    - A `shard.shard` on a function argument (the argument's result
      sharding, else its only operand sharding) becomes the argument's
      `shardx.layout`, as upstream's partitioner gives the argument that
      local type; a `shard.shard` that a return reads gives the result's
      `shardx.layout`. Every other `shard.shard` becomes a
      `shardx.annotate`; one without `annotate_for_users` (the sharding of
      the value's definition) is read by every user of the value.
    - TOSA ops (upstream shards them; ShardX has no rules for them) are
      lowered to linalg with upstream's TOSA conversions (`lower-tosa`).

    What ShardX cannot express is an error, never dropped: halos
    (`halo_sizes`, `shard.update_halo`), dynamic grids, offsets or
    shardings, shardings used as values, and the ops of an already
    partitioned program (collectives, process indices, `shard_shape`).

    ```mlir
    shard.grid @grid(shape = 2x2)
    func.func @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
      %s = shard.sharding @grid split_axes = [[0, 1]] : !shard.sharding
      %0 = shard.shard %x to %s : tensor<8x16xf32>
      %t = shard.sharding @grid split_axes = [[], [1]] : !shard.sharding
      %1 = shard.shard %0 to %t annotate_for_users : tensor<8x16xf32>
      return %1 : tensor<8x16xf32>
    }
    ```
    becomes
    ```mlir
    shardx.mesh @grid(shape = 2x2, axes = ["0", "1"])
    func.func @f(%x: tensor<8x16xf32>
                     {shardx.layout = #shardx.layout<@grid, [S(0), S(0)]>})
        -> (tensor<8x16xf32> {shardx.layout = #shardx.layout<@grid, [R, S(1)]>}) {
      %0 = shardx.annotate %x : tensor<8x16xf32> to #shardx.layout<@grid, [R, S(1)]>
      return %0 : tensor<8x16xf32>
    }
    ```
  }];
  let options = [
    Option<"lowerTosa", "lower-tosa", "bool", /*default=*/"true",
           "lower TOSA ops to linalg (tosa-to-linalg-named, tosa-to-linalg, "
           "tosa-to-arith, tosa-to-tensor) after the import">,
  ];
  let dependentDialects = [
    "arith::ArithDialect",
    "func::FuncDialect",
    "linalg::LinalgDialect",
    "math::MathDialect",
    "shardx::ShardXDialect",
    "tensor::TensorDialect",
  ];
}

#endif // SHARDX_CONVERSION_PASSES_TD
