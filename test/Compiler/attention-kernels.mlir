// RUN: shardx-opt %s --shardx-decompose-for-codegen=attention-kernels=true --canonicalize --cse | FileCheck %s
// RUN: shardx-opt %s --shardx-decompose-for-codegen --canonicalize --cse | FileCheck %s --check-prefix=CPU

// Tests the attention ops with `products` (a GPU's fused attention's
// precision). With attention-kernels (the cuda target) they become calls of
// the runtime's fused kernels (lib/Runtime/cuda/Attention.cpp): contiguous
// 1-D views of the inputs and positions (a one-element dummy when not
// causal), fresh buffers for the results, then batch, heads, key/value
// heads, queries and keys (a rank's dynamic rows read with tensor.dim),
// the width, causal and the scale. Ops the kernels do not take (no
// `products`, a width of 48, i32 positions) stay linalg ops. Without the
// option, every product's operands are rounded to bf16 (or f16) and back.

// CHECK-DAG: func.func private @shardx_rt_cuda_attention_bf16(memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, i64, i64, i64, i64, i64, i64, i32, f64) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @shardx_rt_cuda_attention_dq_bf16(
// CHECK-DAG: func.func private @shardx_rt_cuda_attention_dkv_bf16(
// CHECK-DAG: func.func private @shardx_rt_cuda_attention_f16(

// CHECK-LABEL: func.func @forward
// CHECK-DAG: %[[B:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[H:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[D:.*]] = arith.constant 64 : i64
// CHECK-DAG: %[[CAUSAL:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[SCALE:.*]] = arith.constant 1.250000e-01 : f64
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<2x4x8x64xf32>
// CHECK: %[[LSE:.*]] = memref.alloc() : memref<2x4x8xf32>
// CHECK: call @shardx_rt_cuda_attention_bf16({{.*}}, %[[B]], %[[H]], %{{.*}}, %{{.*}}, %{{.*}}, %[[D]], %[[CAUSAL]], %[[SCALE]])
// CHECK: bufferization.to_tensor %[[OUT]] restrict writable
// CHECK: bufferization.to_tensor %[[LSE]] restrict writable
// CHECK-NOT: linalg.generic
// CPU-LABEL: func.func @forward
// CPU-COUNT-3: arith.truncf %{{.*}} : f32 to bf16
// CPU: math.exp
// CPU: arith.truncf %{{.*}} : f32 to bf16
// CPU-NOT: shardx.attention
func.func @forward(%q: tensor<2x4x8x64xf32>, %k: tensor<2x2x8x64xf32>, %v: tensor<2x2x8x64xf32>,
                   %qp: tensor<8xi64>) -> (tensor<2x4x8x64xf32>, tensor<2x4x8xf32>) {
  %o, %lse = shardx.attention %q, %k, %v causal(%qp, %qp) scale = 0.125 products = bf16
      : tensor<2x4x8x64xf32>, tensor<2x2x8x64xf32>, tensor<2x2x8x64xf32>, tensor<8xi64>, tensor<8xi64>
      -> tensor<2x4x8x64xf32>, tensor<2x4x8xf32>
  return %o, %lse : tensor<2x4x8x64xf32>, tensor<2x4x8xf32>
}

// Not causal: a one-element dummy for the positions, causal 0.
// CHECK-LABEL: func.func @not_causal
// CHECK-DAG: %[[DUMMY:.*]] = arith.constant dense<0> : tensor<1xi64>
// CHECK-DAG: %[[NOT:.*]] = arith.constant 0 : i32
// CHECK: bufferization.to_buffer %[[DUMMY]] read_only
// CHECK: call @shardx_rt_cuda_attention_f16({{.*}}, %[[NOT]], %{{.*}})
func.func @not_causal(%q: tensor<1x2x16x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x32xf32>)
    -> tensor<1x2x16x32xf32> {
  %o, %lse = shardx.attention %q, %k, %v scale = 0.5 products = f16
      : tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>
      -> tensor<1x2x16x32xf32>, tensor<1x2x16xf32>
  return %o : tensor<1x2x16x32xf32>
}

// The backward ops, each its own call; a rank's dynamic rows (an uneven
// split of the queries) read with tensor.dim, the results' buffers sized
// by them.
// CHECK-LABEL: func.func @backward
// CHECK: %[[ROWS:.*]] = tensor.dim %arg0, %c2
// CHECK: memref.alloc(%[[ROWS]]) : memref<1x2x?x128xf32>
// CHECK: call @shardx_rt_cuda_attention_dq_bf16(
// CHECK: memref.alloc() : memref<1x2x16x128xf32>
// CHECK: memref.alloc() : memref<1x2x16x128xf32>
// CHECK: call @shardx_rt_cuda_attention_dkv_bf16(
// CHECK-NOT: linalg.generic
// CPU-LABEL: func.func @backward
// CPU: arith.truncf %{{.*}} : f32 to bf16
// CPU-NOT: shardx.attention
func.func @backward(%q: tensor<1x2x?x128xf32>, %k: tensor<1x2x16x128xf32>, %v: tensor<1x2x16x128xf32>,
                    %o: tensor<1x2x?x128xf32>, %lse: tensor<1x2x?xf32>, %do: tensor<1x2x?x128xf32>,
                    %qp: tensor<?xi64>, %kp: tensor<16xi64>)
    -> (tensor<1x2x?x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32>) {
  %dq = shardx.attention_dq %q, %k, %v, %o, %lse, %do causal(%qp, %kp) scale = 0.125 products = bf16
      : tensor<1x2x?x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x?x128xf32>,
        tensor<1x2x?xf32>, tensor<1x2x?x128xf32>, tensor<?xi64>, tensor<16xi64> -> tensor<1x2x?x128xf32>
  %dk, %dv = shardx.attention_dkv %q, %k, %v, %o, %lse, %do causal(%qp, %kp) scale = 0.125 products = bf16
      : tensor<1x2x?x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x?x128xf32>,
        tensor<1x2x?xf32>, tensor<1x2x?x128xf32>, tensor<?xi64>, tensor<16xi64>
        -> tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32>
  return %dq, %dk, %dv : tensor<1x2x?x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32>
}

// Left to the linalg ops: no products, a width the kernels lack, i32
// positions.
// CHECK-LABEL: func.func @not_taken
// CHECK-NOT: call @shardx_rt_cuda_attention
// CHECK: return
func.func @not_taken(%q: tensor<1x2x8x64xf32>, %q48: tensor<1x2x8x48xf32>, %p: tensor<8xi32>)
    -> (tensor<1x2x8x64xf32>, tensor<1x2x8x48xf32>, tensor<1x2x8x64xf32>) {
  %a, %la = shardx.attention %q, %q, %q scale = 0.125
      : tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>
      -> tensor<1x2x8x64xf32>, tensor<1x2x8xf32>
  %b, %lb = shardx.attention %q48, %q48, %q48 scale = 0.125 products = bf16
      : tensor<1x2x8x48xf32>, tensor<1x2x8x48xf32>, tensor<1x2x8x48xf32>
      -> tensor<1x2x8x48xf32>, tensor<1x2x8xf32>
  %c, %lc = shardx.attention %q, %q, %q causal(%p, %p) scale = 0.125 products = bf16
      : tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<8xi32>, tensor<8xi32>
      -> tensor<1x2x8x64xf32>, tensor<1x2x8xf32>
  return %a, %b, %c : tensor<1x2x8x64xf32>, tensor<1x2x8x48xf32>, tensor<1x2x8x64xf32>
}
