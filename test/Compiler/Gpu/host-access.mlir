// Tests that the cuda target rejects a program that would read a device
// buffer on the host (here a scalar result read from a tensor), instead of
// leaving the access on the host.

// REQUIRES: cuda-toolkit
// RUN: not shardx-compile --target=cuda --emit=mlir %s -o %t.mlir 2>&1 | FileCheck %s

// CHECK: error: the cuda target left 'memref.load' on the host, where every buffer is device memory
func.func @scalar_out(%x: tensor<8xf32>) -> f32 {
  %c3 = arith.constant 3 : index
  %v = tensor.extract %x[%c3] : tensor<8xf32>
  return %v : f32
}
