// RUN: shardx-opt %s --split-input-file --shardx-convert-to-runtime | FileCheck %s

// Tests that an all_reduce becomes one flat call with the runtime's
// reduction code (max = 2) and keeps a dynamic dim.

shardx.mesh @mesh(shape = 4)
// CHECK-DAG: func.func private @shardx_rt_cg_all_reduce_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, i32, memref<?xi64, strided<[?], offset: ?>>)
// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: (%[[X:.*]]: tensor<4x?xf32>)
func.func @all_reduce(%x: tensor<4x?xf32>) -> tensor<4x?xf32> {
  // CHECK: %[[N:.*]] = tensor.dim %[[X]], %{{.*}} : tensor<4x?xf32>
  // CHECK: %[[MAX:.*]] = arith.constant 2 : i32
  // CHECK: bufferization.to_buffer %[[X]] read_only
  // CHECK: %[[OUT:.*]] = memref.alloc(%[[N]]) : memref<4x?xf32>
  // CHECK: %[[AXES:.*]] = arith.constant dense<0> : tensor<1xi64>
  // CHECK: call @shardx_rt_cg_all_reduce_f32(%{{.*}}, %{{.*}}, %[[MAX]], %{{.*}})
  // CHECK: %[[Y:.*]] = bufferization.to_tensor %[[OUT]] restrict writable
  // CHECK-NOT: shardx.all_reduce
  // CHECK: return %[[Y]]
  %y = shardx.all_reduce %x on @mesh axes = [0] reduction = max : tensor<4x?xf32>
  return %y : tensor<4x?xf32>
}

// -----

// Tests that an all_gather receives [n, local...] and moves the group dim
// next to its stride block: [4, 1, 2, 3] -> [1, 4, 2, 3] -> 8x3.

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @all_gather
func.func @all_gather(%x: tensor<2x3xf32>) -> tensor<8x3xf32> {
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<4x2x3xf32>
  // CHECK: call @shardx_rt_cg_all_gather_f32(
  // CHECK: %[[G:.*]] = bufferization.to_tensor %[[OUT]]
  // CHECK: %[[C:.*]] = tensor.collapse_shape %[[G]]
  // CHECK: %[[E:.*]] = tensor.expand_shape %[[C]] {{.*}} output_shape [4, 1, 2, 3]
  // CHECK: %[[T:.*]] = linalg.transpose ins(%[[E]] : tensor<4x1x2x3xf32>) {{.*}} permutation = [1, 0, 2, 3]
  // CHECK: %[[R:.*]] = tensor.expand_shape {{.*}} output_shape [8, 3]
  // CHECK: return %[[R]]
  %y = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2x3xf32> -> tensor<8x3xf32>
  return %y : tensor<8x3xf32>
}

// -----

// Tests that a strided reduce_scatter views the dim as [stride, n, rest]
// and sends the group dim first (sum = 0), over the group of axis 1.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @reduce_scatter
func.func @reduce_scatter(%x: tensor<8x3xf32>) -> tensor<4x3xf32> {
  // CHECK: tensor.expand_shape {{.*}} output_shape [2, 2, 2, 3]
  // CHECK: linalg.transpose {{.*}} permutation = [1, 0, 2, 3]
  // CHECK: %[[SUM:.*]] = arith.constant 0 : i32
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<4x3xf32>
  // CHECK: arith.constant dense<1> : tensor<1xi64>
  // CHECK: call @shardx_rt_cg_reduce_scatter_f32(%{{.*}}, %{{.*}}, %[[SUM]], %{{.*}})
  // CHECK: bufferization.to_tensor %[[OUT]]
  %y = shardx.reduce_scatter %x on @mesh axes = [1] dim = 0 reduction = sum stride = 2 : tensor<8x3xf32> -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// Tests that an all_to_all sends [n, ...] pieces of the split dim and
// concatenates what it receives along the concat dim.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @all_to_all
func.func @all_to_all(%x: tensor<2x8xf32>) -> tensor<4x4xf32> {
  // CHECK: tensor.expand_shape {{.*}} output_shape [2, 1, 2, 4]
  // CHECK: linalg.transpose {{.*}} permutation = [2, 0, 1, 3]
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<2x2x4xf32>
  // CHECK: call @shardx_rt_cg_all_to_all_f32(
  // CHECK: bufferization.to_tensor %[[OUT]]
  // CHECK: linalg.transpose {{.*}} permutation = [1, 0, 2, 3]
  // CHECK: tensor.expand_shape {{.*}} output_shape [4, 4]
  %y = shardx.all_to_all %x on @mesh axes = [0] split_dim = 1 concat_dim = 0 : tensor<2x8xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// Tests that a strided chunk keeps block [:, j, :] of [stride, n, rest],
// j the rank's group index; no communication.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @chunk
func.func @chunk(%x: tensor<8x4xf32>) -> tensor<4x4xf32> {
  // CHECK: %[[V:.*]] = tensor.expand_shape {{.*}} output_shape [2, 2, 2, 4]
  // CHECK: %[[J:.*]] = call @shardx_rt_cg_axis_index(
  // CHECK: %[[JI:.*]] = arith.index_cast %[[J]] : i64 to index
  // CHECK: tensor.extract_slice %[[V]][0, %[[JI]], 0, 0] [2, 1, 2, 4] [1, 1, 1, 1]
  // CHECK-NOT: call
  // CHECK: tensor.expand_shape {{.*}} output_shape [4, 4]
  %y = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 2 : tensor<8x4xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// Tests that permute passes its pairs, flattened, before the axes.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @permute
func.func @permute(%x: tensor<4xi64>) -> tensor<4xi64> {
  // CHECK: %[[PAIRS:.*]] = arith.constant dense<[0, 1, 1, 0]> : tensor<4xi64>
  // CHECK: %[[PB:.*]] = bufferization.to_buffer %[[PAIRS]]
  // CHECK: %[[P:.*]] = memref.cast %[[PB]]
  // CHECK: call @shardx_rt_cg_permute_i64(%{{.*}}, %{{.*}}, %[[P]], %{{.*}})
  %y = shardx.permute %x on @mesh axes = [0] pairs = [[0, 1], [1, 0]] : tensor<4xi64>
  return %y : tensor<4xi64>
}

// -----

// Tests that broadcast passes its root as i64.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @broadcast
func.func @broadcast(%x: tensor<4xf64>) -> tensor<4xf64> {
  // CHECK: %[[ROOT:.*]] = arith.constant 1 : i64
  // CHECK: call @shardx_rt_cg_broadcast_f64(%{{.*}}, %{{.*}}, %[[ROOT]], %{{.*}})
  %y = shardx.broadcast %x on @mesh axes = [1] root = 1 : tensor<4xf64>
  return %y : tensor<4xf64>
}

// -----

// Tests that partition_value passes its reduction (prod = 4) and a group
// of two axes in the op's order.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @partition_value
func.func @partition_value(%x: tensor<4xi32>) -> tensor<4xi32> {
  // CHECK: %[[PROD:.*]] = arith.constant 4 : i32
  // CHECK: %[[AXES:.*]] = arith.constant dense<[0, 1]> : tensor<2xi64>
  // CHECK: call @shardx_rt_cg_partition_value_i32(%{{.*}}, %{{.*}}, %[[PROD]], %{{.*}})
  %y = shardx.partition_value %x on @mesh axes = [0, 1] reduction = prod : tensor<4xi32>
  return %y : tensor<4xi32>
}

// -----

// Tests that axis_index asks the runtime for the rank's index in the group.

shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @axis_index
func.func @axis_index() -> index {
  // CHECK: arith.constant dense<[1, 0]> : tensor<2xi64>
  // CHECK: %[[J:.*]] = call @shardx_rt_cg_axis_index(
  // CHECK: %[[I:.*]] = arith.index_cast %[[J]] : i64 to index
  // CHECK: return %[[I]]
  %i = shardx.axis_index on @mesh axes = [1, 0] : index
  return %i : index
}

// -----

// Tests that booleans move as i32: widened before the call, narrowed after.

shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @bool_all_gather
func.func @bool_all_gather(%x: tensor<2xi1>) -> tensor<4xi1> {
  // CHECK: linalg.map { arith.extui } ins(%{{.*}} : tensor<2xi1>) outs(%{{.*}} : tensor<2xi32>)
  // CHECK: call @shardx_rt_cg_all_gather_i32(
  // CHECK: linalg.map { arith.trunci {{.*}} } ins(%{{.*}} : tensor<2x2xi32>) outs(%{{.*}} : tensor<2x2xi1>)
  %y = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2xi1> -> tensor<4xi1>
  return %y : tensor<4xi1>
}

// -----

// Tests that an uneven all_gather moves its dim to the front and gathers
// whole rows with per-member element counts (sizes times 3).

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @all_gather_uneven
func.func @all_gather_uneven(%x: tensor<3x?xf32>) -> tensor<3x7xf32> {
  // CHECK: linalg.transpose ins(%{{.*}} : tensor<3x?xf32>) outs(%{{.*}} : tensor<?x3xf32>) permutation = [1, 0]
  // CHECK: %[[COUNTS:.*]] = arith.constant dense<[6, 6, 6, 3]> : tensor<4xi64>
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<7x3xf32>
  // CHECK: call @shardx_rt_cg_all_gather_v_f32(
  // CHECK: %[[G:.*]] = bufferization.to_tensor %[[OUT]]
  // CHECK: linalg.transpose ins(%[[G]] : tensor<7x3xf32>) outs(%{{.*}} : tensor<3x7xf32>) permutation = [1, 0]
  %y = shardx.all_gather %x on @mesh axes = [0] dim = 1 sizes = [2, 2, 2, 1] : tensor<3x?xf32> -> tensor<3x7xf32>
  return %y : tensor<3x7xf32>
}

// -----

// Tests that an uneven reduce_scatter sizes its result by the rank's entry
// of `sizes` and passes the element counts.

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @reduce_scatter_uneven
func.func @reduce_scatter_uneven(%x: tensor<7x4xf32>) -> tensor<?x4xf32> {
  // CHECK: call @shardx_rt_cg_axis_index(
  // CHECK: arith.constant dense<[8, 8, 8, 4]> : tensor<4xi64>
  // CHECK: %[[OUT:.*]] = memref.alloc(%{{.*}}) : memref<?x4xf32>
  // CHECK: call @shardx_rt_cg_reduce_scatter_v_f32(
  // CHECK: bufferization.to_tensor %[[OUT]] {{.*}} to tensor<?x4xf32>
  %y = shardx.reduce_scatter %x on @mesh axes = [0] dim = 0 reduction = sum sizes = [2, 2, 2, 1] : tensor<7x4xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// Tests that an uneven chunk slices the rank's run of `sizes` (offsets
// 0, 2, 4, 6) without communication.

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @chunk_uneven
// CHECK-SAME: (%[[X:.*]]: tensor<7x4xf32>)
func.func @chunk_uneven(%x: tensor<7x4xf32>) -> tensor<?x4xf32> {
  // CHECK: %[[J:.*]] = arith.index_cast
  // CHECK: %[[C6:.*]] = arith.constant 6 : index
  // CHECK: %[[OFF:.*]] = arith.select %{{.*}}, %[[C6]], %{{.*}} : index
  // CHECK: %[[S:.*]] = tensor.extract_slice %[[X]][%[[OFF]], 0] [%{{.*}}, 4] [1, 1] : tensor<7x4xf32> to tensor<?x4xf32>
  // CHECK: return %[[S]]
  %y = shardx.chunk %x on @mesh axes = [0] dim = 0 sizes = [2, 2, 2, 1] : tensor<7x4xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// Tests that an all_to_all with explicit sizes calls the variable-count
// all_to_all with the input shape, the split sizes, the concat sizes and
// both dims.

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @all_to_all_sizes
func.func @all_to_all_sizes(%x: tensor<7x2xf32>) -> tensor<?x8xf32> {
  // CHECK: call @shardx_rt_cg_axis_index(
  // CHECK: arith.constant dense<[7, 2]> : tensor<2xi64>
  // CHECK: arith.constant dense<[2, 2, 2, 1]> : tensor<4xi64>
  // CHECK: arith.constant dense<2> : tensor<4xi64>
  // CHECK: %[[SD:.*]] = arith.constant 0 : i64
  // CHECK: %[[CD:.*]] = arith.constant 1 : i64
  // CHECK: memref.alloc(%{{.*}}) : memref<?x8xf32>
  // CHECK: call @shardx_rt_cg_all_to_all_v_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SD]], %[[CD]], %{{.*}})
  %y = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 sizes = [2, 2, 2, 1] : tensor<7x2xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that an all_to_all uneven only on the concat side splits evenly
// and receives torch.chunk-sized pieces (2, 2, 2, 1 rows of 7).

shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @all_to_all_dynamic_concat
func.func @all_to_all_dynamic_concat(%x: tensor<?x8xf32>) -> tensor<7x2xf32> {
  // CHECK: arith.constant dense<[-1, 8]> : tensor<2xi64>
  // CHECK: arith.constant dense<2> : tensor<4xi64>
  // CHECK: arith.constant dense<[2, 2, 2, 1]> : tensor<4xi64>
  // CHECK: memref.alloc() : memref<7x2xf32>
  // CHECK: call @shardx_rt_cg_all_to_all_v_f32(
  %y = shardx.all_to_all %x on @mesh axes = [0] split_dim = 1 concat_dim = 0 : tensor<?x8xf32> -> tensor<7x2xf32>
  return %y : tensor<7x2xf32>
}

// -----

// Tests that exchange passes its layouts as one descriptor and asks the
// runtime for each dynamic result dim.

shardx.mesh @mesh(shape = 2x2)
// CHECK-DAG: func.func private @shardx_rt_cg_exchange_dim(memref<?xi64, strided<[?], offset: ?>>, i64) -> i64
// CHECK-LABEL: func.func @exchange
func.func @exchange(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // CHECK: %[[DESC:.*]] = arith.constant dense<[2, 5, 3, {{.*}}]> : tensor<23xi64>
  // CHECK: %[[DB:.*]] = bufferization.to_buffer %[[DESC]]
  // CHECK: %[[D:.*]] = memref.cast %[[DB]]
  // CHECK: %[[DIM0:.*]] = arith.constant 0 : i64
  // CHECK: %[[N:.*]] = call @shardx_rt_cg_exchange_dim(%[[D]], %[[DIM0]])
  // CHECK: %[[NI:.*]] = arith.index_cast %[[N]] : i64 to index
  // CHECK: %[[OUT:.*]] = memref.alloc(%[[NI]]) : memref<?x3xf32>
  // CHECK: call @shardx_rt_cg_exchange_f32(%{{.*}}, %{{.*}}, %[[D]], %{{.*}})
  // CHECK: bufferization.to_tensor %[[OUT]]
  %y = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]> shape = [5, 3] : tensor<?x3xf32> -> tensor<?x3xf32>
  return %y : tensor<?x3xf32>
}

// -----

// Tests that a ragged all-to-all becomes one call with its send counts and
// rows (the tensors' buffers, read in place: bufferization copies only a
// buffer that is not contiguous), a fresh buffer for the received counts,
// the row's elements (3) and its group, and that both results read the
// call's buffers.

shardx.mesh @mesh(shape = 2x2)
// CHECK-DAG: func.func private @shardx_rt_cg_ragged_all_to_all_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, i64, memref<?xi64, strided<[?], offset: ?>>)
// CHECK-LABEL: func.func @ragged_all_to_all
// CHECK-SAME: (%[[X:.*]]: tensor<8x3xf32>, %[[C:.*]]: tensor<2xi64>)
func.func @ragged_all_to_all(%x: tensor<8x3xf32>, %c: tensor<2xi64>) -> (tensor<16x3xf32>, tensor<2xi64>) {
  // CHECK: %[[RECV:.*]] = memref.alloc() : memref<2xi64>
  // CHECK: %[[CB:.*]] = bufferization.to_buffer %[[C]] read_only : tensor<2xi64> to memref<2xi64>
  // CHECK-NOT: memref.copy
  // CHECK: %[[CCF:.*]] = memref.collapse_shape %[[CB]]
  // CHECK: %[[SEND:.*]] = memref.cast %[[CCF]]
  // CHECK: %[[RECVF:.*]] = memref.collapse_shape %[[RECV]]
  // CHECK: %[[RECVC:.*]] = memref.cast %[[RECVF]]
  // CHECK: %[[ROW:.*]] = arith.constant 3 : i64
  // CHECK: %[[XB:.*]] = bufferization.to_buffer %[[X]] read_only : tensor<8x3xf32> to memref<8x3xf32>
  // CHECK-NOT: memref.copy
  // CHECK: %[[XF:.*]] = memref.collapse_shape %[[XB]]
  // CHECK: %[[IN:.*]] = memref.cast %[[XF]]
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<16x3xf32>
  // CHECK: %[[OUTF:.*]] = memref.collapse_shape %[[OUT]]
  // CHECK: %[[OUTC:.*]] = memref.cast %[[OUTF]]
  // CHECK: %[[AXES:.*]] = arith.constant dense<1> : tensor<1xi64>
  // CHECK: call @shardx_rt_cg_ragged_all_to_all_f32(%[[IN]], %[[OUTC]], %[[SEND]], %[[RECVC]], %[[ROW]], %{{.*}})
  // CHECK: %[[Y:.*]] = bufferization.to_tensor %[[OUT]] restrict writable : memref<16x3xf32>
  // CHECK: %[[R:.*]] = bufferization.to_tensor %[[RECV]] restrict writable : memref<2xi64>
  // CHECK-NOT: shardx.ragged_all_to_all
  // CHECK: return %[[Y]], %[[R]]
  %y, %r = shardx.ragged_all_to_all %x, %c on @mesh axes = [1] : tensor<8x3xf32>, tensor<2xi64> -> tensor<16x3xf32>, tensor<2xi64>
  return %y, %r : tensor<16x3xf32>, tensor<2xi64>
}

// -----

// Tests that a ragged all-to-all given the counts it receives calls the
// known-counts entry with both counts tensors' buffers (read, not written:
// no fresh counts buffer) and has one result.

shardx.mesh @mesh(shape = 2x2)
// CHECK-DAG: func.func private @shardx_rt_cg_ragged_all_to_all_known_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, i64, memref<?xi64, strided<[?], offset: ?>>)
// CHECK-LABEL: func.func @ragged_all_to_all_known
// CHECK-SAME: (%[[X:.*]]: tensor<16x3xf32>, %[[C:.*]]: tensor<2xi64>, %[[R:.*]]: tensor<2xi64>)
func.func @ragged_all_to_all_known(%x: tensor<16x3xf32>, %c: tensor<2xi64>, %r: tensor<2xi64>) -> tensor<8x3xf32> {
  // CHECK: %[[CB:.*]] = bufferization.to_buffer %[[C]] read_only : tensor<2xi64> to memref<2xi64>
  // CHECK: %[[CCF:.*]] = memref.collapse_shape %[[CB]]
  // CHECK: %[[SEND:.*]] = memref.cast %[[CCF]]
  // CHECK: %[[RB:.*]] = bufferization.to_buffer %[[R]] read_only : tensor<2xi64> to memref<2xi64>
  // CHECK: %[[RCF:.*]] = memref.collapse_shape %[[RB]]
  // CHECK: %[[RECV:.*]] = memref.cast %[[RCF]]
  // CHECK: %[[ROW:.*]] = arith.constant 3 : i64
  // CHECK: %[[XB:.*]] = bufferization.to_buffer %[[X]] read_only
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<8x3xf32>
  // CHECK: call @shardx_rt_cg_ragged_all_to_all_known_f32(%{{.*}}, %{{.*}}, %[[SEND]], %[[RECV]], %[[ROW]], %{{.*}})
  // CHECK: %[[Y:.*]] = bufferization.to_tensor %[[OUT]] restrict writable : memref<8x3xf32>
  // CHECK-NOT: shardx.ragged_all_to_all
  // CHECK-NOT: bufferization.to_tensor
  // CHECK: return %[[Y]]
  %y = shardx.ragged_all_to_all %x, %c recv_counts = %r on @mesh axes = [1] : tensor<16x3xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x3xf32>
  return %y : tensor<8x3xf32>
}

// -----

// Tests that a collective using another's result reads the converted value.

shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @chained
func.func @chained(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: %[[OUT1:.*]] = memref.alloc() : memref<4xf32>
  // CHECK: call @shardx_rt_cg_all_reduce_f32(
  // CHECK: %[[Y:.*]] = bufferization.to_tensor %[[OUT1]]
  // CHECK: bufferization.to_buffer %[[Y]] read_only
  // CHECK: call @shardx_rt_cg_broadcast_f32(
  // CHECK-NOT: shardx.
  %y = shardx.all_reduce %x on @mesh axes = [0] reduction = sum : tensor<4xf32>
  %z = shardx.broadcast %y on @mesh axes = [0] root = 0 : tensor<4xf32>
  return %z : tensor<4xf32>
}
