// RUN: shardx-opt %s --shardx-test-print-rules=semantics -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests the attention ops' factors (lib/Rules/AttentionRules.cpp): batch i,
// key/value heads j, query heads per key/value head k (q's head dim is
// j*k), queries l, keys m, widths n and o. The forward keeps the keys and
// both widths whole; given lse and out, dq is a sum over the keys and dk,
// dv sums over the query heads and queries, each from a fresh accumulator;
// the positions share the queries' and keys' factors.
func.func @rules(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x6x16xf32>, %v: tensor<2x2x6x12xf32>,
                 %o: tensor<2x4x8x12xf32>, %l: tensor<2x4x8xf32>, %qp: tensor<8xi64>, %kp: tensor<6xi64>) {
  // CHECK: remark: ([i, j*k, l, n], [i, j, m, n], [i, j, m, o], [l], [m]) -> ([i, j*k, l, o], [i, j*k, l]) {i=2, j=2, k=2, l=8, m=6, n=16, o=12} need_replication={m, n, o}
  // CHECK: remark: reduction=none identity-init=0
  %out, %lse = shardx.attention %q, %k, %v causal(%qp, %kp) scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x12xf32>, tensor<8xi64>, tensor<6xi64>
      -> tensor<2x4x8x12xf32>, tensor<2x4x8xf32>
  // CHECK: remark: ([i, j*k, l, n], [i, j, m, n], [i, j, m, o], [i, j*k, l, o], [i, j*k, l], [i, j*k, l, o]) -> ([i, j*k, l, n]) {i=2, j=2, k=2, l=8, m=6, n=16, o=12} reduction={m} need_replication={n, o}
  // CHECK: remark: reduction=sum identity-init=1
  %dq = shardx.attention_dq %q, %k, %v, %o, %l, %o scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x12xf32>, tensor<2x4x8x12xf32>,
        tensor<2x4x8xf32>, tensor<2x4x8x12xf32> -> tensor<2x4x8x16xf32>
  // CHECK: remark: ([i, j*k, l, n], [i, j, m, n], [i, j, m, o], [i, j*k, l, o], [i, j*k, l], [i, j*k, l, o]) -> ([i, j, m, n], [i, j, m, o]) {i=2, j=2, k=2, l=8, m=6, n=16, o=12} reduction={k, l} need_replication={n, o}
  // CHECK: remark: reduction=sum identity-init=1
  %dk, %dv = shardx.attention_dkv %q, %k, %v, %o, %l, %o scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x12xf32>, tensor<2x4x8x12xf32>,
        tensor<2x4x8xf32>, tensor<2x4x8x12xf32> -> tensor<2x2x6x16xf32>, tensor<2x2x6x12xf32>
  return
}
