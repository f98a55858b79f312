// RUN: shardx-opt %s --split-input-file --shardx-auto-shard="compute-rate=1e9" | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-auto-shard="compute-rate=1e9" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: shardx-opt %s --split-input-file --shardx-auto-shard="compute-rate=1e9" --shardx-spmd -o /dev/null

// Tests that a parameter and its optimizer state take one layout, that the
// parameter's and the state's updates among the results are tied to it,
// that the inputs get a layout of their own, and that the remark lists the
// plan with its modeled step time and peak.
shardx.mesh @mesh(shape = 4, axes = ["x"])

// REMARK: remark: auto-shard @step on 4 ranks: modeled step time {{[0-9.]+}} us, modeled peak {{[0-9]+}} bytes
// REMARK-NEXT: %arg0 tensor<64x32xf32> (%arg0, %arg1): [{{.*}}]
// REMARK-NEXT: inputs (%arg2): [{{.*}}]
// CHECK-LABEL: func.func @step
// CHECK-SAME: %arg0: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P:[^>]*]]>}
// CHECK-SAME: %arg1: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P]]>, torch.state = "momentum_buffer"}
// CHECK-SAME: %arg2: tensor<16x64xf32> {shardx.layout = #shardx.layout<@mesh, [{{[^]]*}}]>}
// CHECK-SAME: -> (tensor<16x32xf32>, tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P]]>}, tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P]]>})
func.func @step(%w: tensor<64x32xf32>,
                %m: tensor<64x32xf32> {torch.state = "momentum_buffer"},
                %x: tensor<16x64xf32>)
    -> (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  %m2 = arith.addf %m, %w : tensor<64x32xf32>
  %w2 = arith.subf %w, %m2 : tensor<64x32xf32>
  return %y, %w2, %m2 : tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Tests that layouts the user gave are kept (a pinned plan): only the
// inputs are chosen.
shardx.mesh @mesh(shape = 2, axes = ["x"])

// REMARK: remark: auto-shard @pinned on 2 ranks
// REMARK-NEXT: inputs (%arg2):
// CHECK-LABEL: func.func @pinned
// CHECK-SAME: %arg0: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}
// CHECK-SAME: %arg1: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>, torch.state = "momentum_buffer"}
func.func @pinned(%w: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
                  %m: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>, torch.state = "momentum_buffer"},
                  %x: tensor<16x64xf32>)
    -> (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  %m2 = arith.addf %m, %w : tensor<64x32xf32>
  %w2 = arith.subf %w, %m2 : tensor<64x32xf32>
  return %y, %w2, %m2 : tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Tests that only the public function is decided in a regionally traced
// program: its private region function is priced inlined (as shardx-spmd
// inlines it), keeps no layouts and is still called.
shardx.mesh @mesh(shape = 2, axes = ["x"])

// REMARK: remark: auto-shard @calls on 2 ranks
// REMARK-NEXT: %arg0 tensor<64x32xf32> (%arg0, %arg1): [{{.*}}]
// REMARK-NOT: @region
// CHECK-LABEL: func.func private @region
// CHECK-SAME: (%arg0: tensor<16x64xf32>, %arg1: tensor<64x32xf32>) -> tensor<16x32xf32>
// CHECK-LABEL: func.func @calls
// CHECK-SAME: %arg0: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P:[^>]*]]>}
// CHECK-SAME: %arg1: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [[P]]>, torch.state = "momentum_buffer"}
// CHECK: call @region
func.func private @region(%x: tensor<16x64xf32>, %w: tensor<64x32xf32>) -> tensor<16x32xf32> {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}
func.func @calls(%w: tensor<64x32xf32>,
                 %m: tensor<64x32xf32> {torch.state = "momentum_buffer"},
                 %x: tensor<16x64xf32>)
    -> (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %y = func.call @region(%x, %w) : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %m2 = arith.addf %m, %w : tensor<64x32xf32>
  %w2 = arith.subf %w, %m2 : tensor<64x32xf32>
  return %y, %w2, %m2 : tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Tests that a function whose arguments all have layouts leaves nothing to
// decide: no error, the layouts kept, a remark with the plan's numbers.
shardx.mesh @mesh(shape = 2, axes = ["x"])

// REMARK: remark: auto-shard @all_pinned on 2 ranks: modeled step time {{[0-9.]+}} us, modeled peak {{[0-9]+}} bytes
// REMARK-NEXT: nothing to decide: every argument has its layout
// CHECK-LABEL: func.func @all_pinned
// CHECK-SAME: %arg0: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}
// CHECK-SAME: %arg1: tensor<16x64xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}
func.func @all_pinned(%w: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
                      %x: tensor<16x64xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) -> tensor<16x32xf32> {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}
