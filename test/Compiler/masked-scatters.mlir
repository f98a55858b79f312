// RUN: shardx-opt --shardx-lower-masked-scatters="order=cpu" --split-input-file %s | FileCheck %s --check-prefix=CPU
// RUN: shardx-opt --shardx-lower-masked-scatters="order=gpu" --split-input-file %s | FileCheck %s --check-prefix=GPU
// RUN: not shardx-opt --shardx-lower-masked-scatters="order=tpu" %s 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: order must be cpu or gpu, not 'tpu'

// Tests that the embedding backward as the importer writes it (index_put
// with accumulate: for every table row, the sum of the gradient rows whose
// token is that row) becomes a loop over the tokens that adds each
// gradient row to its table row, once: on the CPU the tokens outside and
// the row's columns inside; on the GPU a parallel loop over blocks of the
// table's rows and the columns, with the tokens in order inside, each
// thread adding the tokens whose row is in its block (here 50 blocks of
// one row). Rows outside the table are skipped.
// CPU-LABEL: func.func @embedding_backward
// CPU-SAME: %[[IDX:.*]]: memref<2x4xi64>, %[[G:.*]]: memref<2x4x8xf32>, %[[W:.*]]: memref<50x8xf32>
// CPU: scf.for
// CPU:   scf.for
// CPU:     %[[T:.*]] = memref.load %[[IDX]]
// CPU:     %[[ROW:.*]] = arith.index_cast %[[T]] : i64 to index
// CPU:     %[[GE:.*]] = arith.cmpi sge, %[[ROW]], %{{.*}}
// CPU:     %[[LT:.*]] = arith.cmpi slt, %[[ROW]], %{{.*}}
// CPU:     %[[IN:.*]] = arith.andi %[[GE]], %[[LT]]
// CPU:     scf.if %[[IN]] {
// CPU:       scf.for %[[D:.*]] = %{{.*}} to %{{.*}}
// CPU:         memref.load %[[G]]
// CPU:         %[[AT:.*]] = affine.apply #{{.*}}(%[[ROW]], %[[D]],
// CPU:         %[[OLD:.*]] = memref.load %[[W]][%[[AT]],
// CPU:         %[[TRUE:.*]] = arith.constant true
// CPU:         %[[X:.*]] = arith.select %[[TRUE]]
// CPU:         %[[NEW:.*]] = arith.addf %[[OLD]], %[[X]] : f32
// CPU:         memref.store %[[NEW]], %[[W]][%[[AT]],
// CPU-NOT: linalg.generic
// GPU-LABEL: func.func @embedding_backward
// GPU-SAME: %[[IDX:.*]]: memref<2x4xi64>, %[[G:.*]]: memref<2x4x8xf32>, %[[W:.*]]: memref<50x8xf32>
// GPU: %[[C50:.*]] = arith.constant 50 : index
// GPU: %[[C8:.*]] = arith.constant 8 : index
// GPU: scf.parallel (%[[RB:.*]], %[[D:.*]]) = (%{{.*}}, %{{.*}}) to (%{{.*}}, %[[C8]])
// GPU:   %[[FIRST:.*]] = arith.muli %[[RB]], %[[SIZE:.*]] : index
// GPU:   %[[NEXT:.*]] = arith.addi %[[FIRST]], %[[SIZE]] : index
// GPU:   %[[END:.*]] = arith.minsi %[[NEXT]], %[[C50]] : index
// GPU:   scf.for %[[B:.*]] =
// GPU:     scf.for %[[S:.*]] =
// GPU:       memref.load %[[IDX]]
// GPU:       %[[ROW:.*]] = arith.index_cast
// GPU:       %[[GE:.*]] = arith.cmpi sge, %[[ROW]], %[[FIRST]]
// GPU:       %[[LT:.*]] = arith.cmpi slt, %[[ROW]], %[[END]]
// GPU:       %[[IN:.*]] = arith.andi %[[GE]], %[[LT]]
// GPU:       scf.if %[[IN]]
// GPU:         memref.load %[[G]][%{{.*}}, %{{.*}}, %[[GD:.*]]]
// GPU:         %[[AT0:.*]] = affine.apply #{{.*}}(%[[ROW]], %[[D]], %[[B]], %[[S]])
// GPU:         %[[AT1:.*]] = affine.apply #{{.*}}(%[[ROW]], %[[D]], %[[B]], %[[S]])
// GPU:         memref.load %[[W]][%[[AT0]], %[[AT1]]]
// GPU:         memref.store %{{.*}}, %[[W]][%[[AT0]], %[[AT1]]]
// GPU-NOT: linalg.generic
func.func @embedding_backward(%idx: memref<2x4xi64>, %g: memref<2x4x8xf32>, %w: memref<50x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(v, d, b, s) -> (b, s)>,
                                   affine_map<(v, d, b, s) -> (b, s, d)>,
                                   affine_map<(v, d, b, s) -> (v, d)>],
                  iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%idx, %g : memref<2x4xi64>, memref<2x4x8xf32>) outs(%w : memref<50x8xf32>) {
  ^bb0(%i: i64, %x: f32, %acc: f32):
    %v = linalg.index 0 : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %v, %t : index
    %zero = arith.constant 0.0 : f32
    %term = arith.select %hit, %x, %zero : f32
    %s = arith.addf %acc, %term : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests that this rank's rows of a vocabulary-parallel table (the row
// compared is the local row plus the rank's first row) are found by
// subtracting the offset from the token, and that a 1-D table (no columns)
// runs a thread per row on the GPU (5 blocks of one row).
// CPU-LABEL: func.func @sharded_rows
// CPU-SAME: %[[IDX:.*]]: memref<6xi64>, %[[G:.*]]: memref<6xf32>, %[[W:.*]]: memref<5xf32>, %[[OFF:.*]]: index
// CPU: scf.for
// CPU:   %[[T:.*]] = arith.index_cast
// CPU:   %[[ROW:.*]] = arith.subi %[[T]], %[[OFF]]
// CPU:   scf.if
// CPU:     memref.load %[[W]][%[[AT:.*]]] : memref<5xf32>
// CPU:     memref.store %{{.*}}, %[[W]][%[[AT]]] : memref<5xf32>
// GPU-LABEL: func.func @sharded_rows
// GPU: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c5{{[_0-9]*}})
// GPU:   scf.for
// GPU:     arith.subi
func.func @sharded_rows(%idx: memref<6xi64>, %g: memref<6xf32>, %w: memref<5xf32>, %off: index) {
  linalg.generic {indexing_maps = [affine_map<(v, i) -> (i)>, affine_map<(v, i) -> (i)>,
                                   affine_map<(v, i) -> (v)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%idx, %g : memref<6xi64>, memref<6xf32>) outs(%w : memref<5xf32>) {
  ^bb0(%i: i64, %x: f32, %acc: f32):
    %l = linalg.index 0 : index
    %v = arith.addi %l, %off : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %t, %v : index
    %zero = arith.constant 0.0 : f32
    %term = arith.select %hit, %x, %zero : f32
    %s = arith.addf %term, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests that a scatter_add along dim 0 whose index has a column of its own
// (the row depends on the column) computes the row inside the column loop,
// and that generics which are not a masked row sum stay: a masked sum whose
// false value is not zero, and one whose row index is also read elsewhere.
// CPU-LABEL: func.func @scatter_add_columns
// CPU: scf.for
// CPU:   scf.for
// CPU:     memref.load %{{.*}} : memref<3x4xi64>
// CPU:     scf.if
// CPU-LABEL: func.func @not_scatters
// CPU-COUNT-2: linalg.generic
func.func @scatter_add_columns(%idx: memref<3x4xi64>, %src: memref<3x4xf32>, %x: memref<7x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(v, c, i) -> (i, c)>, affine_map<(v, c, i) -> (i, c)>,
                                   affine_map<(v, c, i) -> (v, c)>],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%idx, %src : memref<3x4xi64>, memref<3x4xf32>) outs(%x : memref<7x4xf32>) {
  ^bb0(%i: i64, %s: f32, %acc: f32):
    %v = linalg.index 0 : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %v, %t : index
    %zero = arith.constant 0.0 : f32
    %term = arith.select %hit, %s, %zero : f32
    %r = arith.addf %acc, %term : f32
    linalg.yield %r : f32
  }
  return
}

func.func @not_scatters(%idx: memref<6xi64>, %g: memref<6xf32>, %w: memref<5xf32>) {
  linalg.generic {indexing_maps = [affine_map<(v, i) -> (i)>, affine_map<(v, i) -> (i)>,
                                   affine_map<(v, i) -> (v)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%idx, %g : memref<6xi64>, memref<6xf32>) outs(%w : memref<5xf32>) {
  ^bb0(%i: i64, %x: f32, %acc: f32):
    %v = linalg.index 0 : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %v, %t : index
    %one = arith.constant 1.0 : f32
    %term = arith.select %hit, %x, %one : f32
    %s = arith.addf %acc, %term : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(v, i) -> (i)>, affine_map<(v, i) -> (i)>,
                                   affine_map<(v, i) -> (v)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%idx, %g : memref<6xi64>, memref<6xf32>) outs(%w : memref<5xf32>) {
  ^bb0(%i: i64, %x: f32, %acc: f32):
    %v = linalg.index 0 : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %v, %t : index
    %zero = arith.constant 0.0 : f32
    %vf = arith.index_cast %v : index to i64
    %vx = arith.sitofp %vf : i64 to f32
    %xv = arith.mulf %x, %vx : f32
    %term = arith.select %hit, %xv, %zero : f32
    %s = arith.addf %acc, %term : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests the blocks of a GPT-2 embedding's gradient for the GPU (768 columns
// alone would be 768 threads, each visiting the 8,192 tokens (4.6 ms on an
// H200)): 85 blocks of 592 rows (the last 576) make 65,280 threads, each
// visiting every token and adding those whose row is in its block.
// GPU-LABEL: func.func @gpt2_embedding_backward
// GPU-DAG: %[[C50304:.*]] = arith.constant 50304 : index
// GPU-DAG: %[[C85:.*]] = arith.constant 85 : index
// GPU-DAG: %[[C768:.*]] = arith.constant 768 : index
// GPU: scf.parallel (%[[RB:.*]], %{{.*}}) = (%{{.*}}, %{{.*}}) to (%[[C85]], %[[C768]])
// GPU:   %[[C592:.*]] = arith.constant 592 : index
// GPU:   %[[FIRST:.*]] = arith.muli %[[RB]], %[[C592]] : index
// GPU:   %[[NEXT:.*]] = arith.addi %[[FIRST]], %[[C592]] : index
// GPU:   arith.minsi %[[NEXT]], %[[C50304]] : index
// CPU-LABEL: func.func @gpt2_embedding_backward
// CPU-NOT: scf.parallel
func.func @gpt2_embedding_backward(%idx: memref<8x1024xi64>, %g: memref<8x1024x768xf32>, %w: memref<50304x768xf32>) {
  linalg.generic {indexing_maps = [affine_map<(v, d, b, s) -> (b, s)>,
                                   affine_map<(v, d, b, s) -> (b, s, d)>,
                                   affine_map<(v, d, b, s) -> (v, d)>],
                  iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%idx, %g : memref<8x1024xi64>, memref<8x1024x768xf32>) outs(%w : memref<50304x768xf32>) {
  ^bb0(%i: i64, %x: f32, %acc: f32):
    %v = linalg.index 0 : index
    %t = arith.index_cast %i : i64 to index
    %hit = arith.cmpi eq, %v, %t : index
    %zero = arith.constant 0.0 : f32
    %term = arith.select %hit, %x, %zero : f32
    %s = arith.addf %term, %acc : f32
    linalg.yield %s : f32
  }
  return
}
