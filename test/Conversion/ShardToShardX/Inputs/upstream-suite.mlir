// Programs annotated for upstream MLIR's partitioner, written in the style of
// llvm-project's mlir/test/Dialect/Shard/sharding-propagation.mlir and
// partition.mlir: TOSA and linalg ops between shard.shard annotations, on
// result definitions and (annotate_for_users) on uses, partially annotated
// (for sharding-propagation) or fully (for shard-partition).
// `split-file` cuts it into one program per function; e2e.test runs them
// and scripts/shard_import_table.py measures them (docs/ShardImport.md).
// Zero points are constants: upstream's TOSA-to-linalg lowering, which the
// import uses, needs them constant.

//--- elementwise_on_def.mlir
// Only the result of an elementwise op is annotated.
shard.grid @grid(shape = 2x2)
func.func @elementwise_on_def(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tosa.sigmoid %arg0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = shard.sharding @grid split_axes = [[0], [1]] : !shard.sharding
  %1 = shard.shard %0 to %s : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

//--- elementwise_on_use.mlir
// Only the operand of an elementwise op is annotated, for its users.
shard.grid @grid(shape = 2x2)
func.func @elementwise_on_use(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = shard.sharding @grid split_axes = [[0], [1]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<8x16xf32>
  %1 = tosa.sigmoid %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

//--- elementwise_chain.mlir
// A chain of unary ops: the input sharding reaches the result.
shard.grid @grid(shape = 4)
func.func @elementwise_chain(%arg0: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<16x8xf32>
  %1 = tosa.tanh %0 : (tensor<16x8xf32>) -> tensor<16x8xf32>
  %2 = tosa.abs %1 : (tensor<16x8xf32>) -> tensor<16x8xf32>
  %3 = tosa.sigmoid %2 : (tensor<16x8xf32>) -> tensor<16x8xf32>
  return %3 : tensor<16x8xf32>
}

//--- unary_with_resharding.mlir
// Replicated -> split -> abs -> split -> replicated, fully annotated.
shard.grid @grid(shape = 2)
func.func @unary_with_resharding(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %r : tensor<8xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<8xf32>
  %2 = tosa.abs %1 : (tensor<8xf32>) -> tensor<8xf32>
  %3 = shard.shard %2 to %s : tensor<8xf32>
  %4 = shard.shard %3 to %r annotate_for_users : tensor<8xf32>
  return %4 : tensor<8xf32>
}

//--- binary_elementwise.mlir
// Both operands and the result split the same way: no communication.
shard.grid @grid(shape = 2)
func.func @binary_elementwise(%arg0: tensor<8x4xf32>, %arg1: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x4xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<8x4xf32>
  %2 = shard.shard %arg1 to %s : tensor<8x4xf32>
  %3 = shard.shard %2 to %s annotate_for_users : tensor<8x4xf32>
  %4 = tosa.add %1, %3 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %5 = shard.shard %4 to %s : tensor<8x4xf32>
  %6 = shard.shard %5 to %s annotate_for_users : tensor<8x4xf32>
  return %6 : tensor<8x4xf32>
}

//--- multiple_chained_reshards.mlir
// Split, abs, gather, abs, split again.
shard.grid @grid(shape = 2)
func.func @multiple_chained_reshards(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %r : tensor<8xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<8xf32>
  %2 = tosa.abs %1 : (tensor<8xf32>) -> tensor<8xf32>
  %3 = shard.shard %2 to %s : tensor<8xf32>
  %4 = shard.shard %3 to %r annotate_for_users : tensor<8xf32>
  %5 = tosa.abs %4 : (tensor<8xf32>) -> tensor<8xf32>
  %6 = shard.shard %5 to %r : tensor<8xf32>
  %7 = shard.shard %6 to %s annotate_for_users : tensor<8xf32>
  return %7 : tensor<8xf32>
}

//--- move_split_axis.mlir
// The grid axis moves from tensor dim 0 to dim 1 (an all-to-all).
shard.grid @grid(shape = 2)
func.func @move_split_axis(%arg0: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %s0 = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s0 : tensor<4x6xf32>
  %s1 = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %1 = shard.shard %0 to %s1 annotate_for_users : tensor<4x6xf32>
  return %1 : tensor<4x6xf32>
}

//--- two_axes_one_dim.mlir
// Dim 0 split over grid axes 0 then 1 (outer to inner); the elementwise op
// keeps it, the result gathers axis 1 back.
shard.grid @grid(shape = 2x2)
func.func @two_axes_one_dim(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %s01 = shard.sharding @grid split_axes = [[0, 1]] : !shard.sharding
  %0 = shard.shard %arg0 to %s01 : tensor<8x4xf32>
  %1 = shard.shard %0 to %s01 annotate_for_users : tensor<8x4xf32>
  %2 = tosa.tanh %1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = shard.shard %2 to %s01 : tensor<8x4xf32>
  %s0 = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %4 = shard.shard %3 to %s0 annotate_for_users : tensor<8x4xf32>
  return %4 : tensor<8x4xf32>
}

//--- reorder_axes_one_dim.mlir
// Dim 0 split over axes [0, 1], then over [1, 0]: the same blocks on other
// devices.
shard.grid @grid(shape = 2x2)
func.func @reorder_axes_one_dim(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %s01 = shard.sharding @grid split_axes = [[0, 1]] : !shard.sharding
  %0 = shard.shard %arg0 to %s01 : tensor<8x4xf32>
  %s10 = shard.sharding @grid split_axes = [[1, 0]] : !shard.sharding
  %1 = shard.shard %0 to %s10 annotate_for_users : tensor<8x4xf32>
  %2 = tosa.abs %1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = shard.shard %2 to %s10 : tensor<8x4xf32>
  return %3 : tensor<8x4xf32>
}

//--- matmul_shard_batch_and_m.mlir
// tosa.matmul with the batch split over axis 0 and the rows over axis 1.
shard.grid @grid(shape = 2x2)
func.func @matmul_shard_batch_and_m(%arg0: tensor<2x16x8xf32>, %arg1: tensor<2x8x32xf32>) -> tensor<2x16x32xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %0 = tosa.matmul %arg0, %arg1, %zp, %zp : (tensor<2x16x8xf32>, tensor<2x8x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x32xf32>
  %s = shard.sharding @grid split_axes = [[0], [1]] : !shard.sharding
  %1 = shard.shard %0 to %s : tensor<2x16x32xf32>
  return %1 : tensor<2x16x32xf32>
}

//--- matmul_shard_m_and_n.mlir
// tosa.matmul with the rows split over axis 0 and the columns over axis 1.
shard.grid @grid(shape = 2x2)
func.func @matmul_shard_m_and_n(%arg0: tensor<2x16x8xf32>, %arg1: tensor<2x8x32xf32>) -> tensor<2x16x32xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %0 = tosa.matmul %arg0, %arg1, %zp, %zp : (tensor<2x16x8xf32>, tensor<2x8x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x32xf32>
  %s = shard.sharding @grid split_axes = [[], [0], [1]] : !shard.sharding
  %1 = shard.shard %0 to %s : tensor<2x16x32xf32>
  return %1 : tensor<2x16x32xf32>
}

//--- matmul_shard_m_and_k.mlir
// The left operand split on rows (axis 0) and on the contraction dim (axis
// 1): a pending sum over axis 1.
shard.grid @grid(shape = 2x2)
func.func @matmul_shard_m_and_k(%arg0: tensor<2x16x8xf32>, %arg1: tensor<2x8x32xf32>) -> tensor<2x16x32xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = shard.sharding @grid split_axes = [[], [0], [1]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<2x16x8xf32>
  %1 = tosa.matmul %0, %arg1, %zp, %zp : (tensor<2x16x8xf32>, tensor<2x8x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x32xf32>
  return %1 : tensor<2x16x32xf32>
}

//--- linalg_matmul_conflict.mlir
// linalg.matmul with its left operand split on rows and a replicated
// result: one side has to give way.
shard.grid @grid(shape = 2)
func.func @linalg_matmul_conflict(%arg0: tensor<4x6xf32>, %arg1: tensor<6x4xf32>, %out: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<4x6xf32>
  %1 = linalg.matmul ins(%0, %arg1 : tensor<4x6xf32>, tensor<6x4xf32>) outs(%out : tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %2 = shard.shard %1 to %r : tensor<4x4xf32>
  return %2 : tensor<4x4xf32>
}

//--- megatron_mlp.mlir
// Column-parallel then row-parallel linalg.matmul (weights annotated only):
// one all-reduce of the replicated output.
shard.grid @grid(shape = 2)
func.func @megatron_mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %w2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %col = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %row = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %x0 = shard.shard %x to %r : tensor<8x16xf32>
  %w10 = shard.shard %w1 to %col : tensor<16x32xf32>
  %w20 = shard.shard %w2 to %row : tensor<32x16xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x0, %w10 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%h, %w20 : tensor<8x32xf32>, tensor<32x16xf32>) outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y0 = shard.shard %y to %r : tensor<8x16xf32>
  return %y0 : tensor<8x16xf32>
}

//--- mlp_fully_annotated.mlir
// A fully annotated MLP as shard-partition takes it: every operand and
// result, the empty and filled inits included; the input arrives split on
// its columns and is gathered, the hidden activation is split on columns,
// the output replicated.
shard.grid @grid(shape = 4)
func.func @mlp_fully_annotated(%arg0: tensor<8x16xf32>, %arg1: tensor<16x32xf32>, %arg2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %col = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %row = shard.sharding @grid split_axes = [[0], []] : !shard.sharding
  %rep = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %x = shard.shard %arg0 to %col : tensor<8x16xf32>
  %w1 = shard.shard %arg1 to %col : tensor<16x32xf32>
  %w2 = shard.shard %arg2 to %row : tensor<32x16xf32>
  %cst = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %e1s = shard.shard %e1 to %col : tensor<8x32xf32>
  %e1u = shard.shard %e1s to %col annotate_for_users : tensor<8x32xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1u : tensor<8x32xf32>) -> tensor<8x32xf32>
  %f1s = shard.shard %f1 to %col : tensor<8x32xf32>
  %xu = shard.shard %x to %rep annotate_for_users : tensor<8x16xf32>
  %w1u = shard.shard %w1 to %col annotate_for_users : tensor<16x32xf32>
  %f1u = shard.shard %f1s to %col annotate_for_users : tensor<8x32xf32>
  %h = linalg.matmul ins(%xu, %w1u : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f1u : tensor<8x32xf32>) -> tensor<8x32xf32>
  %hs = shard.shard %h to %col : tensor<8x32xf32>
  %hu = shard.shard %hs to %col annotate_for_users : tensor<8x32xf32>
  %a = tosa.sigmoid %hu : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %as = shard.shard %a to %col : tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %e2s = shard.shard %e2 to %rep : tensor<8x16xf32>
  %e2u = shard.shard %e2s to %rep annotate_for_users : tensor<8x16xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2u : tensor<8x16xf32>) -> tensor<8x16xf32>
  %f2s = shard.shard %f2 to %rep : tensor<8x16xf32>
  %au = shard.shard %as to %col annotate_for_users : tensor<8x32xf32>
  %w2u = shard.shard %w2 to %row annotate_for_users : tensor<32x16xf32>
  %f2u = shard.shard %f2s to %rep annotate_for_users : tensor<8x16xf32>
  %y = linalg.matmul ins(%au, %w2u : tensor<8x32xf32>, tensor<32x16xf32>) outs(%f2u : tensor<8x16xf32>) -> tensor<8x16xf32>
  %ys = shard.shard %y to %rep : tensor<8x16xf32>
  %yu = shard.shard %ys to %rep annotate_for_users : tensor<8x16xf32>
  return %yu : tensor<8x16xf32>
}

//--- mlp_1d_weight_stationary.mlir
// After arXiv 2211.05102 figure 2(a): the feature dim split over both grid
// axes, matmul, sigmoid, matmul.
shard.grid @grid(shape = 2x2)
func.func @mlp_1d_weight_stationary(%arg0: tensor<2x4x8xf32>, %arg1: tensor<2x8x32xf32>, %arg2: tensor<2x32x8xf32>) -> tensor<2x4x8xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s0 = shard.sharding @grid split_axes = [[], [], [0, 1]] : !shard.sharding
  %0 = shard.shard %arg0 to %s0 : tensor<2x4x8xf32>
  %1 = shard.shard %arg1 to %s0 : tensor<2x8x32xf32>
  %2 = tosa.matmul %0, %1, %zp, %zp : (tensor<2x4x8xf32>, tensor<2x8x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x32xf32>
  %3 = tosa.sigmoid %2 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %s1 = shard.sharding @grid split_axes = [[], [0, 1]] : !shard.sharding
  %4 = shard.shard %arg2 to %s1 : tensor<2x32x8xf32>
  %5 = tosa.matmul %3, %4, %zp, %zp : (tensor<2x4x32xf32>, tensor<2x32x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %6 = shard.shard %5 to %s0 : tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

//--- mlp_2d_weight_stationary.mlir
// After arXiv 2211.05102 figure 2(b), on a 2x2x2 grid.
shard.grid @grid(shape = 2x2x2)
func.func @mlp_2d_weight_stationary(%arg0: tensor<2x4x8xf32>, %arg1: tensor<2x8x32xf32>, %arg2: tensor<2x32x8xf32>) -> tensor<2x4x8xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s0 = shard.sharding @grid split_axes = [[], [], [0, 1, 2]] : !shard.sharding
  %0 = shard.shard %arg0 to %s0 : tensor<2x4x8xf32>
  %s1 = shard.sharding @grid split_axes = [[], [0], [1, 2]] : !shard.sharding
  %1 = shard.shard %arg1 to %s1 : tensor<2x8x32xf32>
  %2 = tosa.matmul %0, %1, %zp, %zp : (tensor<2x4x8xf32>, tensor<2x8x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x32xf32>
  %3 = shard.shard %2 to %s0 : tensor<2x4x32xf32>
  %4 = tosa.sigmoid %3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %s2 = shard.sharding @grid split_axes = [[], [1, 2], [0]] : !shard.sharding
  %5 = shard.shard %arg2 to %s2 : tensor<2x32x8xf32>
  %6 = tosa.matmul %4, %5, %zp, %zp : (tensor<2x4x32xf32>, tensor<2x32x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %7 = shard.shard %6 to %s0 : tensor<2x4x8xf32>
  return %7 : tensor<2x4x8xf32>
}

//--- attention_scores.mlir
// Q K^T per batch, split over the batch: transpose and matmul stay local.
shard.grid @grid(shape = 2)
func.func @attention_scores(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>) -> tensor<4x8x8xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %q0 = shard.shard %q to %s : tensor<4x8x16xf32>
  %k0 = shard.shard %k to %s : tensor<4x8x16xf32>
  %kt = tosa.transpose %k0 {perms = array<i32: 0, 2, 1>} : (tensor<4x8x16xf32>) -> tensor<4x16x8xf32>
  %0 = tosa.matmul %q0, %kt, %zp, %zp : (tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x8x8xf32>
  %1 = shard.shard %0 to %s : tensor<4x8x8xf32>
  return %1 : tensor<4x8x8xf32>
}

//--- transpose.mlir
// A transpose moves the split dim: rows in, columns out.
shard.grid @grid(shape = 2)
func.func @transpose(%arg0: tensor<8x6xf32>) -> tensor<6x8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x6xf32>
  %1 = tosa.transpose %0 {perms = array<i32: 1, 0>} : (tensor<8x6xf32>) -> tensor<6x8xf32>
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %2 = shard.shard %1 to %t : tensor<6x8xf32>
  return %2 : tensor<6x8xf32>
}

//--- transpose_linalg.mlir
// The same transpose as linalg.transpose.
shard.grid @grid(shape = 2)
func.func @transpose_linalg(%arg0: tensor<8x6xf32>) -> tensor<6x8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x6xf32>
  %e = tensor.empty() : tensor<6x8xf32>
  %1 = linalg.transpose ins(%0 : tensor<8x6xf32>) outs(%e : tensor<6x8xf32>) permutation = [1, 0]
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %2 = shard.shard %1 to %t : tensor<6x8xf32>
  return %2 : tensor<6x8xf32>
}

//--- reshape.mlir
// A reshape that merges the split dim with the next one.
shard.grid @grid(shape = 2)
func.func @reshape(%arg0: tensor<8x4xf32>) -> tensor<32xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x4xf32>
  %shape = tosa.const_shape {values = dense<[32]> : tensor<1xindex>} : () -> !tosa.shape<1>
  %1 = tosa.reshape %0, %shape : (tensor<8x4xf32>, !tosa.shape<1>) -> tensor<32xf32>
  %2 = shard.shard %1 to %s : tensor<32xf32>
  return %2 : tensor<32xf32>
}

//--- reduce_all.mlir
// linalg.reduce of a row-split tensor to a scalar: an all-reduce.
shard.grid @grid(shape = 2)
func.func @reduce_all(%arg0: tensor<6x6xf32>) -> tensor<f32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<6x6xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %1 = shard.shard %init to %r : tensor<f32>
  %2 = linalg.reduce ins(%0 : tensor<6x6xf32>) outs(%1 : tensor<f32>) dimensions = [0, 1]
    (%in: f32, %acc: f32) {
      %3 = arith.addf %in, %acc : f32
      linalg.yield %3 : f32
    }
  %4 = shard.shard %2 to %r : tensor<f32>
  return %4 : tensor<f32>
}

//--- reduce_rows_local.mlir
// Summing each row of a row-split tensor needs no communication.
shard.grid @grid(shape = 2)
func.func @reduce_rows_local(%arg0: tensor<6x8xf32>) -> tensor<6xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<6x8xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<6xf32>) -> tensor<6xf32>
  %1 = shard.shard %init to %s : tensor<6xf32>
  %2 = linalg.reduce ins(%0 : tensor<6x8xf32>) outs(%1 : tensor<6xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %3 = arith.addf %in, %acc : f32
      linalg.yield %3 : f32
    }
  %4 = shard.shard %2 to %s : tensor<6xf32>
  return %4 : tensor<6xf32>
}

//--- column_sums.mlir
// linalg.reduce over the split dim of a 2-D tensor, result replicated.
shard.grid @grid(shape = 4)
func.func @column_sums(%arg0: tensor<8x16xf32>) -> tensor<16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %1 = linalg.reduce ins(%0 : tensor<8x16xf32>) outs(%init : tensor<16xf32>) dimensions = [0]
    (%in: f32, %acc: f32) {
      %2 = arith.addf %in, %acc : f32
      linalg.yield %2 : f32
    }
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %3 = shard.shard %1 to %r : tensor<16xf32>
  return %3 : tensor<16xf32>
}

//--- tosa_reduce_sum.mlir
// tosa.reduce_sum over the split dim, result replicated.
shard.grid @grid(shape = 4)
func.func @tosa_reduce_sum(%arg0: tensor<8x16xf32>) -> tensor<1x16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x16xf32>
  %1 = tosa.reduce_sum %0 {axis = 0 : i32} : (tensor<8x16xf32>) -> tensor<1x16xf32>
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %2 = shard.shard %1 to %r : tensor<1x16xf32>
  return %2 : tensor<1x16xf32>
}

//--- softmax_rows.mlir
// A row softmax (exp, row sum, reciprocal, product) on row-split input.
shard.grid @grid(shape = 2)
func.func @softmax_rows(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x16xf32>
  %1 = tosa.exp %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = tosa.reduce_sum %1 {axis = 1 : i32} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %3 = tosa.reciprocal %2 : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %4 = tosa.mul %1, %3, %shift : (tensor<8x16xf32>, tensor<8x1xf32>, tensor<1xi8>) -> tensor<8x16xf32>
  %5 = shard.shard %4 to %s : tensor<8x16xf32>
  return %5 : tensor<8x16xf32>
}

//--- arrow_structure.mlir
// One value read by two chains, two results.
shard.grid @grid(shape = 2x2)
func.func @arrow_structure(%arg0: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %0 = tosa.tanh %arg0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %1 = tosa.abs %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = tosa.negate %0, %zp, %zp : (tensor<8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<8x16xf32>
  %s = shard.sharding @grid split_axes = [[0], [1]] : !shard.sharding
  %3 = shard.shard %2 to %s : tensor<8x16xf32>
  return %1, %3 : tensor<8x16xf32>, tensor<8x16xf32>
}

//--- uneven_offsets.mlir
// sharded_dims_offsets: shards of 2, 3, 4 and 5 columns.
shard.grid @grid(shape = 4)
func.func @uneven_offsets(%arg0: tensor<4x14xf32>) -> tensor<4x14xf32> {
  %s = shard.sharding @grid split_axes = [[], [0]] sharded_dims_offsets = [0, 2, 5, 9, 14] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<4x14xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<4x14xf32>
  %2 = tosa.sigmoid %1 : (tensor<4x14xf32>) -> tensor<4x14xf32>
  %3 = shard.shard %2 to %s : tensor<4x14xf32>
  %4 = shard.shard %3 to %s annotate_for_users : tensor<4x14xf32>
  return %4 : tensor<4x14xf32>
}

//--- uneven_offsets_gather.mlir
// Uneven rows (3 and 5), gathered to a replicated result.
shard.grid @grid(shape = 2)
func.func @uneven_offsets_gather(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %s = shard.sharding @grid split_axes = [[0]] sharded_dims_offsets = [0, 3, 8] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x4xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<8x4xf32>
  %2 = tosa.abs %1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = shard.shard %2 to %s : tensor<8x4xf32>
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %4 = shard.shard %3 to %r annotate_for_users : tensor<8x4xf32>
  return %4 : tensor<8x4xf32>
}

//--- halo_chain.mlir
// Halos: the import refuses them (ShardX shards do not overlap).
shard.grid @grid(shape = 4)
func.func @halo_chain(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] halo_sizes = [2, 1] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<8x16xf32>
  %1 = tosa.tanh %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = shard.shard %1 to %s : tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

//--- dynamic_grid.mlir
// A grid of unknown size: ShardX meshes are static.
shard.grid @grid(shape = ?)
func.func @dynamic_grid(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<8x16xf32>
  %1 = tosa.sigmoid %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
