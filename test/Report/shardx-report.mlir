// RUN: shardx-opt %s --shardx-report=%t.html -o /dev/null
// RUN: FileCheck %s --input-file=%t.html
// RUN: shardx-opt %s --shardx-propagate --shardx-insert-reshards \
// RUN:   --shardx-report="output=%t.2.html title=given" -o /dev/null
// RUN: FileCheck %s --check-prefix=GIVEN --input-file=%t.2.html
// RUN: not shardx-opt %s --shardx-report -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOFILE

// Tests that the report draws each argument's layout from the layout
// algebra (the strided FSDP x TP weight: tp splits the rows first, then
// dp), lists every reshard with its plan, and totals them per collective
// kind and mesh axis group.

shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])

func.func @mlp(
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>},
    %w1: tensor<16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(1)]>},
    %w2: tensor<32x16xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(0)]>})
    -> (tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>}) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>)
                     outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<8x32xf32>, tensor<32x16xf32>)
                     outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// CHECK: <title>ShardX sharding report</title>
// The totals (the same as --shardx-print-plan's, see the pytest of the
// report in Chromium): x moves to column blocks over dp, fc1's pending sum
// over dp is reduce-scattered, the output's sum over both axes all-reduced.
// CHECK: <tr class="total" data-reshards="3" data-collectives="3" data-bytes="1152"
// CHECK: <table class="sortable" id="by-kind">
// CHECK: data-key="all_reduce" data-count="1" data-bytes="768"
// CHECK: data-key="all_to_all" data-count="1" data-bytes="128"
// CHECK: data-key="reduce_scatter" data-count="1" data-bytes="256"
// CHECK: <table class="sortable" id="by-axes">
// CHECK: data-key="dp" data-count="2" data-bytes="384"
// CHECK: data-key="dp,tp" data-count="1" data-bytes="768"
// CHECK: <h3>propagation choices</h3>
// CHECK: mesh @mesh: 2 x 2 (dp = 2, tp = 2), 4 ranks
// CHECK: <h3>reshards (3,
// CHECK: <tr class="reshard" {{.*}}shardx-report.mlir:{{[0-9]+}}:5{{.*}}[S(0), R]</code> &rarr; <code>[S(1), R]
// CHECK-SAME: all_to_all(axes = [0], split_dim = 1, concat_dim = 0)
// CHECK: <tr class="reshard" {{.*}}reduce_scatter(axes = [0], dim = 1, sum)
// CHECK: <tr class="reshard" {{.*}}all_reduce(axes = [0, 1], sum)
// CHECK-SAME: <li class="local">chunk(axes = [0], dim = 0)
// CHECK-NOT: <tr class="reshard"
// %x: rows split over dp, replicated over tp.
// CHECK: data-kind="arg" data-index="0" data-layout="[S(0), R]"
// CHECK-SAME: data-shards="2"
// CHECK: data-ranks="0,1" data-term="0" data-local="4x16"
// CHECK-SAME: data-cells="0,0,4,16"
// CHECK: data-ranks="2,3" data-term="0" data-local="4x16"
// CHECK-SAME: data-cells="4,0,4,16"
// %w2: tp splits the 32 rows in halves, dp each half again.
// CHECK: data-kind="arg" data-index="2" data-layout="[S(0), S(0)], order = {0 = [1, 0]}"
// CHECK-SAME: data-shards="4"
// CHECK: data-ranks="0" {{.*}} data-cells="0,0,8,16"
// CHECK: data-ranks="1" {{.*}} data-cells="16,0,8,16"
// CHECK: data-ranks="2" {{.*}} data-cells="8,0,8,16"
// CHECK: data-ranks="3" {{.*}} data-cells="24,0,8,16"
// CHECK: data-kind="result" data-index="0" data-layout="[S(0), R]"
// CHECK: intermediate values (
// CHECK: <template id="pic-mlp-0">

// GIVEN: <title>given</title>
// GIVEN-NOT: propagation choices
// GIVEN: <tr class="total" data-reshards="3" data-collectives="3" data-bytes="1152"

// NOFILE: error: shardx-report needs an output file
