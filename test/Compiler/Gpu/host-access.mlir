// Tests that the cuda target rejects a program that would read a device
// buffer on the host (here an element read from a tensor into a new one;
// entry points return tensors), instead of leaving the access on the host.

// REQUIRES: cuda-toolkit
// RUN: not shardx-compile --target=cuda --emit=mlir %s -o %t.mlir 2>&1 | FileCheck %s

// CHECK: error: the cuda target left 'memref.load' on the host, where every buffer is device memory
func.func @scalar_out(%x: tensor<8xf32>) -> tensor<f32> {
  %c3 = arith.constant 3 : index
  %v = tensor.extract %x[%c3] : tensor<8xf32>
  %t = tensor.from_elements %v : tensor<f32>
  return %t : tensor<f32>
}
