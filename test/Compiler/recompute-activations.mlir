// RUN: shardx-opt %s --shardx-recompute-activations=policy=none | FileCheck %s --check-prefix=NONE
// RUN: shardx-opt %s --shardx-recompute-activations=policy=selective | FileCheck %s --check-prefix=SEL
// RUN: shardx-opt %s --shardx-recompute-activations=policy=aggressive | FileCheck %s --check-prefix=AGG
// RUN: not shardx-opt %s --shardx-recompute-activations=policy=most 2>&1 | FileCheck %s --check-prefix=BAD

// A forward contraction (h = x w), an elementwise activation of it
// (a = exp(h)) and a second contraction reading a; the backward pass reads
// h (the activation's derivative) and a (the weight gradient).

#id = affine_map<(d0, d1) -> (d0, d1)>
#mk = affine_map<(d0, d1, d2) -> (d0, d2)>
#kn = affine_map<(d0, d1, d2) -> (d2, d1)>
#mn = affine_map<(d0, d1, d2) -> (d0, d1)>
#km = affine_map<(d0, d1, d2) -> (d2, d0)>
#fwd = loc(fused<"forward">["model.py":1:0])
#bwd = loc(fused<"backward">["model.py":2:0])

func.func @step(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %v: tensor<8x8xf32>,
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

// NONE-NOT: shardx.recomputed

// selective: the activation a is computed again from the kept h right
// before the weight gradient reads it; h (a contraction) stays.
// SEL:      %[[H:[0-9]+]] = linalg.generic {{.*}} ins(%arg0, %arg1 :
// SEL:      %[[A:[0-9]+]] = linalg.generic {{.*}} ins(%[[H]] :
// SEL:      linalg.generic {{.*}} ins(%[[A]], %arg2 :
// SEL:      linalg.fill
// SEL:      %[[A2:[0-9]+]] = linalg.generic {{.*}} ins(%[[H]] : {{.*}} {shardx.recomputed}
// SEL:      linalg.generic {{.*}} ins(%[[A2]], %arg3 :
// SEL:      linalg.generic {{.*}} ins(%arg3, %[[H]] :
// SEL-NOT:  shardx.recomputed

// aggressive: h's inputs are step inputs, so it is recomputed too, with
// its zero fill, before its first backward reader; both backward readers
// read copies.
// AGG:      %[[H:[0-9]+]] = linalg.generic {{.*}} ins(%arg0, %arg1 :
// AGG:      %[[F2:[0-9]+]] = linalg.fill {shardx.recomputed}
// AGG:      %[[H2:[0-9]+]] = linalg.generic {{.*}} ins(%arg0, %arg1 : {{.*}} outs(%[[F2]] : {{.*}} {shardx.recomputed}
// AGG:      %[[A3:[0-9]+]] = linalg.generic {{.*}} ins(%[[H2]] : {{.*}} {shardx.recomputed}
// AGG:      linalg.generic {{.*}} ins(%[[A3]], %arg3 :
// AGG:      linalg.generic {{.*}} ins(%arg3, %[[H2]] :
// AGG-NOT:  shardx.recomputed

// BAD: unknown policy 'most' (none, selective, aggressive, budget or plan)
