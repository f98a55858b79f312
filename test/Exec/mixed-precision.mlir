// Tests bf16/f16 programs on the CPU target against their unsharded runs:
// a dp weight gradient (a bf16 GEMM contracted over the sharded batch, so
// each rank's bf16 partial sum is all-reduced in f32 and rounded once) and
// an f16 column sum over a sharded dim. The tolerances are the bf16 ones
// of docs/Compiler.md; the generated program calls the bf16/f16
// collectives.

// RUN: shardx-run %s --entry dp_grad --check --rtol 3e-2 --atol 1e-2 | FileCheck %s --check-prefix=GRAD
// GRAD: dp_grad: 2 ranks
// GRAD: inputs: random from seed 0: 2 in [-1, 1)
// GRAD: check passed
// RUN: shardx-run %s --entry col_sum_f16 --check --rtol 3e-2 --atol 1e-2 | FileCheck %s --check-prefix=SUM
// SUM: col_sum_f16: 2 ranks
// SUM: check passed

// RUN: shardx-compile %s -o %t.so
// RUN: nm %t.so | FileCheck %s --check-prefix=SYMS
// SYMS-DAG: T shardx_rt_cg_all_reduce_bf16
// SYMS-DAG: T shardx_rt_cg_all_reduce_f16

shardx.mesh @mesh(shape = 2, axes = ["dp"])

func.func @dp_grad(%x: tensor<8x16xbf16> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                   %g: tensor<8x4xbf16> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> tensor<16x4xbf16> {
  %e = tensor.empty() : tensor<16x4xbf16>
  %z = arith.constant 0.0 : bf16
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<16x4xbf16>) -> tensor<16x4xbf16>
  %c = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %g : tensor<8x16xbf16>, tensor<8x4xbf16>) outs(%f : tensor<16x4xbf16>) -> tensor<16x4xbf16>
  return %c : tensor<16x4xbf16>
}

func.func @col_sum_f16(%x: tensor<64x8xf16> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> tensor<8xf16> {
  %e = tensor.empty() : tensor<8xf16>
  %z = arith.constant 0.0 : f16
  %f = linalg.fill ins(%z : f16) outs(%e : tensor<8xf16>) -> tensor<8xf16>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<64x8xf16>) outs(%f : tensor<8xf16>) {
  ^bb0(%a: f16, %o: f16):
    %t = arith.addf %a, %o : f16
    linalg.yield %t : f16
  } -> tensor<8xf16>
  return %s : tensor<8xf16>
}
