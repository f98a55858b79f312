// Three kernels (kernel-cache.test): y = x * 2 (returned, so it does not
// fuse into the sum), the zero fill and the sum of y. The test changes the
// constant, which only the first kernel holds.
func.func @two_kernels(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) {
  %c = arith.constant dense<2.0> : tensor<64xf32>
  %y = arith.mulf %x, %c : tensor<64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.reduce ins(%y : tensor<64xf32>) outs(%acc : tensor<f32>) dimensions = [0]
    (%in: f32, %out: f32) {
      %t = arith.addf %in, %out : f32
      linalg.yield %t : f32
    }
  return %y, %s : tensor<64xf32>, tensor<f32>
}
