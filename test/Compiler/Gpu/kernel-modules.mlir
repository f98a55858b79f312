// RUN: shardx-opt --shardx-merge-kernel-modules %s | FileCheck %s

// Every outlined kernel moves into one gpu.module; structurally identical
// kernels (the same IR but for the name) become one, and each launch calls
// the kernel that stays.

// CHECK-NOT: gpu.module @k
// CHECK-LABEL: func.func @host
// CHECK: gpu.launch_func @shardx_kernels::@k0
// CHECK: gpu.launch_func @shardx_kernels::@k0
// CHECK: gpu.launch_func @shardx_kernels::@k2
// CHECK: gpu.module @shardx_kernels
// CHECK: gpu.func @k0
// CHECK-NOT: gpu.func @k1
// CHECK: gpu.func @k2
// CHECK-NOT: gpu.module
module attributes {gpu.container_module} {
  gpu.module @k0 {
    gpu.func @k0(%x: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %f = arith.constant 1.0 : f32
      memref.store %f, %x[%i] : memref<4xf32>
      gpu.return
    }
  }
  gpu.module @k1 {
    gpu.func @k1(%x: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %f = arith.constant 1.0 : f32
      memref.store %f, %x[%i] : memref<4xf32>
      gpu.return
    }
  }
  gpu.module @k2 {
    gpu.func @k2(%x: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %f = arith.constant 2.0 : f32
      memref.store %f, %x[%i] : memref<4xf32>
      gpu.return
    }
  }
  func.func @host(%x: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    gpu.launch_func @k0::@k0 blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1) args(%x : memref<4xf32>)
    gpu.launch_func @k1::@k1 blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1) args(%x : memref<4xf32>)
    gpu.launch_func @k2::@k2 blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1) args(%x : memref<4xf32>)
    return
  }
}

