// RUN: shardx-opt %s | shardx-opt | FileCheck %s
// RUN: shardx-opt %s --mlir-print-op-generic | shardx-opt | FileCheck %s

// Tests that the attention ops round-trip, with and without positions, and
// with grouped-query heads (4 query heads over 2 key/value heads).

// CHECK-LABEL: func.func @attention
// CHECK: %{{.*}}, %{{.*}} = shardx.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 2.500000e-01 : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32> -> tensor<2x4x8x12xf32>, tensor<2x4x8xf32>
// CHECK: shardx.attention %{{.*}}, %{{.*}}, %{{.*}} causal(%{{.*}}, %{{.*}}) scale = 1.250000e-01 : tensor<1x2x?x4xf64>, tensor<1x2x6x4xf64>, tensor<1x2x6x4xf64>, tensor<?xi64>, tensor<6xi64> -> tensor<1x2x?x4xf64>, tensor<1x2x?xf64>
// CHECK: shardx.attention_dq %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale = 2.500000e-01 : {{.*}} -> tensor<2x4x8x16xf32>
// CHECK: shardx.attention_dkv %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale = 2.500000e-01 : {{.*}} -> tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x12xf32>,
                     %dout: tensor<2x4x8x12xf32>, %q2: tensor<1x2x?x4xf64>, %k2: tensor<1x2x6x4xf64>,
                     %qp: tensor<?xi64>, %kp: tensor<6xi64>) {
  %o, %lse = shardx.attention %q, %k, %v scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>
      -> tensor<2x4x8x12xf32>, tensor<2x4x8xf32>
  %o2, %lse2 = shardx.attention %q2, %k2, %k2 causal(%qp, %kp) scale = 0.125
      : tensor<1x2x?x4xf64>, tensor<1x2x6x4xf64>, tensor<1x2x6x4xf64>, tensor<?xi64>, tensor<6xi64>
      -> tensor<1x2x?x4xf64>, tensor<1x2x?xf64>
  %dq = shardx.attention_dq %q, %k, %v, %o, %lse, %dout scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>, tensor<2x4x8x12xf32>,
        tensor<2x4x8xf32>, tensor<2x4x8x12xf32> -> tensor<2x4x8x16xf32>
  %dk, %dv = shardx.attention_dkv %q, %k, %v, %o, %lse, %dout scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>, tensor<2x4x8x12xf32>,
        tensor<2x4x8xf32>, tensor<2x4x8x12xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>
  return
}
