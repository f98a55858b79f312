// The ragged all-to-all of scripts/gpu_check.sh, counts exchanged
// (ragged_gpu_check.py substitutes the mesh @MESH@, its @P@ ranks and
// all its axes @ALL@, the group axes @AXES@ of @N@ members, the rows a rank
// holds @R@, and the gathered sizes @PR@ = @P@ * @R@, @PN@ = @P@ * @N@; it
// writes the inputs). Every rank gets the global inputs: x, the rows of
// every rank (@R@ rows of 3 f32 each), and c, the counts (c[r][j]: the rows
// rank r sends to member j of its group); rank r sends its first
// sum_j c[r][j] rows, grouped by destination, by c[r]. Then the way back:
// the same op with the received counts. Outputs, gathered over the mesh in
// rank order: the received rows (zeros after them), the rows back (the
// sent rows, zeros after them), the counts received and received back.
shardx.mesh @mesh(shape = @MESH@)
func.func @ragged(%x: tensor<@P@x@R@x3xf32>, %c: tensor<@P@x@N@xi64>) -> (tensor<@PR@x3xf32>, tensor<@PR@x3xf32>, tensor<@PN@xi64>, tensor<@PN@xi64>) {
  %me = shardx.axis_index on @mesh axes = @ALL@ : index
  %xs = tensor.extract_slice %x[%me, 0, 0] [1, @R@, 3] [1, 1, 1] : tensor<@P@x@R@x3xf32> to tensor<@R@x3xf32>
  %send = tensor.extract_slice %c[%me, 0] [1, @N@] [1, 1] : tensor<@P@x@N@xi64> to tensor<@N@xi64>
  %y, %rc = shardx.ragged_all_to_all %xs, %send on @mesh axes = @AXES@ : tensor<@R@x3xf32>, tensor<@N@xi64> -> tensor<@R@x3xf32>, tensor<@N@xi64>
  %back, %rc2 = shardx.ragged_all_to_all %y, %rc on @mesh axes = @AXES@ : tensor<@R@x3xf32>, tensor<@N@xi64> -> tensor<@R@x3xf32>, tensor<@N@xi64>
  %ya = shardx.all_gather %y on @mesh axes = @ALL@ dim = 0 : tensor<@R@x3xf32> -> tensor<@PR@x3xf32>
  %ba = shardx.all_gather %back on @mesh axes = @ALL@ dim = 0 : tensor<@R@x3xf32> -> tensor<@PR@x3xf32>
  %rca = shardx.all_gather %rc on @mesh axes = @ALL@ dim = 0 : tensor<@N@xi64> -> tensor<@PN@xi64>
  %rc2a = shardx.all_gather %rc2 on @mesh axes = @ALL@ dim = 0 : tensor<@N@xi64> -> tensor<@PN@xi64>
  return %ya, %ba, %rca, %rc2a : tensor<@PR@x3xf32>, tensor<@PR@x3xf32>, tensor<@PN@xi64>, tensor<@PN@xi64>
}
