// RUN: shardx-opt %s --split-input-file --verify-diagnostics

//===----------------------------------------------------------------------===//
// shardx.mesh
//===----------------------------------------------------------------------===//

// Tests that mesh axis sizes must be positive.
// expected-error @+1 {{'shardx.mesh' op axis 1 has size 0; sizes must be positive}}
shardx.mesh @mesh(shape = 2x0)

// -----

// Tests that a mesh needs one name per axis.
// expected-error @+1 {{'shardx.mesh' op has 1 axis names for 2 axes}}
shardx.mesh @mesh(shape = 2x2, axes = ["dp"])

// -----

// Tests that mesh axis names are unique.
// expected-error @+1 {{'shardx.mesh' op axis name 'dp' is used twice}}
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "dp"])

// -----

// Tests that mesh axis names are not empty.
// expected-error @+1 {{'shardx.mesh' op axis names must not be empty}}
shardx.mesh @mesh(shape = 2x2, axes = ["dp", ""])

// -----

// Tests that a mesh needs one cost hint per axis.
// expected-error @+1 {{'shardx.mesh' op has 1 bandwidth hints for 2 axes}}
shardx.mesh @mesh(shape = 2x2, bandwidth = [100.0])

// -----

// Tests that cost hints are positive.
// expected-error @+1 {{'shardx.mesh' op latency hints must be positive, got 0}}
shardx.mesh @mesh(shape = 2x2, latency = [1.0, 0.0])

// -----

// Tests that unknown mesh fields are rejected.
// expected-error @+1 {{unknown mesh field 'speed'; expected axes, bandwidth or latency}}
shardx.mesh @mesh(shape = 2x2, speed = [1.0, 1.0])

// -----

// Tests that a mesh with no axis is rejected.
// expected-error @+1 {{'shardx.mesh' op needs at least one axis}}
"shardx.mesh"() <{sym_name = "mesh", shape = array<i64>}> : () -> ()

// -----

// Tests that a negative mesh size is named as such (not as a missing axis).
// expected-error @+1 {{mesh axis 0 has size -2; sizes must be positive}}
shardx.mesh @mesh(shape = -2)

// -----

// Tests that a mesh has at most 2^31 devices: the product of its axis sizes
// is computed without overflow (2 x 2^62 is 2^63, past int64).
// expected-error @+1 {{'shardx.mesh' op has more than 2147483648 (2^31) devices, the most a mesh may have (the product of its axis sizes)}}
shardx.mesh @mesh(shape = 2x4611686018427387904)

// -----

// Tests that the bound holds for one axis: 2^31 + 1 devices.
// expected-error @+1 {{'shardx.mesh' op has more than 2147483648 (2^31) devices}}
shardx.mesh @mesh(shape = 2147483649)

// -----

// Tests that a product that wraps to a small number is refused: 2^32 x 2^32
// is 0 modulo 2^64.
// expected-error @+1 {{'shardx.mesh' op has more than 2147483648 (2^31) devices}}
shardx.mesh @mesh(shape = 1x4294967296x4294967296)

// -----

// Tests that the largest axes are refused even when the product is checked
// in another order: 2^31 x 2 after many axes of 1.
// expected-error @+1 {{'shardx.mesh' op has more than 2147483648 (2^31) devices}}
shardx.mesh @mesh(shape = 1x1x1x2147483648x2)

// -----

// Tests that a mesh of exactly 2^31 devices verifies.
shardx.mesh @mesh(shape = 65536x32768)

//===----------------------------------------------------------------------===//
// shardx.annotate, shardx.redistribute, shardx.local_size
//===----------------------------------------------------------------------===//

// -----

// Tests that annotate checks its layout against the mesh and the tensor.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{layout #shardx.layout<@mesh, [S(1), R]> is invalid for 'tensor<8xf32>' on mesh @mesh: shard dim 1 is out of range for a tensor of rank 1}}
  %0 = shardx.annotate %x : tensor<8xf32> to #shardx.layout<@mesh, [S(1), R]>
  return %0 : tensor<8xf32>
}

// -----

// Tests that annotate rejects an unknown mesh.
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{layout #shardx.layout<@mesh, [S(0)]> refers to unknown mesh @mesh}}
  %0 = shardx.annotate %x : tensor<8xf32> to #shardx.layout<@mesh, [S(0)]>
  return %0 : tensor<8xf32>
}

// -----

// Tests that annotate needs a layout attribute.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{expected a #shardx.layout, got "S(0)"}}
  %0 = shardx.annotate %x : tensor<8xf32> to "S(0)"
  return %0 : tensor<8xf32>
}

// -----

// Tests that redistribute needs both layouts on one mesh.
shardx.mesh @a(shape = 2)
shardx.mesh @b(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shardx.redistribute' op source and target layouts are on different meshes (@a and @b)}}
  %0 = shardx.redistribute %x : tensor<8xf32> from #shardx.layout<@a, [S(0)]> to #shardx.layout<@b, [R]>
  return %0 : tensor<8xf32>
}

// -----

// Tests that redistribute checks its target layout against the tensor.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{target layout #shardx.layout<@mesh, [S(0)], sizes = {0 = [4, 3]}> is invalid for 'tensor<8xf32>' on mesh @mesh: sizes for dim 0 sum to 7 but the dim has size 8}}
  %0 = shardx.redistribute %x : tensor<8xf32> from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [S(0)], sizes = {0 = [4, 3]}>
  return %0 : tensor<8xf32>
}

// -----

// Tests that redistribute checks its source layout against the mesh.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{source layout #shardx.layout<@mesh, [S(0), R]> is invalid for 'tensor<8xf32>' on mesh @mesh: layout has 2 placements but the mesh has 1 axes}}
  %0 = shardx.redistribute %x : tensor<8xf32> from #shardx.layout<@mesh, [S(0), R]> to #shardx.layout<@mesh, [R]>
  return %0 : tensor<8xf32>
}

// -----

// Tests that annotate keeps the operand type.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'shardx.annotate' op requires the same type for all operands and results}}
  %0 = "shardx.annotate"(%x) <{layout = #shardx.layout<@mesh, [S(0)]>}> : (tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an annotation on a non-tensor is rejected.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: f32) -> f32 {
  // expected-error @+1 {{'shardx.annotate' op operand #0 must be ranked tensor of any type values, but got 'f32'}}
  %0 = "shardx.annotate"(%x) <{layout = #shardx.layout<@mesh, [S(0)]>}> : (f32) -> f32
  return %0 : f32
}

// -----

// Tests that local_size needs its dim in range.
shardx.mesh @mesh(shape = 2)
func.func @f() -> index {
  // expected-error @+1 {{dim 2 is out of range for a tensor of rank 2}}
  %0 = shardx.local_size #shardx.layout<@mesh, [S(0)]> shape = [7, 4] dim = 2 : index
  return %0 : index
}

// -----

// Tests that local_size needs a static global shape.
shardx.mesh @mesh(shape = 2)
func.func @f() -> index {
  // expected-error @+1 {{'shardx.local_size' op global shape must be static and non-negative}}
  %0 = shardx.local_size #shardx.layout<@mesh, [S(0)]> shape = [-1, 4] dim = 0 : index
  return %0 : index
}

// -----

// Tests that local_size checks the layout against the shape.
shardx.mesh @mesh(shape = 2)
func.func @f() -> index {
  // expected-error @+1 {{sizes for dim 0 sum to 6 but the dim has size 7}}
  %0 = shardx.local_size #shardx.layout<@mesh, [S(0)], sizes = {0 = [3, 3]}> shape = [7, 4] dim = 0 : index
  return %0 : index
}

//===----------------------------------------------------------------------===//
// Collectives: common constraints
//===----------------------------------------------------------------------===//

// -----

// Tests that a collective rejects an unknown mesh.
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{unknown mesh @mesh}}
  %0 = shardx.all_reduce %x on @mesh axes = [0] reduction = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective needs at least one axis.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{needs at least one mesh axis}}
  %0 = shardx.all_reduce %x on @mesh axes = [] reduction = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective's axes must be in range.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{mesh axis 2 is out of range for mesh @mesh of rank 2}}
  %0 = shardx.broadcast %x on @mesh axes = [2] root = 0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective's axes are listed once.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{mesh axis 1 is listed twice}}
  %0 = shardx.partition_value %x on @mesh axes = [1, 1] reduction = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that axis_index checks its axes.
shardx.mesh @mesh(shape = 2x2)
func.func @f() -> index {
  // expected-error @+1 {{mesh axis -1 is out of range for mesh @mesh of rank 2}}
  %0 = shardx.axis_index on @mesh axes = [-1] : index
  return %0 : index
}

// -----

// Tests that an unknown reduction is rejected.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+2 {{expected ::mlir::shardx::ReductionKind to be one of: sum, avg, max, min, prod}}
  // expected-error @+1 {{failed to parse ShardX_ReductionKindAttr parameter 'value'}}
  %0 = shardx.all_reduce %x on @mesh axes = [0] reduction = mean : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that all_reduce keeps the operand type.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "shardx.all_reduce"(%x) <{mesh = @mesh, axes = array<i64: 0>, reduction = #shardx<reduction sum>}> : (tensor<8xf32>) -> tensor<8xf16>
  return
}

//===----------------------------------------------------------------------===//
// shardx.all_gather
//===----------------------------------------------------------------------===//

// -----

// Tests that all_gather keeps the element type.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{element type of the result ('f16') differs from the operand's ('f32')}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2xf32> -> tensor<8xf16>
  return
}

// -----

// Tests that all_gather keeps the rank.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{result rank 2 differs from the operand rank 1}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2xf32> -> tensor<8x1xf32>
  return
}

// -----

// Tests that all_gather's dim must be in range.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{dim 1 is out of range for a tensor of rank 1}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 1 : tensor<2xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that all_gather's result is the group size times the operand.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{result dim 0 is 6 but must be operand dim 2 times the group size 4}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2xf32> -> tensor<6xf32>
  return
}

// -----

// Tests that all_gather keeps the other dims.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result dim 1 is 4 but the operand's is 3}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 : tensor<2x3xf32> -> tensor<8x4xf32>
  return
}

// -----

// Tests that uneven all_gather needs one size per group member.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{'sizes' has 2 entries but the group has 4 members}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 sizes = [4, 3] : tensor<?xf32> -> tensor<7xf32>
  return
}

// -----

// Tests that uneven all_gather's result is the sum of the sizes.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{result dim 0 is 8 but 'sizes' sums to 7}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 sizes = [4, 3] : tensor<?xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that uneven sizes cannot be negative.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{'sizes' has a negative entry -1}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 sizes = [8, -1] : tensor<?xf32> -> tensor<7xf32>
  return
}

// -----

// Tests that an uneven piece cannot have a static size.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{operand dim 0 is static but 'sizes' are not all 4; make it dynamic}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 sizes = [4, 3] : tensor<4xf32> -> tensor<7xf32>
  return
}

//===----------------------------------------------------------------------===//
// shardx.reduce_scatter, shardx.all_to_all
//===----------------------------------------------------------------------===//

// -----

// Tests that reduce_scatter's operand is the group size times the result.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{operand dim 0 is 8 but must be result dim 2 times the group size 2}}
  %0 = shardx.reduce_scatter %x on @mesh axes = [1] dim = 0 reduction = sum : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

// Tests that uneven reduce_scatter's operand is the sum of the sizes.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{operand dim 0 is 8 but 'sizes' sums to 7}}
  %0 = shardx.reduce_scatter %x on @mesh axes = [0] dim = 0 reduction = sum sizes = [4, 3] : tensor<8xf32> -> tensor<?xf32>
  return
}

// -----

// Tests that all_to_all's split dim must divide by the group size.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<6x4xf32>) {
  // expected-error @+1 {{split_dim 0 of size 6 does not divide by the group size 4}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 : tensor<6x4xf32> -> tensor<1x16xf32>
  return
}

// -----

// Tests that all_to_all's concat dim grows by the group size.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{result dim 1 is 8 but must be operand dim 4 times the group size 4}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 : tensor<8x4xf32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that all_to_all's split dim shrinks by the group size.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{operand dim 0 is 8 but must be result dim 4 times the group size 4}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 : tensor<8x4xf32> -> tensor<4x16xf32>
  return
}

// -----

// Tests that all_to_all's dims must be in range.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{concat_dim 2 is out of range for a tensor of rank 2}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 2 : tensor<8x4xf32> -> tensor<2x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// shardx.permute, shardx.broadcast
//===----------------------------------------------------------------------===//

// -----

// Tests that permute indices are within the group.
shardx.mesh @mesh(shape = 2x3)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{pair index 3 is out of range for a group of 3}}
  %0 = shardx.permute %x on @mesh axes = [1] pairs = [[0, 3]] : tensor<4xf32>
  return
}

// -----

// Tests that a permute source is used once.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{group member 0 is a source twice}}
  %0 = shardx.permute %x on @mesh axes = [0] pairs = [[0, 1], [0, 2]] : tensor<4xf32>
  return
}

// -----

// Tests that a permute target is used once.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{group member 2 is a target twice}}
  %0 = shardx.permute %x on @mesh axes = [0] pairs = [[0, 2], [1, 2]] : tensor<4xf32>
  return
}

// -----

// Tests that permute pairs come in twos (generic form).
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{pairs must hold [source, target] pairs}}
  %0 = "shardx.permute"(%x) <{mesh = @mesh, axes = array<i64: 0>, pairs = array<i64: 0, 1, 2>}> : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that the broadcast root is within the group.
shardx.mesh @mesh(shape = 2x3)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{root 6 is out of range for a group of 6}}
  %0 = shardx.broadcast %x on @mesh axes = [0, 1] root = 6 : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// shardx.chunk
//===----------------------------------------------------------------------===//

// -----

// Tests that chunk's stride is positive.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{stride must be positive, got 0}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 0 : tensor<8xf32> -> tensor<4xf32>
  return
}

// -----

// Tests that chunk cannot combine sizes and a stride.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'sizes' and a stride cannot be combined}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 2 sizes = [4, 4] : tensor<8xf32> -> tensor<4xf32>
  return
}

// -----

// Tests that a group size times a stride past int64 is an error, not a
// division by zero (fuzz: test/Fuzz/Inputs/spmd/crash-8f8c658a4e.txt).
// The fuzzed mesh had 2^62 devices; meshes now have at most 2^31, so the
// stride is 2^33.
shardx.mesh @mesh(shape = 2147483648)
func.func @f(%x: tensor<6xf32>) {
  // expected-error @+1 {{the group size 2147483648 times the stride 8589934592 overflows a 64-bit integer}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 8589934592 : tensor<6xf32> -> tensor<4294967296xf32>
  return
}

// -----

// Tests that an uneven chunk needs a dynamic result.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<7xf32>) {
  // expected-error @+1 {{operand dim 0 of size 7 does not divide into 4 blocks; the result dim must be dynamic}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 : tensor<7xf32> -> tensor<2xf32>
  return
}

// -----

// Tests that a strided chunk must divide.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<6xf32>) {
  // expected-error @+1 {{does not divide into 8 blocks; the result dim must be dynamic (and a strided chunk must divide)}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 4 : tensor<6xf32> -> tensor<3xf32>
  return
}

// -----

// Tests that chunk's result is the operand divided by the group size.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{operand dim 0 is 8 but must be result dim 4 times the group size 4}}
  %0 = shardx.chunk %x on @mesh axes = [0] dim = 0 : tensor<8xf32> -> tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Strides and sizes of all_gather, reduce_scatter and all_to_all
//===----------------------------------------------------------------------===//

// -----

// Tests that all_gather's stride is positive.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<6xf32>) {
  // expected-error @+1 {{stride must be positive, got 0}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 stride = 0 : tensor<6xf32> -> tensor<12xf32>
  return
}

// -----

// Tests that all_gather's stride divides the operand dim.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<6xf32>) {
  // expected-error @+1 {{dim of size 6 does not divide into stride 4 blocks}}
  %0 = shardx.all_gather %x on @mesh axes = [0] dim = 0 stride = 4 : tensor<6xf32> -> tensor<12xf32>
  return
}

// -----

// Tests that a stride and explicit sizes do not combine.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'sizes' and a stride cannot be combined}}
  %0 = shardx.reduce_scatter %x on @mesh axes = [0] dim = 0 reduction = sum stride = 2 sizes = [4, 4] : tensor<8xf32> -> tensor<4xf32>
  return
}

// -----

// Tests that all_to_all's split dim divides by the group size times its
// split stride.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<6x4xf32>) {
  // expected-error @+1 {{split_dim 0 of size 6 does not divide by the group size 2 times the split stride}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 split_stride = 2 : tensor<6x4xf32> -> tensor<3x8xf32>
  return
}

// -----

// Tests that all_to_all's group size times its split stride past int64 is an
// error, not a division by zero.
shardx.mesh @mesh(shape = 2147483648)
func.func @f(%x: tensor<6x4xf32>) {
  // expected-error @+1 {{the group size 2147483648 times the stride 8589934592 overflows a 64-bit integer}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 1 split_stride = 8589934592 : tensor<6x4xf32> -> tensor<3x8xf32>
  return
}

// -----

// Tests that all_to_all's sizes sum to the split dim.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x7xf32>) {
  // expected-error @+1 {{split_dim 1 is 7 but 'sizes' sums to 6}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 1 concat_dim = 0 sizes = [5, 1] : tensor<4x7xf32> -> tensor<8x?xf32>
  return
}

// -----

// Tests that all_to_all's sizes need two different dims.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<7xf32>) {
  // expected-error @+1 {{'sizes' needs split_dim and concat_dim to differ}}
  %0 = shardx.all_to_all %x on @mesh axes = [0] split_dim = 0 concat_dim = 0 sizes = [5, 2] : tensor<7xf32> -> tensor<?xf32>
  return
}

// -----

// Tests that an exchange's operand is the source's local type.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{operand type 'tensor<2x3xf32>' is not the local type 'tensor<?x3xf32>' of the source}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]> shape = [7, 3] : tensor<2x3xf32> -> tensor<7x3xf32>
  return
}

// -----

// Tests that an exchange's result is the target's local type.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<?x3xf32>) {
  // expected-error @+1 {{result type 'tensor<8x3xf32>' is not the local type 'tensor<7x3xf32>' of the target}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]> shape = [7, 3] : tensor<?x3xf32> -> tensor<8x3xf32>
  return
}

// -----

// Tests that an exchange's global shape has the operand's rank.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<?x3xf32>) {
  // expected-error @+1 {{shape has 1 dims, the operand 2}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]> shape = [7] : tensor<?x3xf32> -> tensor<7x3xf32>
  return
}

// -----

// Tests that an exchange's layouts are valid for the global shape.
shardx.mesh @mesh(shape = 4)
func.func @f(%x: tensor<?x3xf32>) {
  // expected-error @+1 {{target layout #shardx.layout<@mesh, [S(2)]> is invalid for 'tensor<7x3xf32>'}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(2)]> shape = [7, 3] : tensor<?x3xf32> -> tensor<7x3xf32>
  return
}

// -----

// Tests that a ragged all-to-all keeps the element type.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{element type of the result ('f64') differs from the operand's ('f32')}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf64>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all moves whole rows: dims after 0 unchanged.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{result dim 1 is 3 but the operand's is 4}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x3xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all's rows are static.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x?xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{dims after dim 0 must be static (whole rows move), dim 1 is dynamic}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x?xf32>, tensor<2xi64> -> tensor<16x?xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all's result is a static worst-case buffer.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{the result's dim 0 must be static: the most rows a rank may receive}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64> -> tensor<?x4xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all has one send count per group member.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{'send_counts' must be tensor<4xi64> (one count per group member), got 'tensor<2xi64>'}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0, 1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<4xi64>
  return
}

// -----

// Tests that a ragged all-to-all has one received count per group member.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{'received_counts' must be tensor<2xi64> (one count per group member), got 'tensor<4xi64>'}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<4xi64>
  return
}

// -----

// Tests that a ragged all-to-all is given one count per group member to
// receive.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>, %r: tensor<4xi64>) {
  // expected-error @+1 {{'recv_counts' must be tensor<2xi64> (one count per group member), got 'tensor<4xi64>'}}
  %0 = shardx.ragged_all_to_all %x, %c recv_counts = %r on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64>, tensor<4xi64> -> tensor<16x4xf32>
  return
}

// -----

// Tests that the counts a ragged all-to-all is given to receive are i64.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>, %r: tensor<2xi32>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 64-bit signless integer values, but got 'tensor<2xi32>'}}
  %0 = shardx.ragged_all_to_all %x, %c recv_counts = %r on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64>, tensor<2xi32> -> tensor<16x4xf32>
  return
}

// -----

// Tests that a ragged all-to-all given the counts it receives does not
// also return them.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{has both a 'recv_counts' operand and a second result: given counts are not returned}}
  %0, %1 = shardx.ragged_all_to_all %x, %c recv_counts = %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all either exchanges the counts (and returns
// them) or is given them.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{needs a 'recv_counts' operand or a second result (the received counts)}}
  %0 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>
  return
}

// -----

// Tests that a ragged all-to-all's counts are i64.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 64-bit signless integer values}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [0] : tensor<8x4xf32>, tensor<2xi32> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a ragged all-to-all's axes are the mesh's.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{mesh axis 1 is out of range for mesh @mesh of rank 1}}
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

// Tests that an exchange does not change a Partial outside its group.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{the Partial of mesh axis 1, outside the group, differs between the layouts}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [R, P(sum)]> to #shardx.layout<@mesh, [R, R]> shape = [8] : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that an exchange cannot create a Partial.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{cannot create the Partial of mesh axis 0 (use shardx.partition_value)}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [P(sum)]> shape = [8] : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that an exchange's layouts are on its mesh.
shardx.mesh @mesh(shape = 2)
shardx.mesh @other(shape = 2)
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{layout #shardx.layout<@other, [R]> is not on mesh @mesh}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@other, [R]> to #shardx.layout<@mesh, [R]> shape = [8] : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that an exchange needs a mesh the planner plans on (its local types
// come from every rank's shard; found by fuzzing, 1024x1024 took seconds).
shardx.mesh @mesh(shape = 1024x1024)
func.func @f(%x: tensor<?x3xf32>) {
  // expected-error @+1 {{needs a mesh of at most 65536 devices, the most the planner enumerates}}
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]> shape = [5, 3] : tensor<?x3xf32> -> tensor<?x3xf32>
  return
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that an all_reduce_start's result is read by one shardx.wait only.
func.func @start_two_uses(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  // expected-error @below {{result must have exactly one use, a shardx.wait (has 2)}}
  %p = shardx.all_reduce_start %x on @mesh axes = [0] reduction = sum : tensor<8xf32>
  %a = shardx.wait %p : tensor<8xf32>
  %b = shardx.wait %p : tensor<8xf32>
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that an all_reduce_start's result is not read by another op.
func.func @start_not_waited(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @below {{result must be used by a shardx.wait, not 'arith.addf'}}
  %p = shardx.all_reduce_start %x on @mesh axes = [0] reduction = sum : tensor<8xf32>
  %a = arith.addf %p, %x : tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

// Tests that shardx.wait waits for an asynchronous collective only.
func.func @wait_not_start(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @below {{operand must be the result of an asynchronous collective}}
  %a = shardx.wait %x : tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that all_reduce_start checks its group like all_reduce.
func.func @start_bad_axis(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @below {{mesh axis 1 is out of range}}
  %p = shardx.all_reduce_start %x on @mesh axes = [1] reduction = sum : tensor<8xf32>
  %a = shardx.wait %p : tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that all_gather_start checks its shapes like all_gather.
func.func @gather_start_bad_result(%x: tensor<2x4xf32>) -> tensor<6x4xf32> {
  // expected-error @below {{result dim 0 is 6 but must be operand dim 2 times the group size 4}}
  %p = shardx.all_gather_start %x on @mesh axes = [0] dim = 0 : tensor<2x4xf32> -> tensor<6x4xf32>
  %a = shardx.wait %p : tensor<6x4xf32>
  return %a : tensor<6x4xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that an all_gather_start's result is read by a shardx.wait.
func.func @gather_start_not_waited(%x: tensor<2x4xf32>) -> tensor<8x4xf32> {
  // expected-error @below {{result must be used by a shardx.wait, not 'arith.negf'}}
  %p = shardx.all_gather_start %x on @mesh axes = [0] dim = 0 : tensor<2x4xf32> -> tensor<8x4xf32>
  %a = arith.negf %p : tensor<8x4xf32>
  return %a : tensor<8x4xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that reduce_scatter_start checks its sizes like reduce_scatter.
func.func @scatter_start_bad_sizes(%x: tensor<7x4xf32>) -> tensor<?x4xf32> {
  // expected-error @below {{'sizes' has 3 entries but the group has 4 members}}
  %p = shardx.reduce_scatter_start %x on @mesh axes = [0] dim = 0 reduction = sum sizes = [3, 3, 1] : tensor<7x4xf32> -> tensor<?x4xf32>
  %a = shardx.wait %p : tensor<?x4xf32>
  return %a : tensor<?x4xf32>
}

// -----

shardx.mesh @mesh(shape = 4)

// Tests that a reduce_scatter_start's wait is in its block.
func.func @scatter_start_wait_elsewhere(%x: tensor<8x4xf32>, %c: i1) -> tensor<2x4xf32> {
  // expected-error @below {{its shardx.wait must be in the same block}}
  %p = shardx.reduce_scatter_start %x on @mesh axes = [0] dim = 0 reduction = sum : tensor<8x4xf32> -> tensor<2x4xf32>
  %r = scf.if %c -> tensor<2x4xf32> {
    %a = shardx.wait %p : tensor<2x4xf32>
    scf.yield %a : tensor<2x4xf32>
  } else {
    %e = tensor.empty() : tensor<2x4xf32>
    scf.yield %e : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}
