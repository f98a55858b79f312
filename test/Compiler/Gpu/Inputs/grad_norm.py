"""Writes a gradient-norm program of N parameters (argv[1]): each
parameter's sum of squares, added in a chain, as a deep model's gradient
clipping traces; N 0-d sums fused into one kernel would pass 24 bytes of
descriptor per sum to it."""
import sys

n = int(sys.argv[1])
args = ", ".join(f"%g{i}: tensor<8xf32>" for i in range(n))
print(f"func.func @grad_norm({args}) -> tensor<f32> {{")
print("  %z = arith.constant 0.0 : f32")
for i in range(n):
    print(f"  %e{i} = tensor.empty() : tensor<f32>")
    print(f"  %f{i} = linalg.fill ins(%z : f32) outs(%e{i} : tensor<f32>) -> tensor<f32>")
    print(f"  %q{i} = arith.mulf %g{i}, %g{i} : tensor<8xf32>")
    print(f"  %s{i} = linalg.reduce ins(%q{i} : tensor<8xf32>) outs(%f{i} : tensor<f32>) "
          f"dimensions = [0] (%a: f32, %b: f32) {{ %r = arith.addf %a, %b : f32 "
          f"linalg.yield %r : f32 }}")
prev = "%s0"
for i in range(1, n):
    print(f"  %t{i} = arith.addf {prev}, %s{i} : tensor<f32>")
    prev = f"%t{i}"
print(f"  return {prev} : tensor<f32>")
print("}")
