// RUN: shardx-opt %s --shardx-canonicalize --verify-diagnostics --split-input-file

// Tests that a static pad of INT64_MIN, the dynamic-size marker, without
// its operand is refused before upstream's folds read the missing value
// (the SPMD fuzzer's crash of 2026-11-29; upstream's verifier accepts it).
func.func @pad_marker(%x: tensor<1x4xf32>) -> tensor<1x8xf32> {
  %c0 = arith.constant 0.0 : f32
  // expected-error @+1 {{'tensor.pad' op has a static pad of -9223372036854775808, which is the dynamic-size marker, without its operand}}
  %p = tensor.pad %x low[0, -9223372036854775808] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %c0 : f32
  } : tensor<1x4xf32> to tensor<1x8xf32>
  return %p : tensor<1x8xf32>
}
