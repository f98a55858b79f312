// RUN: shardx-opt --shardx-expand-narrow-floats %s | FileCheck %s

// Tests that bf16 arithmetic and math run in f32, each op rounded back to
// bf16 once, and that the conversions are integer arithmetic on the bits
// (no arith.extf/truncf to or from bf16 left for LLVM to call builtins for).
// CHECK-LABEL: func.func @add_exp
// CHECK-NOT:   arith.extf
// CHECK-NOT:   arith.truncf
// CHECK:       arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NOT:   arith.addf %{{.*}} : bf16
// CHECK:       math.exp %{{.*}} : f32
// CHECK-NOT:   : bf16 to f32
// CHECK:       return %{{.*}} : bf16
func.func @add_exp(%a: bf16, %b: bf16) -> bf16 {
  %s = arith.addf %a, %b : bf16
  %e = math.exp %s : bf16
  return %e : bf16
}
