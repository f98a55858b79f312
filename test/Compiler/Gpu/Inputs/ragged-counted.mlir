// The ragged all-to-all of scripts/gpu_check.sh, counts exchanged (the
// build half substitutes the ranks @N@, the rows a rank holds @R@ and the
// gathered sizes @NR@ = @N@ * @R@, @NN@ = @N@ * @N@; ragged_gpu_check.py
// writes the inputs). Every rank gets the global inputs: x, the rows of
// every member (@R@ rows of 3 f32 each), and c, the counts (c[s][j]: the
// rows member s sends to member j); member s sends its first
// sum_j c[s][j] rows, grouped by destination, by c[s]. Then the way back:
// the same op with the received counts. Outputs, gathered over the mesh:
// the received rows (zeros after them), the rows back (the sent rows,
// zeros after them), the counts received and the counts received back.
shardx.mesh @mesh(shape = @N@)
func.func @ragged(%x: tensor<@N@x@R@x3xf32>, %c: tensor<@N@x@N@xi64>) -> (tensor<@NR@x3xf32>, tensor<@NR@x3xf32>, tensor<@NN@xi64>, tensor<@NN@xi64>) {
  %me = shardx.axis_index on @mesh axes = [0] : index
  %xs = tensor.extract_slice %x[%me, 0, 0] [1, @R@, 3] [1, 1, 1] : tensor<@N@x@R@x3xf32> to tensor<@R@x3xf32>
  %send = tensor.extract_slice %c[%me, 0] [1, @N@] [1, 1] : tensor<@N@x@N@xi64> to tensor<@N@xi64>
  %y, %rc = shardx.ragged_all_to_all %xs, %send on @mesh axes = [0] : tensor<@R@x3xf32>, tensor<@N@xi64> -> tensor<@R@x3xf32>, tensor<@N@xi64>
  %back, %rc2 = shardx.ragged_all_to_all %y, %rc on @mesh axes = [0] : tensor<@R@x3xf32>, tensor<@N@xi64> -> tensor<@R@x3xf32>, tensor<@N@xi64>
  %ya = shardx.all_gather %y on @mesh axes = [0] dim = 0 : tensor<@R@x3xf32> -> tensor<@NR@x3xf32>
  %ba = shardx.all_gather %back on @mesh axes = [0] dim = 0 : tensor<@R@x3xf32> -> tensor<@NR@x3xf32>
  %rca = shardx.all_gather %rc on @mesh axes = [0] dim = 0 : tensor<@N@xi64> -> tensor<@NN@xi64>
  %rc2a = shardx.all_gather %rc2 on @mesh axes = [0] dim = 0 : tensor<@N@xi64> -> tensor<@NN@xi64>
  return %ya, %ba, %rca, %rc2a : tensor<@NR@x3xf32>, tensor<@NR@x3xf32>, tensor<@NN@xi64>, tensor<@NN@xi64>
}
