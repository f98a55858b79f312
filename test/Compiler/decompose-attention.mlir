// RUN: shardx-opt %s --shardx-decompose-for-codegen --canonicalize --cse | FileCheck %s
// RUN: shardx-opt %s --shardx-decompose-for-codegen=attention-block-bytes=512 --canonicalize --cse | FileCheck %s --check-prefix=BLOCK

// Tests the attention ops as linalg ops (lib/Compiler/DecomposeAttention.cpp):
// the 4 query heads over 2 key/value heads stacked on the rows ([2 * 2, 2 *
// 8, width]: every product one batched GEMM), the causal condition from
// the positions (the rows' positions repeated per query head), and the
// backward's probabilities and dS built once for dq and dk/dv (CSE); a
// rank's dynamic rows (an uneven split) take tensor.dim sizes.

// With 512-byte blocks, the forward's [4, 16, 8] f32 scores (2,048 bytes)
// take four blocks of 2 keys: an online softmax, each block's max
// rescaling the sum and output so far by exp(m - m'); the backward's
// [2, 8, 8] f64 scores two blocks of 4, each recomputed, its dk and dv rows
// inserted.
// BLOCK-LABEL: func.func @forward
// BLOCK-COUNT-4: tensor.extract_slice %{{.*}}[0, {{[0246]}}, 0] [4, 2, 16]
// BLOCK: arith.maximumf
// BLOCK: arith.divf
// BLOCK-LABEL: func.func @backward
// BLOCK-COUNT-2: tensor.insert_slice %{{.*}} into %{{.*}}[0, {{0|4}}, 0] [2, 4, 16]
// BLOCK-LABEL: func.func @dynamic_rows
// BLOCK-NOT: tensor.extract_slice

// CHECK-LABEL: func.func @forward
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3], [4]] output_shape [2, 2, 2, 8, 16]
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2, 3], [4]] : tensor<2x2x2x8x16xf32> into tensor<4x16x16xf32>
// CHECK: arith.remui
// CHECK: tensor.extract
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<4x16x16xf32>, tensor<4x8x16xf32>) outs(%{{.*}} : tensor<4x16x8xf32>)
// CHECK: arith.cmpi sle
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: math.log
// CHECK-NOT: shardx.attention
func.func @forward(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x12xf32>,
                   %qp: tensor<8xi64>) -> (tensor<2x4x8x12xf32>, tensor<2x4x8xf32>) {
  %o, %lse = shardx.attention %q, %k, %v causal(%qp, %qp) scale = 0.25
      : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x12xf32>, tensor<8xi64>, tensor<8xi64>
      -> tensor<2x4x8x12xf32>, tensor<2x4x8xf32>
  return %o, %lse : tensor<2x4x8x12xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @backward
// CHECK-COUNT-1: math.exp
// CHECK-NOT: math.exp
// CHECK-NOT: shardx.attention
func.func @backward(%q: tensor<1x2x8x16xf64>, %k: tensor<1x2x8x16xf64>, %o: tensor<1x2x8x16xf64>,
                    %lse: tensor<1x2x8xf64>) -> (tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>) {
  %dq = shardx.attention_dq %q, %k, %k, %o, %lse, %o scale = 0.25
      : tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>,
        tensor<1x2x8xf64>, tensor<1x2x8x16xf64> -> tensor<1x2x8x16xf64>
  %dk, %dv = shardx.attention_dkv %q, %k, %k, %o, %lse, %o scale = 0.25
      : tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>,
        tensor<1x2x8xf64>, tensor<1x2x8x16xf64> -> tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>
  return %dq, %dk, %dv : tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>
}

// CHECK-LABEL: func.func @dynamic_rows
// CHECK: tensor.dim %{{.*}}, %c2
// CHECK: tensor.empty(%{{.*}}) : tensor<2x?x6xf32>
// CHECK-NOT: shardx.attention
func.func @dynamic_rows(%q: tensor<1x2x?x4xf32>, %k: tensor<1x2x6x4xf32>, %qp: tensor<?xi64>,
                        %kp: tensor<6xi64>) -> (tensor<1x2x?x4xf32>, tensor<1x2x?xf32>) {
  %o, %lse = shardx.attention %q, %k, %k causal(%qp, %kp) scale = 0.5
      : tensor<1x2x?x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<?xi64>, tensor<6xi64>
      -> tensor<1x2x?x4xf32>, tensor<1x2x?xf32>
  return %o, %lse : tensor<1x2x?x4xf32>, tensor<1x2x?xf32>
}

// A rank's uneven piece of the heads: the head counts, and so their ratio,
// are dynamic; the key/value heads are repeated to the query heads (head h
// reads key/value head h / ratio) and the key gradient summed back.
// CHECK-LABEL: func.func @dynamic_heads
// CHECK: arith.divui
// CHECK: linalg.index 1
// CHECK: arith.divui
// CHECK: tensor.extract
// CHECK: linalg.index 4
// CHECK-NOT: shardx.attention
func.func @dynamic_heads(%q: tensor<1x?x8x4xf32>, %k: tensor<1x?x8x4xf32>, %o: tensor<1x?x8x4xf32>,
                         %lse: tensor<1x?x8xf32>) -> (tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>) {
  %dk, %dv = shardx.attention_dkv %q, %k, %k, %o, %lse, %o scale = 0.5
      : tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>,
        tensor<1x?x8xf32>, tensor<1x?x8x4xf32> -> tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>
  return %dk, %dv : tensor<1x?x8x4xf32>, tensor<1x?x8x4xf32>
}

// The two backward ops are written together at the first of them; here
// (as the scheduling of collectives may leave them) attention_dkv comes
// first and its result is read before attention_dq.
// CHECK-LABEL: func.func @dkv_first
// CHECK: tensor.collapse_shape
// CHECK-NOT: shardx.attention
// BLOCK-LABEL: func.func @dkv_first
func.func @dkv_first(%q: tensor<1x2x8x16xf64>, %k: tensor<1x2x8x16xf64>, %o: tensor<1x2x8x16xf64>,
                     %lse: tensor<1x2x8xf64>) -> (tensor<2x8x16xf64>, tensor<1x2x8x16xf64>) {
  %dk, %dv = shardx.attention_dkv %q, %k, %k, %o, %lse, %o scale = 0.25
      : tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>,
        tensor<1x2x8xf64>, tensor<1x2x8x16xf64> -> tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>
  %c = tensor.collapse_shape %dv [[0, 1], [2], [3]] : tensor<1x2x8x16xf64> into tensor<2x8x16xf64>
  %dq = shardx.attention_dq %q, %k, %k, %o, %lse, %o scale = 0.25
      : tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>,
        tensor<1x2x8xf64>, tensor<1x2x8x16xf64> -> tensor<1x2x8x16xf64>
  return %c, %dq : tensor<2x8x16xf64>, tensor<1x2x8x16xf64>
}
