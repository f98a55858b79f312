// RUN: shardx-opt --shardx-approximate-math --split-input-file %s | FileCheck %s

// Tests that f32 exp, erf and tanh become polynomials of fused multiply-adds
// (the LLVM intrinsic, not libm's fmaf), which LLVM vectorizes, and that f64
// and other functions are left to libm.
// CHECK-LABEL: func.func @f32_functions
// CHECK-NOT: math.exp
// CHECK-NOT: math.erf
// CHECK-NOT: math.tanh
// CHECK-NOT: math.fma
// CHECK: llvm.intr.fma
// CHECK: return
func.func @f32_functions(%x: f32) -> (f32, f32, f32) {
  %e = math.exp %x : f32
  %r = math.erf %x : f32
  %t = math.tanh %x : f32
  return %e, %r, %t : f32, f32, f32
}

// CHECK-LABEL: func.func @left_to_libm
// CHECK: math.exp %{{.*}} : f64
// CHECK: math.erf %{{.*}} : f64
// CHECK: math.log %{{.*}} : f32
func.func @left_to_libm(%x: f64, %y: f32) -> (f64, f64, f32) {
  %e = math.exp %x : f64
  %r = math.erf %x : f64
  %l = math.log %y : f32
  return %e, %r, %l : f64, f64, f32
}
