// RUN: shardx-opt %s --split-input-file --shardx-test-print-rules -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that matmul's rule is (i, k) x (k, j) -> (i, j) with k a reduction,
// the init operand mapping like the result.
func.func @matmul(%a: tensor<8x32xf32>, %b: tensor<32x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: remark: ([i, k], [k, j], [i, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}
  %0 = linalg.matmul ins(%a, %b : tensor<8x32xf32>, tensor<32x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that batch_matmul adds a parallel batch factor.
func.func @batch_matmul(%a: tensor<4x8x32xf32>, %b: tensor<4x32x16xf32>, %c: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  // CHECK: remark: ([i, j, l], [i, l, k], [i, j, k]) -> ([i, j, k]) {i=4, j=8, k=16, l=32} reduction={l}
  %0 = linalg.batch_matmul ins(%a, %b : tensor<4x8x32xf32>, tensor<4x32x16xf32>) outs(%c : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %0 : tensor<4x8x16xf32>
}

// -----

// Tests that a generic row reduction, a transpose, a broadcast and a fill
// take their factors from the indexing maps (fill's scalar is no operand).
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @maps(%x: tensor<8x16xf32>, %r: tensor<8xf32>, %t: tensor<16x8xf32>, %f: f32) -> (tensor<8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  // CHECK: remark: ([i, j], [i]) -> ([i]) {i=8, j=16} reduction={j}
  %0 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x16xf32>) outs(%r : tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  // CHECK: remark: ([j, i], [i, j]) -> ([i, j]) {i=16, j=8}
  %1 = linalg.transpose ins(%x : tensor<8x16xf32>) outs(%t : tensor<16x8xf32>) permutation = [1, 0]
  // CHECK: remark: () -> ([i, j]) {i=8, j=16}
  // CHECK: remark: ([i], [i, j]) -> ([i, j]) {i=8, j=16}
  %e = tensor.empty() : tensor<8x16xf32>
  %2 = linalg.broadcast ins(%r : tensor<8xf32>) outs(%e : tensor<8x16xf32>) dimensions = [1]
  // CHECK: remark: ([i, j]) -> ([i, j]) {i=8, j=16}
  %3 = linalg.fill ins(%f : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0, %1, %2, %3 : tensor<8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that a stride-1 convolution's input spatial dims are windowed dims
// of the output rows (widened by the kernel's extent, read across shard
// edges) and that its window loops need replication (docs/Rules.md,
// "Windowed ops"; more cases in windowed-rules.mlir).
func.func @conv(%x: tensor<1x8x8x3xf32>, %w: tensor<3x3x3x4xf32>, %o: tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32> {
  // CHECK: remark: ([i, j, k, o], [m, n, o, l], [i, j, k, l]) -> ([i, j, k, l]) {i=1, j=6, k=6, l=4, m=3, n=3, o=3} reduction={o} need_replication={m, n} window(operand 0 dim 1: low=1 high=1 halo) window(operand 0 dim 2: low=1 high=1 halo)
  %0 = linalg.conv_2d_nhwc_hwcf ins(%x, %w : tensor<1x8x8x3xf32>, tensor<3x3x3x4xf32>) outs(%o : tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
  return %0 : tensor<1x6x6x4xf32>
}

// -----

// Tests that elementwise arith and math ops on tensors map every dim to
// itself, that dynamic sizes print as ?, and that ops without a rule say so.
func.func @elementwise(%x: tensor<8x?xf32>, %y: tensor<8x?xf32>, %s: f32) -> tensor<8x?xf32> {
  // CHECK: remark: ([i, j], [i, j]) -> ([i, j]) {i=8, j=?}
  %0 = arith.addf %x, %y : tensor<8x?xf32>
  // CHECK: remark: ([i, j]) -> ([i, j]) {i=8, j=?}
  %1 = math.exp %0 : tensor<8x?xf32>
  // CHECK: remark: no sharding rule
  %c = arith.constant dense<1.0> : tensor<4xf32>
  // CHECK: remark: no sharding rule
  %p = tensor.pad %1 low[0, 0] high[1, 0] {
  ^bb0(%i: index, %j: index):
    tensor.yield %s : f32
  } : tensor<8x?xf32> to tensor<9x?xf32>
  return %1 : tensor<8x?xf32>
}

// -----

// Tests that reshapes split or merge factors: the merged dim is the product
// of its group's factors, major to minor, and size-1 dims carry none.
func.func @reshapes(%x: tensor<6x4xf32>, %y: tensor<24xf32>) -> (tensor<24xf32>, tensor<2x3x1x4xf32>, tensor<6x4xf32>) {
  // CHECK: remark: ([i, j]) -> ([i*j]) {i=6, j=4}
  %0 = tensor.collapse_shape %x [[0, 1]] : tensor<6x4xf32> into tensor<24xf32>
  // CHECK: remark: ([i*j*l]) -> ([i, j, k, l]) {i=2, j=3, k=1, l=4}
  %1 = tensor.expand_shape %y [[0, 1, 2, 3]] output_shape [2, 3, 1, 4] : tensor<24xf32> into tensor<2x3x1x4xf32>
  // CHECK: remark: () -> ([i, j]) {i=6, j=4}
  %2 = tensor.empty() : tensor<6x4xf32>
  return %0, %1, %2 : tensor<24xf32>, tensor<2x3x1x4xf32>, tensor<6x4xf32>
}

// -----

// Tests tensor.cast (a dim static and equal on both sides is shared, one
// that turns dynamic needs replication), tensor.extract (the tensor is
// whole: every rank reads the element) and tensor.from_elements (whole).
func.func @scalars(%x: tensor<8x4xf32>, %s: f32) -> (tensor<8x4xf32>, tensor<?x4xf32>, tensor<2xf32>) {
  // CHECK: remark: ([i, j]) -> ([i, j]) {i=8, j=4}
  %c = tensor.cast %x : tensor<8x4xf32> to tensor<8x4xf32>
  // CHECK: remark: ([i, k]) -> ([j, k]) {i=8, j=?, k=4} need_replication={i, j}
  %d = tensor.cast %x : tensor<8x4xf32> to tensor<?x4xf32>
  %i = arith.constant 1 : index
  // CHECK: remark: ([i, j]) -> () {i=8, j=4} need_replication={i, j}
  %e = tensor.extract %x[%i, %i] : tensor<8x4xf32>
  // CHECK: remark: () -> ([i]) {i=2} need_replication={i}
  %f = tensor.from_elements %s, %e : tensor<2xf32>
  return %c, %d, %f : tensor<8x4xf32>, tensor<?x4xf32>, tensor<2xf32>
}
