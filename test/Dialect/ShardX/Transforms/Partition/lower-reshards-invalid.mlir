// RUN: shardx-opt %s --split-input-file --shardx-lower-reshards --verify-diagnostics

// Tests that a reshard of a dynamically shaped tensor is rejected with the
// reason.
shardx.mesh @mesh(shape = 2)
func.func @dynamic(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{Cannot reshard a tensor of dynamic shape 'tensor<?x4xf32>': the planner needs the global shape}}
  %0 = shardx.redistribute %x : tensor<?x4xf32> from #shardx.layout<@mesh, [S(1)]> to #shardx.layout<@mesh, [R]>
  return %0 : tensor<?x4xf32>
}

// -----

// Tests that a reshard of index elements is rejected with the reason.
shardx.mesh @mesh(shape = 2)
func.func @index(%x: tensor<4xindex>) -> tensor<4xindex> {
  // expected-error @+1 {{Cannot reshard a tensor of 'index': only integer and float elements}}
  %0 = shardx.redistribute %x : tensor<4xindex> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  return %0 : tensor<4xindex>
}

// -----

// Tests that P(sum) -> P(avg) on integers (a rescale by the axis size) is
// rejected with the reason, not rounded.
shardx.mesh @mesh(shape = 2)
func.func @int_avg(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{Cannot reshard: #shardx.layout<@mesh, [P(sum)]> -> #shardx.layout<@mesh, [P(avg)]>: turning P(sum) into P(avg) needs float elements}}
  %0 = shardx.redistribute %x : tensor<4xi32> from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [P(avg)]>
  return %0 : tensor<4xi32>
}
