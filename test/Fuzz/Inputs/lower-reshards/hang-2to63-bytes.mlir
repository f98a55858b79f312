shardx.mesh @mesh(shape = 2x4)
func.func @f(%x: tensor<9223372036854775806x34xf32>) -> tensor<9223372036854775806x34xf32> {
  %0 = shardx.redistribute %x : tensor<9223372036854775806x34xf32> from #shardx.layout<@mesh, [P(max), P(max)]> to #shardx.layout<@mesh, [S(1), R]>
  return %0 : tensor<9223372036854775806x34xf32>
}
