// RUN: shardx-opt --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(shardx-check-ptx)' %s \
// RUN:   | FileCheck %s

// The last check of the cuda target's kernels (lib/Compiler/GpuTransforms.cpp):
// after gpu-module-to-binary{format=isa}, PTX that calls a function it does
// not define (a math function libdevice lacks) would load on no driver, so
// it is a compile error. The PTX below is what LLVM's NVPTX back end
// writes; no GPU or CUDA toolkit is needed.

// Tests that PTX defining everything it calls passes unchanged.
// CHECK-LABEL: module
// CHECK: gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = "
// CHECK-SAME: .visible .entry k(
module {
  gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = ".version 7.8\n.target sm_90\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n\tret;\n}\n">]
}

// -----

// Tests that a program without kernels (no binary) passes.
// CHECK-LABEL: module
// CHECK-NOT: gpu.binary
module {
  func.func @host() {
    return
  }
}

// -----

// Tests that a call of an undefined function is an error naming it.
// expected-error @+1 {{the device code calls functions it does not define (not in libdevice?): bar}}
module {
  gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = ".version 7.8\n.target sm_90\n.address_size 64\n\n.extern .func bar\n(\n\t.param .b64 bar_param_0\n)\n;\n.visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n\tret;\n}\n">]
}

// -----

// Tests that an undefined function with a result is an error naming it (not
// the `.func` before its result's parameter list).
// expected-error @+1 {{the device code calls functions it does not define (not in libdevice?): __nv_foo}}
module {
  gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = ".version 7.8\n.target sm_90\n.address_size 64\n\n.extern .func  (.param .b32 func_retval0) __nv_foo\n(\n\t.param .b32 __nv_foo_param_0\n)\n;\n.visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n\tret;\n}\n">]
}

// -----

// Tests that a declaration with its result and parameters on one line, and a
// second undefined function, are both named.
// expected-error @+1 {{the device code calls functions it does not define (not in libdevice?): __nv_bar baz}}
module {
  gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = ".version 7.8\n.target sm_90\n.address_size 64\n\n.extern .func  (.param .b64 func_retval0) __nv_bar(.param .b64 __nv_bar_param_0);\n.extern .func baz\n(\n)\n;\n.visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n\tret;\n}\n">]
}

// -----

// Tests that a kernel binary of several objects is refused.
module {
  // expected-error @+1 {{expected one object in the kernel binary}}
  gpu.binary @shardx_kernels [#gpu.object<#nvvm.target, assembly = "">, #gpu.object<#nvvm.target<chip = "sm_80">, assembly = "">]
}
