// RUN: shardx-opt %s --split-input-file --shardx-recompute-activations=policy=plan 2>&1 | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-recompute-activations 2>&1 | FileCheck %s --check-prefix=NONE

// The `plan` policy (shardx-compile's default): each function's
// shardx.recompute, the policy shardx-auto-shard chose to fit its memory
// budget. The step of recompute-activations.mlir.

// Tests that a function with shardx.recompute = "selective" gets
// selective's copies (the activation a again from the kept h), and the
// remark says the policy is the plan's.
// CHECK: remark: recomputes {{[0-9]+}} forward ops before their backward readers (selective, the plan's)
// CHECK-LABEL: func.func @planned
// CHECK: {shardx.recomputed}
// NONE-LABEL: func.func @planned
// NONE-NOT: shardx.recomputed
#id = affine_map<(d0, d1) -> (d0, d1)>
#mk = affine_map<(d0, d1, d2) -> (d0, d2)>
#kn = affine_map<(d0, d1, d2) -> (d2, d1)>
#mn = affine_map<(d0, d1, d2) -> (d0, d1)>
#km = affine_map<(d0, d1, d2) -> (d2, d0)>
#fwd = loc(fused<"forward">["model.py":1:0])
#bwd = loc(fused<"backward">["model.py":2:0])

func.func @planned(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %v: tensor<8x8xf32>,
                %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) attributes {shardx.recompute = "selective"} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32> loc(#fwd)
  %h = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x8xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32> loc(#fwd)
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32):
    %t = math.exp %p : f32
    linalg.yield %t : f32
  } -> tensor<4x8xf32> loc(#fwd)
  %y = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %v : tensor<4x8xf32>, tensor<8x8xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32> loc(#fwd)
  // Backward: dv = a^T g, dh = g * exp(h).
  %e8 = tensor.empty() : tensor<8x8xf32>
  %f8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8x8xf32>) -> tensor<8x8xf32> loc(#bwd)
  %dv = linalg.generic {indexing_maps = [#km, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%f8 : tensor<8x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32> loc(#bwd)
  %dh = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g, %h : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %t = math.exp %q : f32
    %m = arith.mulf %p, %t : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32> loc(#bwd)
  return %y, %dv, %dh : tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}


// -----

// Tests that a function without shardx.recompute gets no copies.
// CHECK-LABEL: func.func @unplanned
// CHECK-NOT: shardx.recomputed
#id = affine_map<(d0, d1) -> (d0, d1)>
#mk = affine_map<(d0, d1, d2) -> (d0, d2)>
#kn = affine_map<(d0, d1, d2) -> (d2, d1)>
#mn = affine_map<(d0, d1, d2) -> (d0, d1)>
#km = affine_map<(d0, d1, d2) -> (d2, d0)>
#fwd = loc(fused<"forward">["model.py":1:0])
#bwd = loc(fused<"backward">["model.py":2:0])

func.func @unplanned(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %v: tensor<8x8xf32>,
                %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32> loc(#fwd)
  %h = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x8xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32> loc(#fwd)
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32):
    %t = math.exp %p : f32
    linalg.yield %t : f32
  } -> tensor<4x8xf32> loc(#fwd)
  %y = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %v : tensor<4x8xf32>, tensor<8x8xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32> loc(#fwd)
  // Backward: dv = a^T g, dh = g * exp(h).
  %e8 = tensor.empty() : tensor<8x8xf32>
  %f8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8x8xf32>) -> tensor<8x8xf32> loc(#bwd)
  %dv = linalg.generic {indexing_maps = [#km, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%f8 : tensor<8x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32> loc(#bwd)
  %dh = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g, %h : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %t = math.exp %q : f32
    %m = arith.mulf %p, %t : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32> loc(#bwd)
  return %y, %dv, %dh : tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}


