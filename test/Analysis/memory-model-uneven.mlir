// RUN: shardx-opt %s --split-input-file --shardx-spmd --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-spmd --shardx-print-plan=memory-level=buffers -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=BUF

// The buffers level replays the program converted to runtime calls, where
// the rank's index is a call of shardx_rt_cg_axis_index: the call keeps its
// mesh's shape and axes (shardx.axis_index_group), and the same bounds
// hold. @uneven: the exponential is computed in place of the argument's
// copy, the exchange's staging buffer and result remain.
// BUF: memory of @uneven per rank: peak 832 B (832 bytes) at memref.alloc
// BUF-SAME: modeled on buffers
// BUF-NEXT: arguments 192 B: inputs 192 B
// BUF-NEXT: allocated at the peak 640 B (640 bytes): collective buffers 192 B, results 448 B
// BUF-NOT: dynamic size
// BUF: memory of @two_axes per rank: peak 288 B (288 bytes) at memref.alloc
// BUF-NEXT: arguments 192 B: inputs 192 B
// BUF-NEXT: allocated at the peak 96 B (96 bytes): results 96 B
// BUF-NOT: dynamic size

// Tests that the dynamic sizes of an uneven shard count at their largest
// rank's: 7 rows over 3 ranks are 3 + 2 + 2, so each [?, 16] f32 value is
// 3 x 16 x 4 = 192 bytes: the argument (its signature's layout), the
// exponential (its rows computed from the rank's coordinate) and the
// exchange's staging copy of it; with the gathered result (static, 7 x 16 x
// 4 = 448 bytes), 1024 at the exchange. Before, each counted 0 bytes.
// CHECK: memory of @uneven per rank: peak 1.00 KiB (1024 bytes) at shardx.exchange
// CHECK-NEXT: arguments 192 B: inputs 192 B
// CHECK-NEXT: allocated at the peak 832 B (832 bytes): activations 192 B, collective buffers 192 B, results 448 B
// CHECK-NOT: dynamic size
func.func @uneven(%x: tensor<7x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<7x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %e = tensor.empty() : tensor<7x16xf32>
  %y = linalg.exp ins(%x : tensor<7x16xf32>) outs(%e : tensor<7x16xf32>) -> tensor<7x16xf32>
  return %y : tensor<7x16xf32>
}
shardx.mesh @mesh(shape = 3)

// -----

// Tests a 2-D mesh: 10 rows over both axes of a 2x2 mesh are 3 + 3 + 2 + 2,
// so each [?, 8] f32 value is at most 3 x 8 x 4 = 96 bytes.
// CHECK: memory of @two_axes per rank: peak 288 B (288 bytes)
// CHECK-NEXT: arguments 192 B: inputs 192 B
// CHECK-NEXT: allocated at the peak 96 B (96 bytes): results 96 B
// CHECK-NOT: dynamic size
func.func @two_axes(%x: tensor<10x8xf32> {shardx.layout = #shardx.layout<@mesh2, [S(0), S(0)]>},
                    %y: tensor<10x8xf32> {shardx.layout = #shardx.layout<@mesh2, [S(0), S(0)]>})
    -> (tensor<10x8xf32> {shardx.layout = #shardx.layout<@mesh2, [S(0), S(0)]>}) {
  %e = tensor.empty() : tensor<10x8xf32>
  %s = linalg.add ins(%x, %y : tensor<10x8xf32>, tensor<10x8xf32>) outs(%e : tensor<10x8xf32>) -> tensor<10x8xf32>
  return %s : tensor<10x8xf32>
}
shardx.mesh @mesh2(shape = 2x2)

// -----

// Tests an uneven split through calls: the second and third layers become
// calls of one outlined function at the buffers level (shardx-outline-calls;
// the first reads the zero-filled tensors CSE made once). The callee's
// buffers take their sizes from the call's operands on each rank (3 of 7
// rows at most): both levels model 3,936 bytes. Before, the callee's
// dynamic buffers counted 0 bytes at the buffers level, silently (3,744).
// CHECK: memory of @model per rank: peak 3.84 KiB (3936 bytes)
// CHECK-NEXT: arguments 3.09 KiB: inputs 3.09 KiB
// CHECK-NEXT: allocated at the peak 768 B (768 bytes): activations 768 B
// CHECK-NOT: dynamic size
// BUF: memory of @model per rank: peak 3.84 KiB (3936 bytes) at func.call
// BUF-SAME: modeled on buffers
// BUF-NEXT: arguments 3.09 KiB: inputs 3.09 KiB
// BUF-NEXT: allocated at the peak 768 B (768 bytes): activations 768 B
// BUF-NOT: dynamic size
shardx.mesh @mesh3(shape = 3)
func.func private @layer(%x: tensor<7x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> tensor<7x8xf32> {
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<7x16xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<7x16xf32>) -> tensor<7x16xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<7x8xf32>, tensor<8x16xf32>) outs(%f1 : tensor<7x16xf32>) -> tensor<7x16xf32>
  %t = math.tanh %h : tensor<7x16xf32>
  %s = arith.mulf %t, %h : tensor<7x16xf32>
  %e2 = tensor.empty() : tensor<7x8xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<7x8xf32>) -> tensor<7x8xf32>
  %o = linalg.matmul ins(%s, %w2 : tensor<7x16xf32>, tensor<16x8xf32>) outs(%f2 : tensor<7x8xf32>) -> tensor<7x8xf32>
  %r = arith.addf %o, %x : tensor<7x8xf32>
  %q = arith.mulf %r, %r : tensor<7x8xf32>
  %y = arith.addf %q, %r : tensor<7x8xf32>
  %u = arith.subf %y, %q : tensor<7x8xf32>
  %v = arith.mulf %u, %y : tensor<7x8xf32>
  return %v : tensor<7x8xf32>
}
func.func @model(%x: tensor<7x8xf32> {shardx.layout = #shardx.layout<@mesh3, [S(0)]>},
                 %a1: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>},
                 %b1: tensor<16x8xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>},
                 %a2: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>},
                 %b2: tensor<16x8xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>},
                 %a3: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>},
                 %b3: tensor<16x8xf32> {shardx.layout = #shardx.layout<@mesh3, [R]>})
    -> (tensor<7x8xf32> {shardx.layout = #shardx.layout<@mesh3, [S(0)]>}) {
  %1 = func.call @layer(%x, %a1, %b1) : (tensor<7x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<7x8xf32>
  %2 = func.call @layer(%1, %a2, %b2) : (tensor<7x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<7x8xf32>
  %3 = func.call @layer(%2, %a3, %b3) : (tensor<7x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<7x8xf32>
  return %3 : tensor<7x8xf32>
}
