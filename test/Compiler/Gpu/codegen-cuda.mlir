// REQUIRES: cuda-toolkit
// RUN: shardx-opt --shardx-codegen-cuda %s | FileCheck %s

// Tests that the cuda target's pipeline, registered as a pass pipeline (the
// one compileModule runs for --target=cuda), takes a local program on
// tensors to the LLVM dialect with its kernels' PTX embedded: the program
// description, one kernel binary, the staged, device and resident entry
// points, nothing left on tensors. Each of its passes has its own test
// beside; shardx-compile runs it in lowering.mlir. No GPU is needed.

// CHECK: module attributes {gpu.container_module, shardx.program_info = "{{.*}}\22name\22:\22add\22
// CHECK-NOT: func.func
// CHECK: gpu.binary @shardx_kernels [#gpu.object<#nvvm.target<{{.*}}>, {{.*}}assembly = "{{.*}}.visible .entry add_kernel(
// CHECK-DAG: llvm.func @shardx_entry_add_device(%{{.*}}: !llvm.ptr)
// CHECK-DAG: llvm.func @shardx_entry_add(%{{.*}}: !llvm.ptr)
// CHECK-DAG: llvm.func @shardx_entry_add_resident(%{{.*}}: !llvm.ptr)
// CHECK-NOT: tensor<
func.func @add(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.add ins(%a, %b : tensor<8xf32>, tensor<8xf32>)
                  outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
