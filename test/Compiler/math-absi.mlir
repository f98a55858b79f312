// RUN: shardx-opt --shardx-codegen-cpu %s | FileCheck %s
// RUN: shardx-opt --shardx-approximate-math %s | FileCheck %s --check-prefix=PASS

// Tests that an integer absolute value compiles for the cpu target: the
// LLVM intrinsic, with the least integer not poison (it stays itself, as
// in eager), where convert-math-to-libm refused math.absi.
// CHECK: llvm.intr.abs{{.*}}is_int_min_poison = false
// PASS-LABEL: func.func @abs
// PASS: llvm.intr.abs
// PASS-NOT: math.absi
func.func @abs(%x: tensor<4xi64>) -> tensor<4xi64> {
  %e = tensor.empty() : tensor<4xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<4xi64>) outs(%e : tensor<4xi64>) {
  ^bb0(%a: i64, %o: i64):
    %b = math.absi %a : i64
    linalg.yield %b : i64
  } -> tensor<4xi64>
  return %r : tensor<4xi64>
}
