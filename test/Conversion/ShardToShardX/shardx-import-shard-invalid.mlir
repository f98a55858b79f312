// RUN: shardx-opt %s --split-input-file --shardx-import-shard --verify-diagnostics

// Tests that halo sizes are an error: ShardX shards do not overlap.

shard.grid @grid(shape = 4)
func.func @halo_sizes(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error @below {{cannot import halo_sizes: halo regions have no ShardX equivalent}}
  %s = shard.sharding @grid split_axes = [[0]] halo_sizes = [2, 1] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a halo exchange is an error.

shard.grid @grid(shape = 4)
func.func @update_halo(%arg0: tensor<12x16xf32>) -> tensor<12x16xf32> {
  // expected-error @below {{cannot import 'shard.update_halo': halo exchange has no ShardX equivalent}}
  %0 = shard.update_halo %arg0 on @grid split_axes = [[0]] halo_sizes = [1, 1] : tensor<12x16xf32>
  return %0 : tensor<12x16xf32>
}

// -----

// Tests that the collectives of an already partitioned program are errors.

shard.grid @grid(shape = 2)
func.func @partitioned(%arg0: tensor<4xf32>) -> tensor<2xf32> {
  // expected-error @below {{cannot import 'shard.all_reduce': it is a collective of an already partitioned (per-rank) program}}
  %0 = shard.all_reduce %arg0 on @grid grid_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  // expected-error @below {{cannot import 'shard.all_slice': it is a collective of an already partitioned (per-rank) program}}
  %1 = shard.all_slice %0 on @grid grid_axes = [0] slice_axis = 0 : tensor<4xf32> -> tensor<2xf32>
  return %1 : tensor<2xf32>
}

// -----

// Tests that an all-gather and an all-to-all are errors too.

shard.grid @grid(shape = 2)
func.func @gather_all_to_all(%arg0: tensor<2x4xf32>) -> tensor<4x2xf32> {
  // expected-error @below {{cannot import 'shard.all_gather': it is a collective}}
  %0 = shard.all_gather %arg0 on @grid grid_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  // expected-error @below {{cannot import 'shard.all_to_all': it is a collective}}
  %1 = shard.all_to_all %0 on @grid grid_axes = [0] split_axis = 1 concat_axis = 0 : tensor<4x4xf32> -> tensor<8x2xf32>
  %2 = tensor.extract_slice %1[0, 0] [4, 2] [1, 1] : tensor<8x2xf32> to tensor<4x2xf32>
  return %2 : tensor<4x2xf32>
}

// -----

// Tests that per-rank queries of a partitioned program are errors.

shard.grid @grid(shape = 2x2)
func.func @queries() -> (index, index, index) {
  // expected-error @below {{cannot import 'shard.process_linear_index': it is a per-rank query}}
  %0 = shard.process_linear_index on @grid : index
  // expected-error @below {{cannot import 'shard.process_multi_index': it is a per-rank query}}
  %1:2 = shard.process_multi_index on @grid : index, index
  return %0, %1#0, %1#1 : index, index, index
}

// -----

// Tests that a shard shape query is an error.

shard.grid @grid(shape = 2)
func.func @shard_shape() -> index {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  // expected-error @below {{cannot import 'shard.shard_shape': it is a per-rank query}}
  %0 = shard.shard_shape dims = [8] sharding = %s device = [0] : index
  return %0 : index
}

// -----

// Tests that computing with shardings and grid shapes is an error: ShardX
// layouts are attributes.

shard.grid @grid(shape = 2)
func.func @sharding_values(%arg0: tensor<8xf32>) -> (tensor<8xf32>, index) {
  // expected-error @below {{cannot import 'shard.get_sharding': ShardX layouts are attributes}}
  %s = shard.get_sharding %arg0 : tensor<8xf32> -> !shard.sharding
  // expected-error @below {{cannot import a shard.shard whose sharding is not a shard.sharding op}}
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  // expected-error @below {{cannot import 'shard.grid_shape': ShardX layouts are attributes}}
  %1 = shard.grid_shape @grid : index
  return %0, %1 : tensor<8xf32>, index
}

// -----

// Tests that a function taking or returning a sharding is an error.

shard.grid @grid(shape = 2)
// expected-error @below {{cannot import a function that takes or returns !shard.sharding}}
func.func @returns_sharding(%arg0: tensor<8xf32>) -> (tensor<8xf32>, !shard.sharding) {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  // expected-error @below {{cannot import a use of a !shard.sharding value by 'func.return'}}
  return %0, %s : tensor<8xf32>, !shard.sharding
}

// -----

// Tests that a grid of dynamic size is an error.

// expected-error @below {{cannot import grid @grid with a dynamic axis size: ShardX meshes have static shapes}}
shard.grid @grid(shape = 2x?)
func.func @dynamic_grid(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a grid past ShardX's mesh bound is an error at the grid, before
// the layouts multiply its sizes (2 x 2^62 overflows int64).

// expected-error @below {{cannot import grid @grid of shape 2x4611686018427387904: ShardX meshes have positive axis sizes and at most 2147483648 (2^31) devices}}
shard.grid @grid(shape = 2x4611686018427387904)
func.func @huge_grid(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a grid with an axis of size 0 is an error at the grid (it was
// reported as offsets that do not reach the dim's size).

// expected-error @below {{cannot import grid @grid of shape 0: ShardX meshes have positive axis sizes}}
shard.grid @grid(shape = 0)
func.func @empty_grid(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] sharded_dims_offsets = [0, 4, 8] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that dynamic offsets are an error.

shard.grid @grid(shape = 2)
func.func @dynamic_offsets(%arg0: tensor<8xf32>, %mid: i64) -> tensor<8xf32> {
  // expected-error @below {{cannot import dynamic sharded_dims_offsets: ShardX shard sizes are static}}
  %s = shard.sharding @grid split_axes = [[0]] sharded_dims_offsets = [0, %mid, 8] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that too many offsets are an error (upstream's verifier catches too
// few, and decreasing ones).

shard.grid @grid(shape = 2)
func.func @too_many_offsets(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] sharded_dims_offsets = [0, 4, 8, 8] : !shard.sharding
  // expected-error @below {{sharded_dims_offsets has 4 values; the sharding's 1 sharded dims need 3}}
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that offsets that do not cover the dim are an error.

shard.grid @grid(shape = 2)
func.func @offsets_short(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] sharded_dims_offsets = [0, 4, 7] : !shard.sharding
  // expected-error @below {{sharded_dims_offsets of tensor dim 0 run from 0 to 7; they must run from 0 to the dim's size 8}}
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a sharding of more dims than the tensor has is an error.

shard.grid @grid(shape = 2)
func.func @too_many_dims(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  // expected-error @below {{the sharding splits tensor dim 1 of a rank-1 tensor}}
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that two different result shardings of one value (undefined
// upstream) are an error.

shard.grid @grid(shape = 2)
func.func @two_result_shardings(%arg0: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = math.absf %arg0 : tensor<8x8xf32>
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %1 = shard.shard %0 to %s : tensor<8x8xf32>
  // expected-error @below {{the value has two result shardings}}
  %2 = shard.shard %0 to %t : tensor<8x8xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Tests that two different result shardings of an argument are an error.

shard.grid @grid(shape = 2)
// expected-error @below {{argument 0 has two result shardings}}
func.func @two_argument_shardings(%arg0: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %1 = shard.shard %arg0 to %s : tensor<8x8xf32>
  %2 = shard.shard %arg0 to %t : tensor<8x8xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Tests that a shard.shard that contradicts an argument's existing ShardX
// layout is an error.

shardx.mesh @mesh(shape = 2)
shard.grid @grid(shape = 2)
// expected-error @below {{the shard.shard of argument 0 says #shardx.layout<@grid, [S(0)]> but it already has #shardx.layout<@mesh, [R]>}}
func.func @existing_layout(%arg0: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a TOSA op upstream's TOSA-to-linalg conversion refuses (a
// matmul whose zero points are not constants) is an error.

shard.grid @grid(shape = 2)
func.func @tosa_matmul_zero_points(%a: tensor<2x4x8xf32>, %b: tensor<2x8x4xf32>, %zp: tensor<1xf32>) -> tensor<2x4x4xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %a to %s : tensor<2x4x8xf32>
  // expected-error @below {{failed to legalize operation 'tosa.matmul'}}
  %1 = tosa.matmul %0, %b, %zp, %zp : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  return %1 : tensor<2x4x4xf32>
}
