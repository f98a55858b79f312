// RUN: shardx-opt --shardx-grouped-matmul-loops --split-input-file %s | FileCheck %s

// A grouped matmul (the importer's rows form: x [R, K] x w [E, K, N], each
// term masked by its row's group g) becomes a loop over the experts of one
// matmul on the expert's rows [c[e], c[e+1]), c counted from the groups.
#x = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#o = affine_map<(r, n, e, k) -> (r, n)>
// CHECK-LABEL: func.func @rows
// CHECK: %[[C:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<8xi64>) outs(%{{.*}} : tensor<3xi64>)
// CHECK: arith.cmpi slt
// CHECK: %[[OUT:.*]] = scf.for %[[E:.*]] = %c0 to %c2 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<8x6xf32>)
// CHECK: %[[LO:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[HI:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[N:.*]] = arith.subi %[[HI]], %[[LO]]
// CHECK: %[[XS:.*]] = tensor.extract_slice %{{.*}}[%[[LO]], 0] [%[[N]], 4] [1, 1] : tensor<8x4xf32> to tensor<?x4xf32>
// CHECK: %[[WE:.*]] = tensor.extract_slice %{{.*}}[%[[E]], 0, 0] [1, 4, 6] [1, 1, 1] : tensor<2x4x6xf32> to tensor<4x6xf32>
// CHECK: %[[CS:.*]] = tensor.extract_slice %[[ACC]][%[[LO]], 0] [%[[N]], 6] [1, 1] : tensor<8x6xf32> to tensor<?x6xf32>
// CHECK: %[[P:.*]] = linalg.matmul ins(%[[XS]], %[[WE]] : tensor<?x4xf32>, tensor<4x6xf32>) outs(%[[CS]] : tensor<?x6xf32>)
// CHECK: %[[W:.*]] = tensor.insert_slice %[[P]] into %[[ACC]][%[[LO]], 0] [%[[N]], 6] [1, 1]
// CHECK: scf.yield %[[W]]
// CHECK: return %[[OUT]]
func.func @rows(%x: tensor<8x4xf32>, %w: tensor<2x4x6xf32>, %offs: tensor<2xi64>, %z: tensor<8x6xf32>) -> tensor<8x6xf32> {
  %ge = tensor.empty() : tensor<8xi64>
  %c0i = arith.constant 0 : i64
  %gz = linalg.fill ins(%c0i : i64) outs(%ge : tensor<8xi64>) -> tensor<8xi64>
  %g = linalg.generic {indexing_maps = [affine_map<(r, e) -> (e)>, affine_map<(r, e) -> (r)>], iterator_types = ["parallel", "reduction"]} ins(%offs : tensor<2xi64>) outs(%gz : tensor<8xi64>) {
  ^bb0(%end: i64, %acc: i64):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %le = arith.cmpi sle, %end, %ri : i64
    %one = arith.extui %le : i1 to i64
    %sum = arith.addi %acc, %one : i64
    linalg.yield %sum : i64
  } -> tensor<8xi64>
  %0 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w, %g : tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<8xi64>) outs(%z : tensor<8x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 2 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}

// -----

// The weights form (the experts' gradient: x [K, R] x w [R, N] -> [E, K, N]):
// each expert's columns of x and rows of w, added into init[e].
#x = affine_map<(e, k, n, r) -> (k, r)>
#w = affine_map<(e, k, n, r) -> (r, n)>
#g = affine_map<(e, k, n, r) -> (r)>
#o = affine_map<(e, k, n, r) -> (e, k, n)>
// CHECK-LABEL: func.func @weights
// CHECK: scf.for %[[E:.*]] = %c0 to %c2 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<2x4x6xf32>)
// CHECK: %[[XS:.*]] = tensor.extract_slice %{{.*}}[0, %[[LO:.*]]] [4, %[[N:.*]]] [1, 1] : tensor<4x8xf32> to tensor<4x?xf32>
// CHECK: %[[WS:.*]] = tensor.extract_slice %{{.*}}[%[[LO]], 0] [%[[N]], 6] [1, 1] : tensor<8x6xf32> to tensor<?x6xf32>
// CHECK: %[[CS:.*]] = tensor.extract_slice %[[ACC]][%[[E]], 0, 0] [1, 4, 6] [1, 1, 1] : tensor<2x4x6xf32> to tensor<4x6xf32>
// CHECK: linalg.matmul ins(%[[XS]], %[[WS]] : tensor<4x?xf32>, tensor<?x6xf32>) outs(%[[CS]] : tensor<4x6xf32>)
func.func @weights(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %offs: tensor<2xi64>, %z: tensor<2x4x6xf32>) -> tensor<2x4x6xf32> {
  %ge = tensor.empty() : tensor<8xi64>
  %c0i = arith.constant 0 : i64
  %gz = linalg.fill ins(%c0i : i64) outs(%ge : tensor<8xi64>) -> tensor<8xi64>
  %g = linalg.generic {indexing_maps = [affine_map<(r, e) -> (e)>, affine_map<(r, e) -> (r)>], iterator_types = ["parallel", "reduction"]} ins(%offs : tensor<2xi64>) outs(%gz : tensor<8xi64>) {
  ^bb0(%end: i64, %acc: i64):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %le = arith.cmpi sle, %end, %ri : i64
    %one = arith.extui %le : i1 to i64
    %sum = arith.addi %acc, %one : i64
    linalg.yield %sum : i64
  } -> tensor<8xi64>
  %0 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w, %g : tensor<4x8xf32>, tensor<8x6xf32>, tensor<8xi64>) outs(%z : tensor<2x4x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 0 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<2x4x6xf32>
  return %0 : tensor<2x4x6xf32>
}

// -----

// shardx-localize's form on an expert-parallel rank: rows of a run-time
// count and the expert loop offset by the rank's first expert (%first):
// the counts are of the groups below %first + e.
#x = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#o = affine_map<(r, n, e, k) -> (r, n)>
// CHECK-LABEL: func.func @localized
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<?xi64>) outs(%{{.*}} : tensor<3xi64>)
// CHECK: %[[SLOT:.*]] = linalg.index 0
// CHECK: arith.addi %[[SLOT]], %[[FIRST:.*]] : index
// CHECK: scf.for {{.*}} -> (tensor<?x6xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x4xf32>, tensor<4x6xf32>) outs(%{{.*}} : tensor<?x6xf32>)
func.func @localized(%x: tensor<?x4xf32>, %w: tensor<2x4x6xf32>, %offs: tensor<2xi64>, %z: tensor<?x6xf32>, %first: index, %lo: index, %n: index) -> tensor<?x6xf32> {
  %ge = tensor.empty() : tensor<8xi64>
  %c0i = arith.constant 0 : i64
  %gz = linalg.fill ins(%c0i : i64) outs(%ge : tensor<8xi64>) -> tensor<8xi64>
  %gall = linalg.generic {indexing_maps = [affine_map<(r, e) -> (e)>, affine_map<(r, e) -> (r)>], iterator_types = ["parallel", "reduction"]} ins(%offs : tensor<2xi64>) outs(%gz : tensor<8xi64>) {
  ^bb0(%end: i64, %acc: i64):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %le = arith.cmpi sle, %end, %ri : i64
    %one = arith.extui %le : i1 to i64
    %sum = arith.addi %acc, %one : i64
    linalg.yield %sum : i64
  } -> tensor<8xi64>
  %g = tensor.extract_slice %gall[%lo] [%n] [1] : tensor<8xi64> to tensor<?xi64>
  %0 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w, %g : tensor<?x4xf32>, tensor<2x4x6xf32>, tensor<?xi64>) outs(%z : tensor<?x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %i = linalg.index 2 : index
    %e = arith.addi %i, %first : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<?x6xf32>
  return %0 : tensor<?x6xf32>
}

// -----

// A run-time count of experts keeps the masked form, as do a term that is
// not masked by the expert loop and groups not known to be nondecreasing
// (an argument, or ends that depend on the row: its experts' rows need not
// be runs).
#x = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#o = affine_map<(r, n, e, k) -> (r, n)>
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: scf.for
// CHECK-COUNT-6: linalg.generic
// CHECK-NOT: linalg.matmul
func.func @left_alone(%x: tensor<8x4xf32>, %w: tensor<?x4x6xf32>, %offs: tensor<2xi64>, %z: tensor<8x6xf32>,
                      %w2: tensor<2x4x6xf32>, %graw: tensor<8xi64>) -> (tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>) {
  %ge = tensor.empty() : tensor<8xi64>
  %c0i = arith.constant 0 : i64
  %gz = linalg.fill ins(%c0i : i64) outs(%ge : tensor<8xi64>) -> tensor<8xi64>
  %g = linalg.generic {indexing_maps = [affine_map<(r, e) -> (e)>, affine_map<(r, e) -> (r)>], iterator_types = ["parallel", "reduction"]} ins(%offs : tensor<2xi64>) outs(%gz : tensor<8xi64>) {
  ^bb0(%end: i64, %acc: i64):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %le = arith.cmpi sle, %end, %ri : i64
    %one = arith.extui %le : i1 to i64
    %sum = arith.addi %acc, %one : i64
    linalg.yield %sum : i64
  } -> tensor<8xi64>
  %0 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w, %g : tensor<8x4xf32>, tensor<?x4x6xf32>, tensor<8xi64>) outs(%z : tensor<8x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 2 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %1 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w2, %g : tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<8xi64>) outs(%z : tensor<8x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 1 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %2 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w2, %graw : tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<8xi64>) outs(%z : tensor<8x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 2 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %gbad = linalg.generic {indexing_maps = [affine_map<(r, e) -> (e)>, affine_map<(r, e) -> (r)>], iterator_types = ["parallel", "reduction"]} ins(%offs : tensor<2xi64>) outs(%gz : tensor<8xi64>) {
  ^bb0(%end: i64, %acc: i64):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %twice = arith.muli %end, %ri : i64
    %le = arith.cmpi sle, %twice, %ri : i64
    %one = arith.extui %le : i1 to i64
    %sum = arith.addi %acc, %one : i64
    linalg.yield %sum : i64
  } -> tensor<8xi64>
  %3 = linalg.generic {indexing_maps = [#x, #w, #g, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w2, %gbad : tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<8xi64>) outs(%z : tensor<8x6xf32>) {
  ^bb0(%a: f32, %b: f32, %grp: i64, %o: f32):
    %e = linalg.index 2 : index
    %gi = arith.index_cast %grp : i64 to index
    %hit = arith.cmpi eq, %e, %gi : index
    %p = arith.mulf %a, %b : f32
    %zero = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %zero : f32
    %s = arith.addf %o, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  return %0, %1, %2, %3 : tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>
}
