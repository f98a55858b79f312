// The ragged all-to-all of scripts/gpu_check.sh, given the counts it
// receives (no counts exchanged; substitutions and inputs as in
// ragged-counted.mlir, plus ct, the transposed counts: ct[j] is what member
// j receives from each member). Member s sends its rows by c[s] and is
// given ct[s]; the way back sends by ct[s] and is given c[s]. Outputs,
// gathered over the mesh: the received rows (zeros after them) and the
// rows back (the sent rows, zeros after them).
shardx.mesh @mesh(shape = @N@)
func.func @ragged(%x: tensor<@N@x@R@x3xf32>, %c: tensor<@N@x@N@xi64>, %ct: tensor<@N@x@N@xi64>) -> (tensor<@NR@x3xf32>, tensor<@NR@x3xf32>) {
  %me = shardx.axis_index on @mesh axes = [0] : index
  %xs = tensor.extract_slice %x[%me, 0, 0] [1, @R@, 3] [1, 1, 1] : tensor<@N@x@R@x3xf32> to tensor<@R@x3xf32>
  %send = tensor.extract_slice %c[%me, 0] [1, @N@] [1, 1] : tensor<@N@x@N@xi64> to tensor<@N@xi64>
  %recv = tensor.extract_slice %ct[%me, 0] [1, @N@] [1, 1] : tensor<@N@x@N@xi64> to tensor<@N@xi64>
  %y = shardx.ragged_all_to_all %xs, %send recv_counts = %recv on @mesh axes = [0] : tensor<@R@x3xf32>, tensor<@N@xi64>, tensor<@N@xi64> -> tensor<@R@x3xf32>
  %back = shardx.ragged_all_to_all %y, %recv recv_counts = %send on @mesh axes = [0] : tensor<@R@x3xf32>, tensor<@N@xi64>, tensor<@N@xi64> -> tensor<@R@x3xf32>
  %ya = shardx.all_gather %y on @mesh axes = [0] dim = 0 : tensor<@R@x3xf32> -> tensor<@NR@x3xf32>
  %ba = shardx.all_gather %back on @mesh axes = [0] dim = 0 : tensor<@R@x3xf32> -> tensor<@NR@x3xf32>
  return %ya, %ba : tensor<@NR@x3xf32>, tensor<@NR@x3xf32>
}
