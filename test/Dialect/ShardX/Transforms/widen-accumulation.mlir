// RUN: shardx-opt --shardx-widen-accumulation --split-input-file %s | FileCheck %s
// RUN: shardx-opt --shardx-widen-accumulation=contractions=false --split-input-file %s | FileCheck %s --check-prefix=NOCON

// Tests that a bf16 matmul accumulates in f32 from an f32 zero fill and is
// rounded to bf16 once, keeping its bf16 operands.
// CHECK-LABEL: func.func @matmul_bf16
// CHECK-SAME: (%[[A:.*]]: tensor<8x16xbf16>, %[[B:.*]]: tensor<16x4xbf16>)
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: %[[ACC:.*]] = linalg.generic {{.*}} ins(%[[A]], %[[B]] : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%[[FILL]] : tensor<8x4xf32>)
// CHECK: ^bb0(%[[X:.*]]: bf16, %[[Y:.*]]: bf16, %[[OUT:.*]]: f32):
// CHECK:   %[[XW:.*]] = arith.extf %[[X]] : bf16 to f32
// CHECK:   %[[YW:.*]] = arith.extf %[[Y]] : bf16 to f32
// CHECK:   %[[P:.*]] = arith.mulf %[[XW]], %[[YW]] : f32
// CHECK:   %[[S:.*]] = arith.addf %[[OUT]], %[[P]] : f32
// CHECK:   linalg.yield %[[S]] : f32
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[ACC]] : tensor<8x4xf32>) outs(%{{.*}} : tensor<8x4xbf16>)
// CHECK:   arith.truncf %{{.*}} : f32 to bf16
// CHECK: return %[[R]] : tensor<8x4xbf16>
// Tests that contractions=false leaves the matmul to the target.
// NOCON-LABEL: func.func @matmul_bf16
// NOCON-NOT: arith.extf
// NOCON: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%{{.*}} : tensor<8x4xbf16>)
// NOCON-NOT: arith.extf
func.func @matmul_bf16(%a: tensor<8x16xbf16>, %b: tensor<16x4xbf16>) -> tensor<8x4xbf16> {
  %e = tensor.empty() : tensor<8x4xbf16>
  %z = arith.constant 0.0 : bf16
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<8x4xbf16>) -> tensor<8x4xbf16>
  %c = linalg.matmul ins(%a, %b : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%f : tensor<8x4xbf16>) -> tensor<8x4xbf16>
  return %c : tensor<8x4xbf16>
}

// -----

// Tests that an f16 sum into an arbitrary init (of dynamic shape) extends
// the init, and that a rounding step inside the body is dropped.
// CHECK-LABEL: func.func @sum_f16
// CHECK-SAME: (%[[X:.*]]: tensor<4x?xf16>, %[[INIT:.*]]: tensor<4xf16>)
// CHECK: %[[WIDE:.*]] = linalg.generic {{.*}} ins(%[[INIT]] : tensor<4xf16>) outs(%{{.*}} : tensor<4xf32>)
// CHECK:   arith.extf %{{.*}} : f16 to f32
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]] : tensor<4x?xf16>) outs(%[[WIDE]] : tensor<4xf32>)
// CHECK: ^bb0(%[[IN:.*]]: f16, %[[OUT:.*]]: f32):
// CHECK:   %[[INW:.*]] = arith.extf %[[IN]] : f16 to f32
// CHECK:   %[[S:.*]] = arith.addf %[[INW]], %[[OUT]] : f32
// CHECK-NOT: truncf
// CHECK:   linalg.yield %[[S]] : f32
// CHECK: arith.truncf %{{.*}} : f32 to f16
// Tests that contractions=false still widens a sum.
// NOCON-LABEL: func.func @sum_f16
// NOCON: linalg.generic {{.*}} outs(%{{.*}} : tensor<4xf32>)
// NOCON: arith.truncf %{{.*}} : f32 to f16
func.func @sum_f16(%x: tensor<4x?xf16>, %init: tensor<4xf16>) -> tensor<4xf16> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x?xf16>) outs(%init : tensor<4xf16>) {
  ^bb0(%a: f16, %o: f16):
    %a32 = arith.extf %a : f16 to f32
    %o32 = arith.extf %o : f16 to f32
    %s32 = arith.addf %a32, %o32 : f32
    %s = arith.truncf %s32 : f32 to f16
    linalg.yield %s : f16
  } -> tensor<4xf16>
  return %r : tensor<4xf16>
}

// -----

// Tests that f32 reductions and bf16 elementwise ops are left alone.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: arith.extf
// CHECK: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: arith.mulf %{{.*}}, %{{.*}} : bf16
// CHECK-NOT: arith.extf
func.func @untouched(%x: tensor<8x4xf32>, %init: tensor<4xf32>, %y: tensor<4xbf16>) -> (tensor<4xf32>, tensor<4xbf16>) {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%x : tensor<8x4xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %e = tensor.empty() : tensor<4xbf16>
  %m = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%y : tensor<4xbf16>) outs(%e : tensor<4xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %s = arith.mulf %a, %a : bf16
    linalg.yield %s : bf16
  } -> tensor<4xbf16>
  return %r, %m : tensor<4xf32>, tensor<4xbf16>
}

// -----

// Tests that a body this pass cannot compute in f32 (a bitcast) is left
// alone.
// CHECK-LABEL: func.func @bitcast_body
// CHECK: arith.bitcast
// CHECK-NOT: arith.extf
func.func @bitcast_body(%x: tensor<8xbf16>, %init: tensor<bf16>) -> tensor<bf16> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%x : tensor<8xbf16>) outs(%init : tensor<bf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %i = arith.bitcast %a : bf16 to i16
    %c = arith.constant 1 : i16
    %j = arith.addi %i, %c : i16
    %b = arith.bitcast %j : i16 to bf16
    %s = arith.maximumf %b, %o : bf16
    linalg.yield %s : bf16
  } -> tensor<bf16>
  return %r : tensor<bf16>
}
