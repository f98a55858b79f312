// A ragged all-to-all given the counts it receives (the lit test
// substitutes @COUNT@): every rank sends 2 rows to each of the 2 members
// from an 8-row operand into a 4-row result, and says it receives @COUNT@
// rows from each.
shardx.mesh @mesh(shape = 2)
func.func @known(%x: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %counts = arith.constant dense<2> : tensor<2xi64>
  %given = arith.constant dense<@COUNT@> : tensor<2xi64>
  %y = shardx.ragged_all_to_all %x, %counts recv_counts = %given on @mesh axes = [0] : tensor<8x2xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}
