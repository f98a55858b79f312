// RUN: shardx-opt %s --split-input-file --shardx-verify-layouts --verify-diagnostics | FileCheck %s

// Tests that a program whose operands all have the layouts their ops need
// passes unchanged (the Megatron pair after propagation and reshard
// insertion).
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @consistent
func.func @consistent(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
                      %w: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>})
    -> (tensor<4x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %e = tensor.empty() {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>]} : tensor<4x16xf32>
  // CHECK: linalg.matmul
  %h = linalg.matmul {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>],
                      shardx.operand_layouts = [#shardx.layout<@mesh, [R]>, #shardx.layout<@mesh, [S(1)]>, #shardx.layout<@mesh, [S(1)]>]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: shardx.redistribute
  %r = shardx.redistribute %h : tensor<4x16xf32> from #shardx.layout<@mesh, [S(1)]> to #shardx.layout<@mesh, [R]>
  return %r : tensor<4x16xf32>
}

// -----

// Tests that an operand whose layout is not the one its op's strategy
// needs is an error (a missing reshard would compute on the wrong shards).
shardx.mesh @mesh(shape = 2)
func.func @operand(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) {
  // expected-error @+1 {{operand #0 has layout #shardx.layout<@mesh, [S(0)]> but the op needs #shardx.layout<@mesh, [S(1)]>}}
  %y = math.exp %x {shardx.layouts = [#shardx.layout<@mesh, [S(1)]>],
                    shardx.operand_layouts = [#shardx.layout<@mesh, [S(1)]>]} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Tests that a redistribute must start from its operand's layout.
shardx.mesh @mesh(shape = 2)
func.func @redistribute(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // expected-error @+1 {{redistributes from #shardx.layout<@mesh, [S(1)]> but its operand has layout #shardx.layout<@mesh, [S(0)]>}}
  %r = shardx.redistribute %x : tensor<4x8xf32> from #shardx.layout<@mesh, [S(1)]> to #shardx.layout<@mesh, [R]>
  return %r : tensor<4x8xf32>
}

// -----

// Tests that a result must end in its declared layout.
shardx.mesh @mesh(shape = 2)
func.func @result(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // expected-error @+1 {{result #0 has layout #shardx.layout<@mesh, [S(0)]> but is declared #shardx.layout<@mesh, [R]>}}
  return %x : tensor<4x8xf32>
}

// -----

// Tests that an annotation left behind (reshard insertion not run) is an
// error.
shardx.mesh @mesh(shape = 2)
func.func @annotate(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // expected-error @+1 {{shardx.annotate left after reshard insertion}}
  %a = shardx.annotate %x : tensor<4x8xf32> to #shardx.layout<@mesh, [S(0)]>
  return %x : tensor<4x8xf32>
}

// -----

// Tests that an op propagation gave no strategy may not read a sharded
// value.
shardx.mesh @mesh(shape = 2)
func.func @unpropagated(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  // expected-error @+1 {{op without a sharding strategy has a sharded operand (run shardx-propagate)}}
  %y = math.exp %x {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
