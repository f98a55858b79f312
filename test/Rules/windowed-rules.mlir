// RUN: shardx-opt %s --split-input-file --shardx-test-print-rules -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests the windowed dims of the convolutions the importer emits (NCHW):
// the forward conv with dilation 2 (extent 4: low 2, high 2), the weight
// gradient (the output gradient's rows are the longer, stride-1 loop: a
// split there is a split reduction), and a stride-2 convolution: its input
// rows are twice the output rows, the first shard widened by low = 1 and
// the last by high = 1 (12 = 2 * 5 + 2; 1 row past the last window unread,
// so a shard reads no row of the next one).
func.func @convs(%x: tensor<2x3x12x12xf32>, %w: tensor<4x3x3x3xf32>, %o: tensor<2x4x8x8xf32>,
                 %xt: tensor<3x2x10x10xf32>, %gyt: tensor<4x2x8x8xf32>, %gw: tensor<3x4x3x3xf32>,
                 %o2: tensor<2x4x5x5xf32>) {
  // CHECK: remark: ([i, m, k, l], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=8, m=3, n=3, o=3} reduction={m} need_replication={n, o} window(operand 0 dim 2: low=2 high=2 halo) window(operand 0 dim 3: low=2 high=2 halo)
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<2> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<2x3x12x12xf32>, tensor<4x3x3x3xf32>) outs(%o : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: remark: ([i, m, n, o], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=3, j=4, k=3, l=3, m=2, n=8, o=8} reduction={m, n, o} need_replication={k, l} window(operand 0 dim 2: low=1 high=1 halo) window(operand 0 dim 3: low=1 high=1 halo)
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%xt, %gyt : tensor<3x2x10x10xf32>, tensor<4x2x8x8xf32>) outs(%gw : tensor<3x4x3x3xf32>) -> tensor<3x4x3x3xf32>
  // CHECK: remark: ([i, m, k, l], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=5, l=5, m=3, n=3, o=3} reduction={m} need_replication={n, o} window(operand 0 dim 2: low=1 high=1 halo stride=2 unread=1) window(operand 0 dim 3: low=1 high=1 halo stride=2 unread=1)
  %2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(%x, %w : tensor<2x3x12x12xf32>, tensor<4x3x3x3xf32>) outs(%o2 : tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  return
}

// -----

// Tests the windows of the stride-2 convolution's weight gradient
// (conv(x^T, dy^T) with stride and dilation swapped: the output gradient's
// rows are the longer loop, at stride 2, a split reduction), a 1x1 stride-2
// convolution (extent 0, one unread row: its shards read nothing across
// edges), a window larger than the rows left (a 12-row input of a 3x3
// stride-4 convolution with 3 outputs: 4 * 3 > 12 - 1, no room for the
// last shard's rows) that keeps its loops whole, and a window loop as long
// as the outer one (no outer loop to split).
func.func @strided(%xt: tensor<3x2x18x18xf32>, %gyt: tensor<4x2x8x8xf32>, %gw: tensor<3x4x3x3xf32>,
                   %x: tensor<2x3x16x16xf32>, %w1: tensor<4x3x1x1xf32>, %o1: tensor<2x4x8x8xf32>,
                   %x12: tensor<2x3x12x12xf32>, %w: tensor<4x3x3x3xf32>, %o3: tensor<2x4x3x3xf32>,
                   %x5: tensor<2x3x5x5xf32>, %o5: tensor<2x4x3x3xf32>) {
  // CHECK: remark: ([i, m, n, o], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=3, j=4, k=3, l=3, m=2, n=8, o=8} reduction={m, n, o} need_replication={k, l} window(operand 0 dim 2: low=1 high=1 halo stride=2 unread=1) window(operand 0 dim 3: low=1 high=1 halo stride=2 unread=1)
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<2> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%xt, %gyt : tensor<3x2x18x18xf32>, tensor<4x2x8x8xf32>) outs(%gw : tensor<3x4x3x3xf32>) -> tensor<3x4x3x3xf32>
  // CHECK: remark: ([i, m, k, l], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=8, m=3, n=1, o=1} reduction={m} need_replication={n, o} window(operand 0 dim 2: low=0 high=0 halo stride=2 unread=1) window(operand 0 dim 3: low=0 high=0 halo stride=2 unread=1)
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(%x, %w1 : tensor<2x3x16x16xf32>, tensor<4x3x1x1xf32>) outs(%o1 : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: remark: ([i, m, k*n, l*o], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=3, l=3, m=3, n=3, o=3} reduction={m} need_replication={k, l, n, o}
  %2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<4> : tensor<2xi64>} ins(%x12, %w : tensor<2x3x12x12xf32>, tensor<4x3x3x3xf32>) outs(%o3 : tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  // CHECK: remark: ([i, m, k*n, l*o], [j, m, n, o], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=3, l=3, m=3, n=3, o=3} reduction={m} need_replication={k, l, n, o}
  %3 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x5, %w : tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>) outs(%o5 : tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  return
}

// -----

// Tests that a dim padded with a constant is a windowed dim of the result
// (no halo: a pad reads no neighbour) and that a pad with a computed value
// keeps its padded dims whole.
func.func @pads(%x: tensor<2x8x8xf32>, %s: f32) {
  // CHECK: remark: ([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=8} window(result 0 dim 1: low=1 high=2)
  %c = arith.constant 0.0 : f32
  %0 = tensor.pad %x low[0, 1, 0] high[0, 2, 0] {
  ^bb0(%i: index, %j: index, %k: index):
    tensor.yield %c : f32
  } : tensor<2x8x8xf32> to tensor<2x11x8xf32>
  // CHECK: remark: ([i, j, l]) -> ([i, k, l]) {i=2, j=8, k=11, l=8} need_replication={j, k}
  %1 = tensor.pad %x low[0, 1, 0] high[0, 2, 0] {
  ^bb0(%i: index, %j: index, %k: index):
    %v = arith.index_cast %j : index to i64
    %f = arith.sitofp %v : i64 to f32
    tensor.yield %f : f32
  } : tensor<2x8x8xf32> to tensor<2x11x8xf32>
  return
}

// -----

// Tests a stride-2 insert (the dilated output gradient of a stride-2
// convolution): each strided dim is a parallel factor of the source, the
// destination's and result's a windowed dim of stride 2 (no halo) widened
// by the offset and the rows past the last inserted one; a unit-stride dim
// at an offset still needs replication.
func.func @strided_insert(%gy: tensor<1x3x8x3xf32>, %z: tensor<1x3x18x8xf32>, %s: tensor<1x3x4x8xf32>) {
  // CHECK: remark: ([i, j, k, l], [i, j, k, l]) -> ([i, j, k, l]) {i=1, j=3, k=8, l=3} window(operand 1 dim 2: low=1 high=1 stride=2) window(result 0 dim 2: low=1 high=1 stride=2) window(operand 1 dim 3: low=1 high=1 stride=2) window(result 0 dim 3: low=1 high=1 stride=2)
  %0 = tensor.insert_slice %gy into %z[0, 0, 1, 1] [1, 3, 8, 3] [1, 1, 2, 2] : tensor<1x3x8x3xf32> into tensor<1x3x18x8xf32>
  // CHECK: remark: ([i, j, k, m], [i, j, l, m]) -> ([i, j, l, m]) {i=1, j=3, k=4, l=18, m=8} need_replication={k, l}
  %1 = tensor.insert_slice %s into %z[0, 0, 2, 0] [1, 3, 4, 8] [1, 1, 1, 1] : tensor<1x3x4x8xf32> into tensor<1x3x18x8xf32>
  return
}
