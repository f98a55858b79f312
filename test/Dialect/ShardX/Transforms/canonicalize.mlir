// RUN: shardx-opt %s --split-input-file --shardx-canonicalize | FileCheck %s

// Tests that a function of several blocks whose join argument is dead
// becomes one block (region simplification runs where a region has more
// than one block).
// CHECK-LABEL: func.func @dead_join
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %{{[^:]*}}: i1) -> tensor<4xf32>
// CHECK-NEXT: return %[[X]] : tensor<4xf32>
// CHECK-NEXT: }
func.func @dead_join(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  %p = arith.addf %x, %x : tensor<4xf32>
  cf.br ^bb3(%p : tensor<4xf32>)
^bb2:
  %q = arith.mulf %x, %x : tensor<4xf32>
  cf.br ^bb3(%q : tensor<4xf32>)
^bb3(%y: tensor<4xf32>):
  return %x : tensor<4xf32>
}

// -----

// Tests that a module of one-block functions is canonicalized as upstream's
// canonicalizer does: constants fold, dead ops go, and the constants are
// hoisted to the start of the function.
// CHECK-LABEL: func.func @one_block
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>)
// CHECK-NEXT: %[[C:.*]] = arith.constant dense<3.000000e+00> : tensor<4xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[X]], %[[C]] : tensor<4xf32>
// CHECK-NEXT: return %[[S]] : tensor<4xf32>
func.func @one_block(%x: tensor<4xf32>) -> tensor<4xf32> {
  %dead = arith.mulf %x, %x : tensor<4xf32>
  %a = arith.constant dense<1.0> : tensor<4xf32>
  %b = arith.constant dense<2.0> : tensor<4xf32>
  %c = arith.addf %a, %b : tensor<4xf32>
  %s = arith.addf %x, %c : tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// Tests that the regions of ops nested in a one-block function are
// canonicalized too: an scf.if on a constant condition is inlined.
// CHECK-LABEL: func.func @nested
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>)
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[X]], %[[X]] : tensor<4xf32>
// CHECK-NEXT: return %[[S]] : tensor<4xf32>
func.func @nested(%x: tensor<4xf32>) -> tensor<4xf32> {
  %true = arith.constant true
  %r = scf.if %true -> tensor<4xf32> {
    %s = arith.addf %x, %x : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
