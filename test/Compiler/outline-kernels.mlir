// RUN: shardx-opt %s --shardx-outline-kernels --split-input-file | FileCheck %s

// Tests that each linalg op on buffers becomes a call of a private kernel
// taking its buffers, and that two structurally identical ops share one
// kernel while an op with another constant gets its own.
// CHECK-LABEL: func.func @twice
// CHECK-SAME: (%[[A:.*]]: memref<4x8xf32>, %[[B:.*]]: memref<4x8xf32>, %[[C:.*]]: memref<4x8xf32>)
// CHECK: call @[[EXP:shardx_kernel_[0-9a-f]+]](%[[A]], %[[B]])
// CHECK: call @[[EXP]](%[[B]], %[[C]])
// CHECK: call @[[SCALE:shardx_kernel_[0-9a-f]+]](%[[C]], %[[A]])
// CHECK-NOT: linalg.generic
// CHECK: func.func private @[[EXP]](%{{.*}}: memref<4x8xf32>, %{{.*}}: memref<4x8xf32>)
// CHECK: math.exp
// CHECK: func.func private @[[SCALE]](
// CHECK: arith.constant 2.0
#id = affine_map<(i, j) -> (i, j)>
func.func @twice(%a: memref<4x8xf32>, %b: memref<4x8xf32>, %c: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<4x8xf32>) outs(%b : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : memref<4x8xf32>) outs(%c : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  %two = arith.constant 2.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<4x8xf32>) outs(%a : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %two : f32
    linalg.yield %m : f32
  }
  return
}

// -----

// Tests that views of one buffer at different static offsets share a
// kernel that takes a dynamic offset (the call site casts), and that an op
// reading and writing one buffer passes it once.
// CHECK-LABEL: func.func @bucket
// CHECK: %[[V0:.*]] = memref.subview
// CHECK: %[[V1:.*]] = memref.subview
// CHECK: %[[C0:.*]] = memref.cast %[[V0]] : memref<64xf32, strided<[1]>> to memref<64xf32, strided<[1], offset: ?>>
// CHECK: call @[[K:shardx_kernel_[0-9a-f]+]](%[[C0]])
// CHECK: %[[C1:.*]] = memref.cast %[[V1]] : memref<64xf32, strided<[1], offset: 64>> to memref<64xf32, strided<[1], offset: ?>>
// CHECK: call @[[K]](%[[C1]])
// CHECK: func.func private @[[K]](%{{.*}}: memref<64xf32, strided<[1], offset: ?>>)
// CHECK-NOT: func.func private
#v = affine_map<(i) -> (i)>
func.func @bucket(%buf: memref<128xf32>) {
  %v0 = memref.subview %buf[0] [64] [1] : memref<128xf32> to memref<64xf32, strided<[1]>>
  %v1 = memref.subview %buf[64] [64] [1] : memref<128xf32> to memref<64xf32, strided<[1], offset: 64>>
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%v0 : memref<64xf32, strided<[1]>>) outs(%v0 : memref<64xf32, strided<[1]>>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%v1 : memref<64xf32, strided<[1], offset: 64>>) outs(%v1 : memref<64xf32, strided<[1], offset: 64>>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  return
}
