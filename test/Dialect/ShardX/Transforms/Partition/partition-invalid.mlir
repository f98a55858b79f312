// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-partition --verify-diagnostics

// Tests that shardx-partition fails with the planner's reason when a reshard
// it inserted cannot be lowered (P(sum) -> P(avg) of integers).
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{Cannot reshard: #shardx.layout<@mesh, [P(sum)]> -> #shardx.layout<@mesh, [P(avg)]>: turning P(sum) into P(avg) needs float elements}}
func.func @ints(%x: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [P(sum)]>})
    -> (tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [P(avg)]>}) {
  return %x : tensor<4xi32>
}

