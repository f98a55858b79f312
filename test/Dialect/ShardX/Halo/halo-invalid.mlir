// RUN: shardx-opt %s --split-input-file --verify-diagnostics

// Tests that a halo wider than the smallest shard is refused (a window
// would reach past the neighbour).
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{halo (low = 3, high = 1) is wider than the smallest shard (2 rows of dim 0): a window may reach only the neighbouring shard}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 3 high = 1 : tensor<2x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that the smallest of uneven `sizes` bounds the halo.
shardx.mesh @mesh(shape = 3)
func.func @f(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{is wider than the smallest shard (1 rows of dim 0)}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 0 high = 2 sizes = [3, 3, 1] : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that halo widths are non-negative.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{halo widths must be non-negative, got low = -1 and high = 1}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = -1 high = 1 : tensor<4x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that the halo dim is within the rank.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{dim 2 is out of range for a tensor of rank 2}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 2 low = 1 high = 1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

// Tests that the other dims are unchanged.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result dim 1 is 9 but the operand's is 8}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<?x9xf32>
  return
}

// -----

// Tests that a static result dim must be every member's size: with three
// members, the middle one receives both sides (6 rows), the ends 5.
shardx.mesh @mesh(shape = 3)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result dim 0 is 5 but the members' results differ or have another size; make it dynamic}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<5x8xf32>
  return
}

// -----

// Tests that `sizes` has one entry per member.
shardx.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'sizes' has 3 entries but the group has 2 members}}
  %0 = shardx.halo %x on @mesh axes = [1] dim = 0 low = 1 high = 1 sizes = [2, 2, 2] : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that a static operand dim agrees with `sizes`.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{operand dim 0 is static but 'sizes' are not all 4; make it dynamic}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 sizes = [4, 3] : tensor<4x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that a group of one member changes nothing.
shardx.mesh @mesh(shape = 1)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{a group of one member has no neighbours: result dim 0 must equal the operand's}}
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<6x8xf32>
  return
}

// -----

// Tests that the group's axes exist.
shardx.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{mesh axis 1 is out of range for mesh @mesh of rank 1}}
  %0 = shardx.halo %x on @mesh axes = [1] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<?x8xf32>
  return
}

// -----

// Tests that a huge group is verified without a vector of its members'
// sizes (the spmd fuzzer's crash: an axis of 2**62 members asked for a
// SmallVector of that many sizes; meshes now have at most 2**31 devices,
// and a vector of 2**30 sizes would still be 8 GiB): the middle members'
// results are one halo wider than the first's and the last's, so a static
// result is refused, and a dynamic one is accepted.
shardx.mesh @mesh(shape = 2x1073741824)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result dim 0 is 5 but the members' results differ or have another size; make it dynamic}}
  %0 = shardx.halo %x on @mesh axes = [1] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<5x8xf32>
  return
}

// -----

shardx.mesh @mesh(shape = 2x1073741824)
func.func @f(%x: tensor<4x8xf32>) {
  %0 = shardx.halo %x on @mesh axes = [1] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<?x8xf32>
  return
}
