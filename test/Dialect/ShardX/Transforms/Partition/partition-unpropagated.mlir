// RUN: shardx-opt %s --shardx-partition --verify-diagnostics

// Tests that, run on a program that was not propagated, shardx-partition
// reports every function whose ops lack a strategy (as
// shardx-verify-layouts does) before it fails.
shardx.mesh @mesh(shape = 2)
func.func @first(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> tensor<4xf32> {
  // expected-error @+1 {{op without a sharding strategy has a sharded operand (run shardx-propagate)}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @second(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> tensor<4xf32> {
  // expected-error @+1 {{op without a sharding strategy has a sharded operand (run shardx-propagate)}}
  %y = arith.mulf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
