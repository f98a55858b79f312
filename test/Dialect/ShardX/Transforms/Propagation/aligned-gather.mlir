// RUN: shardx-opt %s --shardx-spmd --canonicalize | FileCheck %s
// RUN: shardx-run %s --entry pick --check --int-range 5 | FileCheck %s --check-prefix=RAN
// RUN: shardx-run %s --entry pick_uneven --check --int-range 5 | FileCheck %s --check-prefix=RAN
// RUN: shardx-run %s --entry dp_lookup --check --int-range 11 | FileCheck %s --check-prefix=RAN
// RUN: shardx-run %s --entry whole_source --check --int-range 6 | FileCheck %s --check-prefix=RAN
// RUN: shardx-run %s --entry rows_at_targets --check --int-range 6 | FileCheck %s --check-prefix=RAN
// RUN: shardx-run %s --entry pick_strided_targets --check --int-range 5 | FileCheck %s --check-prefix=RAN

// Tests the rules of gathers from tensors captured from above under data
// parallelism (EmbeddingRule.h): before, the cross-entropy's pick of each
// row's target log-probability ran replicated, so the logits of a GPT
// step under data parallelism were all-gathered (4,096 x 50,304 bf16 per
// rank) and the log-softmax ran on every row on every rank; and the token
// embedding's lookup from a whole table ran replicated too (the tokens
// all-gathered). Each is checked against its unsharded run.
// RAN: check passed

// An aligned gather: row i of the log-probabilities (split by rows) at its
// target's column; each rank reads its own rows, no collective.
// CHECK-LABEL: func.func @pick
// CHECK-SAME: %[[LOGP:[a-z0-9]+]]: tensor<4x5xf32>, %[[T:[a-z0-9]+]]: tensor<4x1xi64>
// CHECK-NOT: shardx.all_gather
// CHECK: linalg.generic {{.*}} ins(%[[T]] : tensor<4x1xi64>) outs(%{{.*}} : tensor<4x1xf32>)
// CHECK: %[[ROW:.*]] = linalg.index 0 : index
// CHECK: tensor.extract %[[LOGP]][%[[ROW]], %{{.*}}] : tensor<4x5xf32>
// CHECK: return
shardx.mesh @mesh(shape = 2, axes = ["dp"])

func.func @pick(%logp: tensor<8x5xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                %target: tensor<8x1xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x1xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %e = tensor.empty() : tensor<8x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<8x1xi64>) outs(%e : tensor<8x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %r = linalg.index 0 : index
    %c = arith.index_cast %t : i64 to index
    %x = tensor.extract %logp[%r, %c] : tensor<8x5xf32>
    linalg.yield %x : f32
  } -> tensor<8x1xf32>
  return %p : tensor<8x1xf32>
}

// The same on 7 rows (4 and 3 a rank): each rank's rows start at its
// offset, the index the local row.
// CHECK-LABEL: func.func @pick_uneven
// CHECK-NOT: shardx.all_gather
// CHECK: return
func.func @pick_uneven(%logp: tensor<7x5xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                       %target: tensor<7x1xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<7x1xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %e = tensor.empty() : tensor<7x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<7x1xi64>) outs(%e : tensor<7x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %r = linalg.index 0 : index
    %c = arith.index_cast %t : i64 to index
    %x = tensor.extract %logp[%r, %c] : tensor<7x5xf32>
    linalg.yield %x : f32
  } -> tensor<7x1xf32>
  return %p : tensor<7x1xf32>
}

// An embedding lookup from a whole table with the tokens split: each rank
// looks up its own tokens.
// CHECK-LABEL: func.func @dp_lookup
// CHECK-SAME: %[[TABLE:[a-z0-9]+]]: tensor<11x4xf32>, %[[IDS:[a-z0-9]+]]: tensor<2x3xi64>
// CHECK-NOT: shardx.all_gather
// CHECK: linalg.generic {{.*}} ins(%[[IDS]] : tensor<2x3xi64>) outs(%{{.*}} : tensor<2x3x4xf32>)
// CHECK: tensor.extract %[[TABLE]]
// CHECK-NOT: shardx.all_gather
// CHECK: return
func.func @dp_lookup(%table: tensor<11x4xf32>,
                     %ids: tensor<4x3xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x3x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %e = tensor.empty() : tensor<4x3x4xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ids : tensor<4x3xi64>) outs(%e : tensor<4x3x4xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 2 : index
    %x = tensor.extract %table[%r, %c] : tensor<11x4xf32>
    linalg.yield %x : f32
  } -> tensor<4x3x4xf32>
  return %v : tensor<4x3x4xf32>
}

// A gather whose source no loop reads by rows (a column of a whole matrix
// at the targets) runs on the targets' split; the source stays whole.
// CHECK-LABEL: func.func @whole_source
// CHECK-NOT: shardx.all_gather
// CHECK: return
func.func @whole_source(%m: tensor<6x3xf32>,
                        %target: tensor<8x1xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x1xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %e = tensor.empty() : tensor<8x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<8x1xi64>) outs(%e : tensor<8x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %c = arith.index_cast %t : i64 to index
    %c2 = arith.constant 2 : index
    %x = tensor.extract %m[%c, %c2] : tensor<6x3xf32>
    linalg.yield %x : f32
  } -> tensor<8x1xf32>
  return %p : tensor<8x1xf32>
}

// A source split on the dim the data indexes (its rows at the targets) is
// gathered first: a rank may need any row.
// CHECK-LABEL: func.func @rows_at_targets
// CHECK: shardx.all_gather %{{.*}} on @mesh axes = [0] dim = 0 : tensor<3x3xf32> -> tensor<6x3xf32>
// CHECK: return
func.func @rows_at_targets(%m: tensor<6x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                           %target: tensor<8x1xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x1xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %e = tensor.empty() : tensor<8x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<8x1xi64>) outs(%e : tensor<8x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %c = arith.index_cast %t : i64 to index
    %c2 = arith.constant 2 : index
    %x = tensor.extract %m[%c, %c2] : tensor<6x3xf32>
    linalg.yield %x : f32
  } -> tensor<8x1xf32>
  return %p : tensor<8x1xf32>
}

// Targets split with a stride (StridedShard) and a whole source: the loop
// the body reads by `linalg.index` takes no strided split (its offset
// would not be one number), so the pick runs on the whole targets.
// CHECK-LABEL: func.func @pick_strided_targets
// CHECK: return
func.func @pick_strided_targets(%logp: tensor<8x5xf32>,
                                %target: tensor<8x1xi64> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2)]>})
    -> tensor<8x1xf32> {
  %e = tensor.empty() : tensor<8x1xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%target : tensor<8x1xi64>) outs(%e : tensor<8x1xf32>) {
  ^bb0(%t: i64, %o: f32):
    %r = linalg.index 0 : index
    %c = arith.index_cast %t : i64 to index
    %x = tensor.extract %logp[%r, %c] : tensor<8x5xf32>
    linalg.yield %x : f32
  } -> tensor<8x1xf32>
  return %p : tensor<8x1xf32>
}
