// RUN: shardx-opt --shardx-record-program-info --split-input-file --verify-diagnostics %s | FileCheck %s

// Tests that the description of a local program (after shardx-spmd) gives
// each public function's local and global shapes, dtypes and layouts (from
// its shardx.signature) and the mesh; private functions are not described.
// CHECK-LABEL: module attributes {shardx.program_info =
// CHECK-SAME: {\22functions\22:[{\22inputs\22:[
// CHECK-SAME: {\22dtype\22:\22f32\22,\22global_shape\22:[4,2],\22layout\22:{\22dims\22:[{\22dim\22:0,\22sizes\22:[],\22splits\22:{{\[\[}}0,1{{\]\]}}}],\22partials\22:[null],\22text\22:\22#shardx.layout<@mesh, [S(0)]>\22},\22shape\22:[2,2]},
// CHECK-SAME: {\22dtype\22:\22bf16\22,\22global_shape\22:[4,2],\22layout\22:{\22dims\22:[],\22partials\22:[null],\22text\22:\22#shardx.layout<@mesh, [R]>\22},\22shape\22:[4,2]}],
// CHECK-SAME: \22mesh\22:\22mesh\22,\22name\22:\22local\22,\22outputs\22:[{\22dtype\22:\22f32\22,\22global_shape\22:[4,2],{{.*}}\22shape\22:[2,2]}]}],
// CHECK-SAME: \22meshes\22:[{\22name\22:\22mesh\22,\22shape\22:[2]}],\22version\22:1}"}
// CHECK-NOT: \22name\22:\22helper\22
shardx.mesh @mesh(shape = 2, axes = ["x"])
func.func @local(%arg0: tensor<2x2xf32>, %arg1: tensor<4x2xbf16>) -> tensor<2x2xf32> attributes {shardx.signature = {arg_layouts = [#shardx.layout<@mesh, [S(0)]>, #shardx.layout<@mesh, [R]>], arg_types = [tensor<4x2xf32>, tensor<4x2xbf16>], mesh = @mesh, result_layouts = [#shardx.layout<@mesh, [S(0)]>], result_types = [tensor<4x2xf32>]}} {
  %0 = func.call @helper(%arg0) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}
func.func private @helper(%arg0: tensor<2x2xf32>) -> tensor<2x2xf32> {
  return %arg0 : tensor<2x2xf32>
}

// -----

// Tests that an unsharded program is its own global form: local and global
// shapes agree and no layout is recorded.
// CHECK-LABEL: module attributes {shardx.program_info =
// CHECK-SAME: {\22functions\22:[{\22inputs\22:[{\22dtype\22:\22i64\22,\22global_shape\22:[3],\22shape\22:[3]}],\22name\22:\22plain\22,\22outputs\22:[{\22dtype\22:\22i64\22,\22global_shape\22:[3],\22shape\22:[3]}]}],\22meshes\22:[],\22version\22:1}"}
func.func @plain(%arg0: tensor<3xi64>) -> tensor<3xi64> {
  return %arg0 : tensor<3xi64>
}

// -----

// Tests that an element type the runtime does not have is an error at the
// entry point.
// expected-error @+1 {{entry point odd takes or returns 'complex<f32>' elements, which the runtime does not have}}
func.func @odd(%arg0: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  return %arg0 : tensor<3xcomplex<f32>>
}

// -----

// Tests that the result the importer marked as its index checks' code
// (shardx.index_checks) is described as the entry's check output with its
// checks in code order, and that the attribute is then dropped.
// CHECK-LABEL: module attributes {shardx.program_info =
// CHECK-SAME: \22index_checks\22:{\22checks\22:[{\22exception\22:\22IndexError\22,\22message\22:\22index out of range in self\22},{\22exception\22:\22RuntimeError\22,\22message\22:\22bincount only supports 1-d non-negative integral inputs.\22}],\22output\22:1}
// CHECK: func.func @checked(%{{.*}}: tensor<3xi64>) -> (tensor<3xi64>, tensor<i64>) {
func.func @checked(%arg0: tensor<3xi64>) -> (tensor<3xi64>, tensor<i64> {shardx.index_checks = [{exception = "IndexError", message = "index out of range in self"}, {exception = "RuntimeError", message = "bincount only supports 1-d non-negative integral inputs."}]}) {
  %c = arith.constant dense<0> : tensor<i64>
  return %arg0, %c : tensor<3xi64>, tensor<i64>
}

// -----

// Tests that two check outputs on one entry are an error.
// expected-error @+1 {{entry point twice has more than one 'shardx.index_checks' result}}
func.func @twice(%arg0: tensor<i64>) -> (tensor<i64> {shardx.index_checks = [{exception = "IndexError", message = "a"}]}, tensor<i64> {shardx.index_checks = [{exception = "IndexError", message = "b"}]}) {
  return %arg0, %arg0 : tensor<i64>, tensor<i64>
}

// -----

// Tests that a scalar argument is an error at the entry point (it failed
// the translation to LLVM IR: the entry wrapper passes a descriptor).
// expected-error @+1 {{entry point scalar takes or returns 'index'; entry points take and return ranked tensors of static global shape (a scalar as a 0-d tensor, tensor<i64>)}}
func.func @scalar(%arg0: tensor<3xi64>, %n: index) -> tensor<3xi64> {
  return %arg0 : tensor<3xi64>
}

// -----

// Tests that a dynamic global shape is an error at the entry point (the
// executor allocated a tensor of -1 elements: std::length_error, abort).
// expected-error @+1 {{entry point dynamic takes or returns 'tensor<?xf32>'; entry points take and return ranked tensors of static global shape}}
func.func @dynamic(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  return %arg0 : tensor<?xf32>
}

// -----

// Tests that an uneven shard's dynamic local shape is fine: the global
// shape in the signature is static.
// CHECK-LABEL: module attributes {shardx.program_info =
// CHECK-SAME: \22global_shape\22:[7],{{.*}}\22shape\22:[-1]
shardx.mesh @mesh(shape = 2)
func.func @uneven(%arg0: tensor<?xf32>) -> tensor<?xf32> attributes {shardx.signature = {arg_layouts = [#shardx.layout<@mesh, [S(0)]>], arg_types = [tensor<7xf32>], mesh = @mesh, result_layouts = [#shardx.layout<@mesh, [S(0)]>], result_types = [tensor<7xf32>]}} {
  return %arg0 : tensor<?xf32>
}
