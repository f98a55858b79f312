// RUN: shardx-opt --shardx-decompose-for-codegen %s | FileCheck %s
// RUN: shardx-opt --shardx-decompose-for-codegen=scatter-loops=false %s | FileCheck %s --check-prefix=MASKED
// As the bufferization pipeline runs them, the index guard finds the
// gather's reads already clamped and adds no second check:
// RUN: shardx-opt --shardx-decompose-for-codegen --canonicalize --cse --shardx-guard-tensor-indices %s | FileCheck %s --check-prefix=GUARDED

// A gather reads each element with tensor.extract, the index clamped into
// the source and the value 0 where it is out of range.
// CHECK-LABEL: func.func @gather
// GUARDED-LABEL: func.func @gather
// GUARDED-COUNT-2: arith.cmpi
// GUARDED-NOT: arith.cmpi
// GUARDED: linalg.yield
// CHECK-NOT: tensor.gather
// CHECK: linalg.generic
// CHECK: %[[I:.*]] = arith.index_cast
// CHECK: %[[OK:.*]] = arith.andi
// CHECK: %[[AT:.*]] = arith.select %[[OK]], %[[I]]
// CHECK: %[[X:.*]] = tensor.extract %{{.*}}[%[[AT]], %{{.*}}] : tensor<8x4xf32>
// CHECK: arith.select %{{.*}}, %[[X]], %{{.*}} : f32
func.func @gather(%t: tensor<8x4xf32>, %i: tensor<3x1xi32>) -> tensor<3x4xf32> {
  %0 = tensor.gather %t[%i] gather_dims([0]) : (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// A scatter inserts each row under an in-range check; or (MASKED) each
// element of the destination takes the row whose index matches it.
// CHECK-LABEL: func.func @scatter
// CHECK: scf.for {{.*}} iter_args
// CHECK: scf.if
// CHECK: tensor.insert_slice
// MASKED-LABEL: func.func @scatter
// MASKED-NOT: scf.for
// MASKED: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// MASKED: arith.cmpi eq
func.func @scatter(%s: tensor<3x4xf32>, %d: tensor<8x4xf32>, %i: tensor<3x1xindex>) -> tensor<8x4xf32> {
  %0 = tensor.scatter %s into %d[%i] scatter_dims([0]) unique : (tensor<3x4xf32>, tensor<8x4xf32>, tensor<3x1xindex>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// CHECK-LABEL: func.func @bitcast
// CHECK: linalg.generic
// CHECK: arith.bitcast %{{.*}} : f32 to i32
func.func @bitcast(%a: tensor<3x4xf32>) -> tensor<3x4xi32> {
  %0 = tensor.bitcast %a : tensor<3x4xf32> to tensor<3x4xi32>
  return %0 : tensor<3x4xi32>
}

// CHECK-LABEL: func.func @pack
// CHECK-NOT: linalg.pack
// CHECK: linalg.transpose
func.func @pack(%a: tensor<4x8xf32>) -> tensor<2x4x2x2xf32> {
  %e = tensor.empty() : tensor<2x4x2x2xf32>
  %0 = linalg.pack %a inner_dims_pos = [0, 1] inner_tiles = [2, 2] into %e : tensor<4x8xf32> -> tensor<2x4x2x2xf32>
  return %0 : tensor<2x4x2x2xf32>
}

// CHECK-LABEL: func.func @softmax
// CHECK-NOT: linalg.softmax
// CHECK: math.exp
func.func @softmax(%a: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %e = tensor.empty() : tensor<3x5xf32>
  %0 = linalg.softmax dimension(1) ins(%a : tensor<3x5xf32>) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}
