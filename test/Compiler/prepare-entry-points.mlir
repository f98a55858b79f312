// RUN: shardx-opt --shardx-prepare-entry-points %s | FileCheck %s

// Tests that a public function gets a C interface and read-only tensor
// arguments (a scalar argument is left alone), and that a private one is
// left as it is.
// CHECK-LABEL: func.func @entry
// CHECK-SAME: (%{{.*}}: tensor<4xf32> {bufferization.writable = false}, %{{.*}}: tensor<4xf32> {bufferization.writable = false}, %{{.*}}: f32)
// CHECK-SAME: attributes {llvm.emit_c_interface}
func.func @entry(%a: tensor<4xf32>, %b: tensor<4xf32>, %s: f32) -> tensor<4xf32> {
  %0 = func.call @helper(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @helper
// CHECK-SAME: (%{{.*}}: tensor<4xf32>, %{{.*}}: tensor<4xf32>) -> tensor<4xf32> {
func.func private @helper(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
