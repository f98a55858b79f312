// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-partition | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-insert-reshards --shardx-print-plan -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAN

// Tests that a "same" 3x3 convolution whose input and output rows are split
// keeps the split: the padded input is split with the padding on the end
// ranks (pad low on member 0, high on member 1), the convolution reads a
// one-row halo from each neighbour, and no image is all-gathered. The plan
// prints the halo's bytes: with two ranks each receives one side, 1 row of
// 4 channels x 18 padded columns of f32, the halo's lower bound.
shardx.mesh @mesh(shape = 2, axes = ["h"])
// CHECK-LABEL: func.func @same_conv
// CHECK-SAME: tensor<1x4x8x16xf32>
func.func @same_conv(%x: tensor<1x4x16x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>},
                     %w: tensor<8x4x3x3xf32>)
    -> (tensor<1x8x16x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>}) {
  // CHECK-NOT: shardx.all_gather
  // CHECK: %[[J:.*]] = shardx.axis_index on @mesh axes = [0]
  // CHECK: %[[LO:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
  // CHECK: %[[HI:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
  // CHECK: %[[P:.*]] = tensor.pad %{{.*}} low[0, 0, %[[LO]], 1] high[0, 0, %[[HI]], 1]
  // CHECK: } : tensor<1x4x8x16xf32> to tensor<1x4x9x18xf32>
  // CHECK: %[[H:.*]] = shardx.halo %[[P]] on @mesh axes = [0] dim = 2 low = 1 high = 1 sizes = [9, 9] : tensor<1x4x9x18xf32> -> tensor<1x4x?x18xf32>
  // CHECK: linalg.conv_2d_nchw_fchw {{.*}} ins(%[[H]], %{{.*}} : tensor<1x4x?x18xf32>, tensor<8x4x3x3xf32>) outs(%{{.*}} : tensor<1x8x8x16xf32>)
  // CHECK-NOT: shardx.all_gather
  // PLAN: remark: halo of operand 0 dim 2 over mesh axis 0 (low 1, high 1): 288 bytes/rank
  %c0 = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %c0 : f32
  } : tensor<1x4x16x16xf32> to tensor<1x4x18x18xf32>
  %e = tensor.empty() : tensor<1x8x16x16xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%p, %w : tensor<1x4x18x18xf32>, tensor<8x4x3x3xf32>) outs(%f : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
  return %y : tensor<1x8x16x16xf32>
}

// -----

// Tests an uneven split (13 rows: shards of 7 and 6): the padded input's
// shards are 8 and 7 rows, the halo names them, and the shapes are dynamic.
shardx.mesh @mesh(shape = 2, axes = ["h"])
// CHECK-LABEL: func.func @uneven
func.func @uneven(%x: tensor<1x4x13x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>},
                  %w: tensor<8x4x3x3xf32>)
    -> (tensor<1x8x13x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>}) {
  // CHECK-NOT: shardx.all_gather
  // CHECK: tensor.pad
  // CHECK: shardx.halo %{{.*}} on @mesh axes = [0] dim = 2 low = 1 high = 1 sizes = [8, 7] : tensor<1x4x?x18xf32> -> tensor<1x4x?x18xf32>
  // CHECK: linalg.conv_2d_nchw_fchw
  // CHECK-SAME: -> tensor<1x8x?x16xf32>
  // PLAN: remark: halo of operand 0 dim 2 over mesh axis 0 (low 1, high 1): 288 bytes/rank
  // CHECK-NOT: shardx.all_gather
  %c0 = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %c0 : f32
  } : tensor<1x4x13x16xf32> to tensor<1x4x15x18xf32>
  %e = tensor.empty() : tensor<1x8x13x16xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<1x8x13x16xf32>) -> tensor<1x8x13x16xf32>
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%p, %w : tensor<1x4x15x18xf32>, tensor<8x4x3x3xf32>) outs(%f : tensor<1x8x13x16xf32>) -> tensor<1x8x13x16xf32>
  return %y : tensor<1x8x13x16xf32>
}

// -----

// Tests that a window wider than a shard is refused: 4 rows over 4 ranks
// and a 5x5 kernel (a halo of 2 rows, shards of 1) keep the rows whole:
// the image is gathered and no halo is exchanged.
shardx.mesh @mesh(shape = 4, axes = ["h"])
// CHECK-LABEL: func.func @too_wide
func.func @too_wide(%x: tensor<1x4x4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>},
                    %w: tensor<8x4x5x5xf32>)
    -> (tensor<1x8x4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(2)]>}) {
  // CHECK-NOT: shardx.halo
  // CHECK: shardx.all_gather
  // CHECK-NOT: shardx.halo
  // PLAN: remark: plan [S(2)] -> [R] for tensor<1x4x4x8xf32>: 1 step, 1 collective
  // PLAN-NOT: remark: halo
  %c0 = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 2, 2] high[0, 0, 2, 2] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %c0 : f32
  } : tensor<1x4x4x8xf32> to tensor<1x4x8x12xf32>
  %e = tensor.empty() : tensor<1x8x4x8xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<1x8x4x8xf32>) -> tensor<1x8x4x8xf32>
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%p, %w : tensor<1x4x8x12xf32>, tensor<8x4x5x5xf32>) outs(%f : tensor<1x8x4x8xf32>) -> tensor<1x8x4x8xf32>
  return %y : tensor<1x8x4x8xf32>
}
