// A two-layer linear MLP on 2 ranks of a "tp" axis, Megatron style: w1 split
// by columns, w2 by rows; x and the result replicated. After ShardX's SPMD
// pipeline each rank multiplies x by its 16x8 piece of w1 and that by its
// 8x16 piece of w2, and one all-reduce sums the partial results.
shardx.mesh @mesh(shape = 2, axes = ["tp"])

func.func @mlp(
    %x: tensor<4x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w1: tensor<16x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
    %w2: tensor<16x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<4x16xf32>, tensor<16x16xf32>)
                     outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<4x16xf32>, tensor<16x16xf32>)
                     outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// What scripts/install_check.sh checks in my-opt's output (FileCheck):
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: tensor<4x16xf32>, %{{.*}}: tensor<16x8xf32>, %{{.*}}: tensor<8x16xf32>
// CHECK: linalg.matmul {{.*}} -> tensor<4x8xf32>
// CHECK: linalg.matmul {{.*}} -> tensor<4x16xf32>
// CHECK-NEXT: shardx.all_reduce {{.*}} axes = [0] reduction = sum
// CHECK-NOT: shardx.all_reduce
