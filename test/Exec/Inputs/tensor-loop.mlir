// A loop over tensors for decomposed-ops.test (cpu only: see there).
// A loop whose iterations yield a fresh tensor (one-shot bufferization
// refused it: "Yield operand #0 is not equivalent to the corresponding iter
// bbArg"); the loop doubles its value three times.
func.func @loop(%a: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%t = %a) -> tensor<4xf32> {
    %e = tensor.empty() : tensor<4xf32>
    %m = linalg.add ins(%t, %t : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    scf.yield %m : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
