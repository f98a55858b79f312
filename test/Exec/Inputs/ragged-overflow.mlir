// A ragged all-to-all given counts its buffers cannot hold (the lit test
// substitutes @COUNT@): every rank sends @COUNT@ rows to each of the 2
// members from an 8-row operand into a 4-row result.
shardx.mesh @mesh(shape = 2)
func.func @overflow(%x: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %counts = arith.constant dense<@COUNT@> : tensor<2xi64>
  %y, %rc = shardx.ragged_all_to_all %x, %counts on @mesh axes = [0] : tensor<8x2xf32>, tensor<2xi64> -> tensor<4x2xf32>, tensor<2xi64>
  return %y : tensor<4x2xf32>
}
