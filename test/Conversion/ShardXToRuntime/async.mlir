// RUN: shardx-opt %s --split-input-file --shardx-convert-to-runtime | FileCheck %s

// Tests that an all_reduce_start becomes a start call returning a request
// where it stands, and its wait a wait call (taking the request and both
// buffers, so that they live until then) followed by the output as a
// tensor, where the wait stands; the compute in between stays in between.

shardx.mesh @mesh(shape = 4)
// CHECK-DAG: func.func private @shardx_rt_cg_all_reduce_start_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, i32, memref<?xi64, strided<[?], offset: ?>>) -> i64
// CHECK-DAG: func.func private @shardx_rt_cg_wait_f32(i64, memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>)
// CHECK-LABEL: func.func @start_wait
// CHECK-SAME: (%[[X:.*]]: tensor<4x?xf32>, %[[Z:.*]]: tensor<8xf32>)
func.func @start_wait(%x: tensor<4x?xf32>, %z: tensor<8xf32>) -> (tensor<4x?xf32>, tensor<8xf32>) {
  // CHECK: bufferization.to_buffer %[[X]] read_only
  // CHECK: memref.copy
  // CHECK: %[[OUT:.*]] = memref.alloc(%{{.*}}) : memref<4x?xf32>
  // CHECK: %[[OUTFLAT:.*]] = memref.cast %{{.*}} : memref<?xf32> to memref<?xf32, strided<[?], offset: ?>>
  // CHECK: %[[REQ:.*]] = call @shardx_rt_cg_all_reduce_start_f32(%[[INFLAT:.*]], %[[OUTFLAT]], %{{.*}}, %{{.*}}) : {{.*}} -> i64
  // CHECK-NEXT: %[[S:.*]] = arith.mulf %[[Z]], %[[Z]]
  // CHECK-NEXT: call @shardx_rt_cg_wait_f32(%[[REQ]], %[[INFLAT]], %[[OUTFLAT]])
  // CHECK-NEXT: %[[Y:.*]] = bufferization.to_tensor %[[OUT]] restrict writable
  // CHECK-NOT: shardx.
  // CHECK: return %[[Y]], %[[S]]
  %p = shardx.all_reduce_start %x on @mesh axes = [0] reduction = sum : tensor<4x?xf32>
  %s = arith.mulf %z, %z : tensor<8xf32>
  %y = shardx.wait %p : tensor<4x?xf32>
  return %y, %s : tensor<4x?xf32>, tensor<8xf32>
}

// -----

// Tests that an all_gather_start calls the start form of the flat
// all_gather where it stands, and that its wait call and the unpacking of
// the gathered pieces (into group order along dim 1) come where its wait
// stands, after the compute in between.

shardx.mesh @mesh(shape = 4)
// CHECK-DAG: func.func private @shardx_rt_cg_all_gather_start_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>) -> i64
// CHECK-LABEL: func.func @gather_start
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[Z:.*]]: tensor<8xf32>)
func.func @gather_start(%x: tensor<2x3xf32>, %z: tensor<8xf32>) -> (tensor<2x12xf32>, tensor<8xf32>) {
  // CHECK: %[[OUT:.*]] = memref.alloc() : memref<4x2x3xf32>
  // CHECK: %[[REQ:.*]] = call @shardx_rt_cg_all_gather_start_f32(%[[INFLAT:.*]], %[[OUTFLAT:.*]], %{{.*}}) : {{.*}} -> i64
  // CHECK-NEXT: %[[S:.*]] = arith.mulf %[[Z]], %[[Z]]
  // CHECK-NEXT: call @shardx_rt_cg_wait_f32(%[[REQ]], %[[INFLAT]], %[[OUTFLAT]])
  // CHECK-NEXT: %[[G:.*]] = bufferization.to_tensor %[[OUT]] restrict writable : memref<4x2x3xf32>
  // CHECK: linalg.transpose ins(%{{.*}} : tensor<4x2x1x3xf32>)
  // CHECK-NOT: shardx.
  // CHECK: return %{{.*}}, %[[S]]
  %p = shardx.all_gather_start %x on @mesh axes = [0] dim = 1 : tensor<2x3xf32> -> tensor<2x12xf32>
  %s = arith.mulf %z, %z : tensor<8xf32>
  %y = shardx.wait %p : tensor<2x12xf32>
  return %y, %s : tensor<2x12xf32>, tensor<8xf32>
}

// -----

// Tests that an uneven reduce_scatter_start packs its operand (dim 1 to the
// front) and starts the variable-count reduce-scatter, with this rank's
// output rows looked up from `sizes`, and that its wait call and the
// unpacking come where its wait stands.

shardx.mesh @mesh(shape = 4)
// CHECK-DAG: func.func private @shardx_rt_cg_reduce_scatter_v_start_f32(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, i32, memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>) -> i64
// CHECK-LABEL: func.func @scatter_start_uneven
// CHECK-SAME: (%[[X:.*]]: tensor<2x7xf32>, %[[Z:.*]]: tensor<8xf32>)
func.func @scatter_start_uneven(%x: tensor<2x7xf32>, %z: tensor<8xf32>) -> (tensor<2x?xf32>, tensor<8xf32>) {
  // CHECK: linalg.transpose ins(%[[X]] : tensor<2x7xf32>)
  // CHECK: %[[OUT:.*]] = memref.alloc(%{{.*}}) : memref<?x2xf32>
  // CHECK: %[[REQ:.*]] = call @shardx_rt_cg_reduce_scatter_v_start_f32(%[[INFLAT:.*]], %[[OUTFLAT:.*]], %{{.*}}, %{{.*}}, %{{.*}}) : {{.*}} -> i64
  // CHECK-NEXT: %[[S:.*]] = arith.mulf %[[Z]], %[[Z]]
  // CHECK-NEXT: call @shardx_rt_cg_wait_f32(%[[REQ]], %[[INFLAT]], %[[OUTFLAT]])
  // CHECK-NEXT: bufferization.to_tensor %[[OUT]] restrict writable : memref<?x2xf32>
  // CHECK: linalg.transpose
  // CHECK-NOT: shardx.
  // CHECK: return %{{.*}}, %[[S]]
  %p = shardx.reduce_scatter_start %x on @mesh axes = [0] dim = 1 reduction = sum sizes = [2, 2, 2, 1] : tensor<2x7xf32> -> tensor<2x?xf32>
  %s = arith.mulf %z, %z : tensor<8xf32>
  %y = shardx.wait %p : tensor<2x?xf32>
  return %y, %s : tensor<2x?xf32>, tensor<8xf32>
}
