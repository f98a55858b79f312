// RUN: shardx-opt %s --split-input-file --shardx-test-local-shards -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that nested uneven splits follow DTensor: 5 rows on [S(0), S(0)]
// over 2x2 give 2, 1, 1, 1 rows.
shardx.mesh @mesh(shape = 2x2)
func.func @nested(%x: tensor<5x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [S(0), S(0)]> placements [S(0), S(0)] uneven
// CHECK-NEXT: rank (0, 0): [0, 2) x [0, 3) -> 2x3
// CHECK-NEXT: rank (0, 1): [2, 3) x [0, 3) -> 1x3
// CHECK-NEXT: rank (1, 0): [3, 4) x [0, 3) -> 1x3
// CHECK-NEXT: rank (1, 1): [4, 5) x [0, 3) -> 1x3

// -----

// Tests that 7 rows on 4 ranks follow torch.chunk (2, 2, 2, 1).
shardx.mesh @mesh(shape = 4)
func.func @seven(%x: tensor<7xf32>) -> tensor<7xf32> {
  %0 = shardx.annotate %x : tensor<7xf32> to #shardx.layout<@mesh, [S(0)]>
  return %0 : tensor<7xf32>
}
// CHECK: remark: annotate #shardx.layout<@mesh, [S(0)]> placements [S(0)] uneven
// CHECK-NEXT: rank (0): [0, 2) -> 2
// CHECK-NEXT: rank (1): [2, 4) -> 2
// CHECK-NEXT: rank (2): [4, 6) -> 2
// CHECK-NEXT: rank (3): [6, 7) -> 1

// -----

// Tests that FSDP over TP ([SS(0, tp), S(0)]) splits rows over tp first, and
// converts back to the same DTensor placements.
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])
func.func @fsdp_tp(%w: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(1)]>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [S(0), S(1)], strides = {0 = [2]}> placements [SS(0, 2), S(1)] even
// CHECK-NEXT: rank (0, 0): [0, 2)+[4, 6) x [0, 2) -> 4x2
// CHECK-NEXT: rank (0, 1): [0, 2)+[4, 6) x [2, 4) -> 4x2
// CHECK-NEXT: rank (1, 0): [2, 4)+[6, 8) x [0, 2) -> 4x2
// CHECK-NEXT: rank (1, 1): [2, 4)+[6, 8) x [2, 4) -> 4x2

// -----

// Tests that the reorder form of StridedShard gives contiguous blocks.
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])
func.func @reorder(%w: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(0)]>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}> placements [SS(0, 2), S(0)] even
// CHECK-NEXT: rank (0, 0): [0, 2) -> 2
// CHECK-NEXT: rank (0, 1): [4, 6) -> 2
// CHECK-NEXT: rank (1, 0): [2, 4) -> 2
// CHECK-NEXT: rank (1, 1): [6, 8) -> 2

// -----

// Tests that the flattening of a 6x4 tensor sharded on dim 1 over 2 ranks is
// SS(0, 6): each rank holds six runs of two.
shardx.mesh @mesh(shape = 2)
func.func @flat(%x: tensor<24xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 6)]>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [S(0)], strides = {0 = [6]}> placements [SS(0, 6)] even
// CHECK-NEXT: rank (0): [0, 2)+[4, 6)+[8, 10)+[12, 14)+[16, 18)+[20, 22) -> 12
// CHECK-NEXT: rank (1): [2, 4)+[6, 8)+[10, 12)+[14, 16)+[18, 20)+[22, 24) -> 12

// -----

// Tests that explicit sizes place shards in the given order, and that they
// have no DTensor placements.
shardx.mesh @mesh(shape = 2x2)
func.func @sizes(%x: tensor<7x2xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}, sizes = {0 = [4, 0, 1, 2]}>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}, sizes = {0 = [4, 0, 1, 2]}> placements none (dim 0 has explicit shard sizes, which DTensor placements cannot express) uneven
// CHECK-NEXT: rank (0, 0): [0, 4) x [0, 2) -> 4x2
// CHECK-NEXT: rank (0, 1): [4, 5) x [0, 2) -> 1x2
// CHECK-NEXT: rank (1, 0): [4, 4) x [0, 2) -> 0x2
// CHECK-NEXT: rank (1, 1): [5, 7) x [0, 2) -> 2x2

// -----

// Tests that Partial and Replicate axes hold the whole tensor on a 3-D mesh.
shardx.mesh @mesh(shape = 2x1x2)
func.func @partial(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [P(max), R, S(0)]>}) {
  return
}
// CHECK: remark: argument #0 #shardx.layout<@mesh, [P(max), R, S(0)]> placements [P(max), R, S(0)] even
// CHECK-NEXT: rank (0, 0, 0): [0, 2) -> 2
// CHECK-NEXT: rank (0, 0, 1): [2, 4) -> 2
// CHECK-NEXT: rank (1, 0, 0): [0, 2) -> 2
// CHECK-NEXT: rank (1, 0, 1): [2, 4) -> 2
