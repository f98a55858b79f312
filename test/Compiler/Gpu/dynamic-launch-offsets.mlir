// RUN: shardx-opt --shardx-dynamic-launch-offsets %s | FileCheck %s
// RUN: shardx-opt --shardx-dynamic-launch-offsets --gpu-kernel-outlining --shardx-merge-kernel-modules %s | FileCheck %s --check-prefix=MERGED

// Two copies into the slots of one bucket, at offsets 0 and 8 (as a
// gradient bucket packs its parameters): each launch reads its slot through
// a cast to a dynamic offset, so the outlined kernels are the same and
// merge into one. The slot the body does more than load from and store to
// (a subview inside the launch) keeps its static offset.

// CHECK-LABEL: func.func @pack
// CHECK: %[[S0:.*]] = memref.subview %arg2[0] [8] [1]
// CHECK: %[[S1:.*]] = memref.subview %arg2[8] [8] [1]
// CHECK: %[[C0:.*]] = memref.cast %[[S0]] : memref<8xf32, strided<[1]>> to memref<8xf32, strided<[1], offset: ?>>
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[C0]][
// CHECK: %[[C1:.*]] = memref.cast %[[S1]] : memref<8xf32, strided<[1], offset: 8>> to memref<8xf32, strided<[1], offset: ?>>
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[C1]][
// CHECK-NOT: memref.cast
// CHECK: gpu.launch
// CHECK: memref.subview %[[S1]]

// MERGED-LABEL: func.func @pack
// MERGED: gpu.launch_func @shardx_kernels::@[[K:[a-z_0-9]+]] blocks
// MERGED: gpu.launch_func @shardx_kernels::@[[K]] blocks
// MERGED-NOT: gpu.launch_func @shardx_kernels::@[[K]] blocks
// MERGED: gpu.launch_func
// MERGED: gpu.module @shardx_kernels
// MERGED-COUNT-2: gpu.func
// MERGED-NOT: gpu.func
func.func @pack(%a: memref<8xf32>, %b: memref<8xf32>, %bucket: memref<16xf32>) {
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %s0 = memref.subview %bucket[0] [8] [1] : memref<16xf32> to memref<8xf32, strided<[1]>>
  %s1 = memref.subview %bucket[8] [8] [1] : memref<16xf32> to memref<8xf32, strided<[1], offset: 8>>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c8, %sy = %c1, %sz = %c1) {
    %v = memref.load %a[%tx] : memref<8xf32>
    memref.store %v, %s0[%tx] : memref<8xf32, strided<[1]>>
    gpu.terminator
  }
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c8, %sy = %c1, %sz = %c1) {
    %v = memref.load %b[%tx] : memref<8xf32>
    memref.store %v, %s1[%tx] : memref<8xf32, strided<[1], offset: 8>>
    gpu.terminator
  }
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
    %h = memref.subview %s1[4] [4] [1] : memref<8xf32, strided<[1], offset: 8>> to memref<4xf32, strided<[1], offset: 12>>
    %v = memref.load %b[%tx] : memref<8xf32>
    memref.store %v, %h[%tx] : memref<4xf32, strided<[1], offset: 12>>
    gpu.terminator
  }
  return
}
