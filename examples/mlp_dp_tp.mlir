// A two-layer MLP (forward) on a 2x2 mesh: data parallel over "dp", Megatron
// tensor parallel over "tp". The batch is split over dp; W1 is split by
// columns and W2 by rows over tp, and both are FSDP-sharded over dp on their
// rows. For W2 FSDP and TP split the same dim, tp-major: DTensor's
// _StridedShard [SS(0, 2), S(0)].
//
// Run: bash scripts/run_example.sh
// (prints the program with its layouts in canonical form, every rank's local
// shard of each annotated tensor, the plan of the reshard and the program
// with the reshard lowered to collectives).

shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])

func.func @mlp(
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>},
    %w1: tensor<16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(1)]>},
    %w2: tensor<32x16xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(0)]>})
    -> (tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>}) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>)
                     outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  // The hidden activation is split by columns over tp.
  %hs = shardx.annotate %h : tensor<8x32xf32> to #shardx.layout<@mesh, [S(0), S(1)]>
  %zeros = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %a = linalg.max ins(%hs, %zeros : tensor<8x32xf32>, tensor<8x32xf32>)
                  outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<8x32xf32>, tensor<32x16xf32>)
                     outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  // Row-parallel W2 leaves a pending sum over tp.
  %yp = shardx.annotate %y : tensor<8x16xf32> to #shardx.layout<@mesh, [S(0), P(sum)]>
  %yr = shardx.redistribute %yp : tensor<8x16xf32>
      from #shardx.layout<@mesh, [S(0), P(sum)]> to #shardx.layout<@mesh, [S(0), R]>
  return %yr : tensor<8x16xf32>
}
