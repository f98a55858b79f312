// RUN: shardx-opt --shardx-drop-meshes %s | FileCheck %s

// Tests that the mesh declarations are erased once nothing refers to them
// (after shardx-convert-to-runtime) and the functions are kept.
// CHECK-LABEL: module
// CHECK-NOT: shardx.mesh
// CHECK: func.func @local
// CHECK-NOT: shardx.mesh
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])
shardx.mesh @other(shape = 4, axes = ["x"])
func.func @local(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}
