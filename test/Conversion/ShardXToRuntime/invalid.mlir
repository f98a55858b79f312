// RUN: shardx-opt %s --split-input-file --shardx-convert-to-runtime --verify-diagnostics

// Tests that a reduction of booleans is an error (they move as i32 only
// when nothing combines them).

shardx.mesh @mesh(shape = 4)
func.func @bool_reduce(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @below {{collectives on 'i1' are not supported by the runtime}}
  %y = shardx.all_reduce %x on @mesh axes = [0] reduction = max : tensor<4xi1>
  return %y : tensor<4xi1>
}

// -----

// Tests that an element type the runtime has no collective for is an error.

shardx.mesh @mesh(shape = 4)
func.func @i8(%x: tensor<4xi8>) -> tensor<4xi8> {
  // expected-error @below {{collectives on 'i8' are not supported by the runtime}}
  %y = shardx.all_reduce %x on @mesh axes = [0] reduction = sum : tensor<4xi8>
  return %y : tensor<4xi8>
}

// -----

// Tests that a ragged all-to-all of an element type the runtime cannot move
// is an error, checked before the pattern builds anything (the counts'
// buffers), in both forms.

shardx.mesh @mesh(shape = 2)
func.func @ragged_i8(%x: tensor<8x3xi8>, %c: tensor<2xi64>) -> tensor<16x3xi8> {
  // expected-error @below {{collectives on 'i8' are not supported by the runtime}}
  %y, %r = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x3xi8>, tensor<2xi64> -> tensor<16x3xi8>, tensor<2xi64>
  return %y : tensor<16x3xi8>
}

// -----

shardx.mesh @mesh(shape = 2)
func.func @ragged_known_i8(%x: tensor<8x3xi8>, %c: tensor<2xi64>) -> tensor<16x3xi8> {
  // expected-error @below {{collectives on 'i8' are not supported by the runtime}}
  %y = shardx.ragged_all_to_all %x, %c recv_counts = %c on @mesh axes = [0] : tensor<8x3xi8>, tensor<2xi64>, tensor<2xi64> -> tensor<16x3xi8>
  return %y : tensor<16x3xi8>
}

// -----

// Tests that a ShardX op without a lowering is named in an error.

shardx.mesh @mesh(shape = 4)
func.func @local_size() -> index {
  // expected-error @below {{no CPU lowering for 'shardx.local_size'}}
  %n = shardx.local_size #shardx.layout<@mesh, [S(0)]> shape = [7, 4] dim = 0 : index
  return %n : index
}

// -----

// Tests that an even all_gather on a dynamic shape is an error.

shardx.mesh @mesh(shape = 2)
func.func @dynamic_even(%x: tensor<?x4xf32>) -> tensor<?x8xf32> {
  // expected-error @below {{dynamic shapes in collectives are not supported by the CPU back end yet}}
  %y = shardx.all_gather %x on @mesh axes = [0] dim = 1 : tensor<?x4xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that an uneven collective with a second dynamic dim is an error.

shardx.mesh @mesh(shape = 2)
func.func @uneven_two_dynamic(%x: tensor<?x?xf32>) -> tensor<5x?xf32> {
  // expected-error @below {{uneven collective with another dynamic dim}}
  %y = shardx.all_gather %x on @mesh axes = [0] dim = 0 sizes = [3, 2] : tensor<?x?xf32> -> tensor<5x?xf32>
  return %y : tensor<5x?xf32>
}
