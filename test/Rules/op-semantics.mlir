// RUN: shardx-opt %s --split-input-file --shardx-test-print-rules=semantics -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that a matmul into a fill of zero is a sum reduction from its
// identity, linear in each input alone (not in its accumulator alone).
func.func @matmul(%a: tensor<8x32xf32>, %b: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %z = arith.constant 0.0 : f32
  // CHECK: remark: reduction=none identity-init=0 linear-in=[] shape-only=1
  %e = tensor.empty() : tensor<8x16xf32>
  // CHECK: remark: ([i, j]) -> ([i, j]) {i=8, j=16}
  // CHECK: remark: reduction=none identity-init=0 linear-in=[] shape-only=1
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK: remark: {{.*}} reduction={k}
  // CHECK: remark: reduction=sum identity-init=1 linear-in=[0, 1] shape-only=0
  %0 = linalg.matmul ins(%a, %b : tensor<8x32xf32>, tensor<32x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a max-reduction from -inf is a max from its identity (also
// with maxnumf), that one from 0 is a max without it, and that a max is
// not linear in its input.
func.func @amax(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %g = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  // CHECK: remark: reduction=max identity-init=1 linear-in=[] shape-only=0
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maxnumf %out, %in : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  // CHECK: remark: reduction=max identity-init=0 linear-in=[] shape-only=0
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x8xf32>) outs(%g : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %out, %in : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that integer sums and products from their identities are found,
// and that a body reading its accumulator twice is no reduction.
func.func @integers(%x: tensor<4x8xi32>, %y: tensor<4x8xf32>) -> (tensor<4xi32>, tensor<4xi32>, tensor<4xf32>) {
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %fzero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xi32>
  %fe = tensor.empty() : tensor<4xf32>
  %f0 = linalg.fill ins(%zero : i32) outs(%e : tensor<4xi32>) -> tensor<4xi32>
  %f1 = linalg.fill ins(%one : i32) outs(%e : tensor<4xi32>) -> tensor<4xi32>
  %ff = linalg.fill ins(%fzero : f32) outs(%fe : tensor<4xf32>) -> tensor<4xf32>
  // CHECK: remark: reduction=sum identity-init=1
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x8xi32>) outs(%f0 : tensor<4xi32>) {
  ^bb0(%in: i32, %out: i32):
    %s = arith.addi %out, %in : i32
    linalg.yield %s : i32
  } -> tensor<4xi32>
  // CHECK: remark: reduction=prod identity-init=1
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x8xi32>) outs(%f1 : tensor<4xi32>) {
  ^bb0(%in: i32, %out: i32):
    %s = arith.muli %out, %in : i32
    linalg.yield %s : i32
  } -> tensor<4xi32>
  // CHECK: remark: reduction=none identity-init=0
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%y : tensor<4x8xf32>) outs(%ff : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %out, %in : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %0, %1, %2 : tensor<4xi32>, tensor<4xi32>, tensor<4xf32>
}

// -----

// Tests linearity of elementwise ops: a quotient is linear in its dividend
// only, a product in either factor alone, exp in nothing, data movement in
// its source; a splat constant is shape-only.
func.func @linearity(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>) {
  // CHECK: remark: reduction=none identity-init=0 linear-in=[0] shape-only=0
  %0 = arith.divf %a, %b : tensor<4x8xf32>
  // CHECK: remark: reduction=none identity-init=0 linear-in=[0, 1] shape-only=0
  %1 = arith.mulf %a, %b : tensor<4x8xf32>
  // CHECK: remark: reduction=none identity-init=0 linear-in=[] shape-only=0
  %2 = math.exp %a : tensor<4x8xf32>
  // CHECK: remark: reduction=none identity-init=0 linear-in=[0] shape-only=0
  %3 = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
  // CHECK: remark: no sharding rule
  // CHECK: remark: reduction=none identity-init=0 linear-in=[] shape-only=1
  %4 = arith.constant dense<2.0> : tensor<4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>
}
