// RUN: shardx-opt %s --split-input-file --shardx-insert-reshards --shardx-verify-layouts | FileCheck %s

// Tests that two consumers needing a value in the same other layout share
// one redistribute, placed right after the producer, and that a consumer
// needing the layout the value has reads it directly.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @shared
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>
func.func @shared(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
        tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
        tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  // CHECK-NEXT: %[[R:.*]] = shardx.redistribute %[[X]] : tensor<4x8xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(1)]>
  // CHECK-NEXT: math.exp %[[R]]
  %a = math.exp %x {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>],
                    shardx.operand_layouts = [#shardx.layout<@mesh, [S(1)]>]} : tensor<4x8xf32>
  // CHECK-NEXT: math.tanh %[[R]]
  %b = math.tanh %x {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>],
                     shardx.operand_layouts = [#shardx.layout<@mesh, [S(1)]>]} : tensor<4x8xf32>
  // CHECK-NEXT: math.sin %[[X]]
  %c = math.sin %x {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
                    shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]} : tensor<4x8xf32>
  // CHECK-NOT: shardx.redistribute
  return %a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that a splat (a fill of an empty tensor) needed in another layout
// is made again in that layout instead of moved.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @splat
func.func @splat(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) {
  %z = arith.constant 1.0 : f32
  %e = tensor.empty() {shardx.layouts = [#shardx.layout<@mesh, [R]>]} : tensor<4x8xf32>
  %f = linalg.fill {shardx.layouts = [#shardx.layout<@mesh, [R]>],
                    shardx.operand_layouts = [#shardx.layout<@mesh, [R]>]}
      ins(%z : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NOT: shardx.redistribute
  // CHECK: %[[E:.*]] = tensor.empty() {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>]}
  // CHECK: %[[F:.*]] = linalg.fill {{.*}}outs(%[[E]]
  // CHECK: arith.addf %{{.*}}, %[[F]]
  %y = arith.addf %x, %f {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>],
                          shardx.operand_layouts = [#shardx.layout<@mesh, [S(1)]>, #shardx.layout<@mesh, [S(1)]>]} : tensor<4x8xf32>
  // CHECK-NOT: shardx.redistribute
  return %y : tensor<4x8xf32>
}

// -----

// Tests that an annotation becomes the redistribute to its layout, and a
// result not in its declared layout gets one before the return.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @annotate_and_result
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>
func.func @annotate_and_result(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // CHECK-NEXT: %[[A:.*]] = shardx.redistribute %[[X]] : tensor<4x8xf32> from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [S(0)]>
  %a = shardx.annotate %x : tensor<4x8xf32> to #shardx.layout<@mesh, [S(0)]>
  // CHECK-NEXT: %[[Y:.*]] = math.exp %[[A]]
  %y = math.exp %a {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
                    shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]} : tensor<4x8xf32>
  // CHECK-NEXT: %[[R:.*]] = shardx.redistribute %[[Y]] : tensor<4x8xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  // CHECK-NEXT: return %[[R]]
  return %y : tensor<4x8xf32>
}
