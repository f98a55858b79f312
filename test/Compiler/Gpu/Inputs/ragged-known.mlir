// The ragged all-to-all of scripts/gpu_check.sh, given the counts it
// receives (no counts exchanged; substitutions and inputs as in
// ragged-counted.mlir, plus ct: ct[r][s] is what rank r receives from
// member s of its group). Rank r sends its rows by c[r] and is given ct[r];
// the way back sends by ct[r] and is given c[r]. Outputs, gathered over
// the mesh in rank order: the received rows (zeros after them) and the rows
// back (the sent rows, zeros after them).
shardx.mesh @mesh(shape = @MESH@)
func.func @ragged(%x: tensor<@P@x@R@x3xf32>, %c: tensor<@P@x@N@xi64>, %ct: tensor<@P@x@N@xi64>) -> (tensor<@PR@x3xf32>, tensor<@PR@x3xf32>) {
  %me = shardx.axis_index on @mesh axes = @ALL@ : index
  %xs = tensor.extract_slice %x[%me, 0, 0] [1, @R@, 3] [1, 1, 1] : tensor<@P@x@R@x3xf32> to tensor<@R@x3xf32>
  %send = tensor.extract_slice %c[%me, 0] [1, @N@] [1, 1] : tensor<@P@x@N@xi64> to tensor<@N@xi64>
  %recv = tensor.extract_slice %ct[%me, 0] [1, @N@] [1, 1] : tensor<@P@x@N@xi64> to tensor<@N@xi64>
  %y = shardx.ragged_all_to_all %xs, %send recv_counts = %recv on @mesh axes = @AXES@ : tensor<@R@x3xf32>, tensor<@N@xi64>, tensor<@N@xi64> -> tensor<@R@x3xf32>
  %back = shardx.ragged_all_to_all %y, %recv recv_counts = %send on @mesh axes = @AXES@ : tensor<@R@x3xf32>, tensor<@N@xi64>, tensor<@N@xi64> -> tensor<@R@x3xf32>
  %ya = shardx.all_gather %y on @mesh axes = @ALL@ dim = 0 : tensor<@R@x3xf32> -> tensor<@PR@x3xf32>
  %ba = shardx.all_gather %back on @mesh axes = @ALL@ dim = 0 : tensor<@R@x3xf32> -> tensor<@PR@x3xf32>
  return %ya, %ba : tensor<@PR@x3xf32>, tensor<@PR@x3xf32>
}
