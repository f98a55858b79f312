// RUN: shardx-opt --shardx-pack-slices-as-concat --split-input-file %s | FileCheck %s

// Tests that a chain of insert_slices that tiles a fresh 1-D tensor in order
// (how shardx-bucket-collectives packs a bucket) becomes one concat.
// CHECK-LABEL: func.func @tiles
// CHECK-NOT: tensor.empty
// CHECK-NOT: tensor.insert_slice
// CHECK: %[[C:.*]] = tensor.concat dim(0) %arg0, %arg1 : (tensor<4xf32>, tensor<6xf32>) -> tensor<10xf32>
// CHECK-NEXT: return %[[C]]
func.func @tiles(%a: tensor<4xf32>, %b: tensor<6xf32>) -> tensor<10xf32> {
  %e = tensor.empty() : tensor<10xf32>
  %0 = tensor.insert_slice %a into %e[0] [4] [1] : tensor<4xf32> into tensor<10xf32>
  %1 = tensor.insert_slice %b into %0[4] [6] [1] : tensor<6xf32> into tensor<10xf32>
  return %1 : tensor<10xf32>
}

// -----

// Tests that a chain that leaves a gap (here, the last element) is kept.
// CHECK-LABEL: func.func @gap
// CHECK-NOT: tensor.concat
// CHECK-COUNT-2: tensor.insert_slice
func.func @gap(%a: tensor<4xf32>, %b: tensor<5xf32>) -> tensor<10xf32> {
  %e = tensor.empty() : tensor<10xf32>
  %0 = tensor.insert_slice %a into %e[0] [4] [1] : tensor<4xf32> into tensor<10xf32>
  %1 = tensor.insert_slice %b into %0[4] [5] [1] : tensor<5xf32> into tensor<10xf32>
  return %1 : tensor<10xf32>
}

// -----

// Tests that a chain into a tensor that is not fresh is kept.
// CHECK-LABEL: func.func @not_fresh
// CHECK-NOT: tensor.concat
// CHECK-COUNT-2: tensor.insert_slice
func.func @not_fresh(%a: tensor<4xf32>, %b: tensor<6xf32>, %d: tensor<10xf32>) -> tensor<10xf32> {
  %0 = tensor.insert_slice %a into %d[0] [4] [1] : tensor<4xf32> into tensor<10xf32>
  %1 = tensor.insert_slice %b into %0[4] [6] [1] : tensor<6xf32> into tensor<10xf32>
  return %1 : tensor<10xf32>
}
