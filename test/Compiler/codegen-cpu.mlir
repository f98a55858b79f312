// RUN: shardx-opt --shardx-codegen-cpu %s | FileCheck %s

// Tests that the cpu target's pipeline, registered as a pass pipeline (the
// one compileModule runs for --target=cpu), takes a local program on
// tensors to the LLVM dialect: the program description on the module, the
// entry point with its C interface, the loop nest outlined as a kernel, and
// nothing left on tensors. Each of its passes has its own test beside.

// CHECK: module attributes {shardx.program_info = "{{.*}}\22name\22:\22add\22
// CHECK-NOT: func.func
// CHECK-NOT: linalg.
// CHECK-DAG: llvm.func @add(
// CHECK-DAG: llvm.func @_mlir_ciface_add(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface}
// CHECK-DAG: llvm.func @shardx_kernel_{{[0-9a-f]+}}({{.*}}) attributes {sym_visibility = "private"}
// CHECK-NOT: tensor<
func.func @add(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.add ins(%a, %b : tensor<8xf32>, tensor<8xf32>)
                  outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
