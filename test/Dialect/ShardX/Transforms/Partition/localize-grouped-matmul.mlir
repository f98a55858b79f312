// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-partition | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-ragged-experts --shardx-insert-reshards --shardx-lower-reshards --shardx-localize=grouped-row-runs=false | FileCheck %s --check-prefix=OFF

// Tests that grouped-row-runs=false (the cuda target's: its host reads no
// device buffer) keeps every grouped matmul over all its rows, masked.
// OFF-NOT: tensor.extract_slice
// OFF: linalg.generic {{.*}} ins({{.*}} : tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<8xi64>) outs({{.*}} : tensor<8x6xf32>)
// OFF-NOT: tensor.extract_slice

// Tests that shardx-localize runs a grouped matmul over its rank's
// experts' rows only: the rows whose group is below the rank's first
// expert and below its end counted from the groups (one reduction, two
// counts), the inputs' and the init's rows [lo, hi) sliced (a run-time
// count), the product inserted back into the init.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @experts
// CHECK: %[[BOUNDS:.*]]:2 = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[G:.*]] : tensor<8xi64>) outs({{.*}} : tensor<i64>, tensor<i64>)
// CHECK: arith.cmpi slt
// CHECK: arith.cmpi slt
// CHECK: %[[LO64:.*]] = tensor.extract %[[BOUNDS]]#0[]
// CHECK: %[[LO:.*]] = arith.index_cast %[[LO64]] : i64 to index
// CHECK: %[[HI64:.*]] = tensor.extract %[[BOUNDS]]#1[]
// CHECK: %[[HI:.*]] = arith.index_cast %[[HI64]] : i64 to index
// CHECK: %[[N:.*]] = arith.subi %[[HI]], %[[LO]] : index
// CHECK: %[[XS:.*]] = tensor.extract_slice %{{.*}}[%[[LO]], 0] [%[[N]], 4] [1, 1] : tensor<8x4xf32> to tensor<?x4xf32>
// CHECK: %[[GS:.*]] = tensor.extract_slice %[[G]][%[[LO]]] [%[[N]]] [1] : tensor<8xi64> to tensor<?xi64>
// CHECK: %[[ZS:.*]] = tensor.extract_slice %[[Z:.*]][%[[LO]], 0] [%[[N]], 6] [1, 1] : tensor<8x6xf32> to tensor<?x6xf32>
// CHECK: %[[P:.*]] = linalg.generic {{.*}} ins(%[[XS]], %{{.*}}, %[[GS]] : tensor<?x4xf32>, tensor<2x4x6xf32>, tensor<?xi64>) outs(%[[ZS]] : tensor<?x6xf32>)
// CHECK: tensor.insert_slice %[[P]] into %[[Z]][%[[LO]], 0] [%[[N]], 6] [1, 1] : tensor<?x6xf32> into tensor<8x6xf32>
func.func @experts(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w1: tensor<4x4x6xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %w2: tensor<4x6x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %offs: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %c0 = arith.constant 0 : i64
  %f0 = arith.constant 0.0 : f32
  %g_init = tensor.empty() : tensor<8xi64>
  %g_zero = linalg.fill ins(%c0 : i64) outs(%g_init : tensor<8xi64>) -> tensor<8xi64>
  %g = linalg.generic {indexing_maps = [#end, #row], iterator_types = ["parallel", "reduction"]}
      ins(%offs : tensor<4xi32>) outs(%g_zero : tensor<8xi64>) {
  ^bb0(%end: i32, %acc: i64):
    %i = linalg.index 0 : index
    %r = arith.index_cast %i : index to i64
    %e = arith.extsi %end : i32 to i64
    %le = arith.cmpi sle, %e, %r : i64
    %one = arith.extui %le : i1 to i64
    %s = arith.addi %acc, %one : i64
    linalg.yield %s : i64
  } -> tensor<8xi64>
  %a_init = tensor.empty() : tensor<8x6xf32>
  %a_zero = linalg.fill ins(%f0 : f32) outs(%a_init : tensor<8x6xf32>) -> tensor<8x6xf32>
  %a = linalg.generic {indexing_maps = [#rows, #w, #g, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w1, %g : tensor<8x4xf32>, tensor<4x4x6xf32>, tensor<8xi64>) outs(%a_zero : tensor<8x6xf32>) {
  ^bb0(%xv: f32, %wv: f32, %gv: i64, %acc: f32):
    %i = linalg.index 2 : index
    %gi = arith.index_cast %gv : i64 to index
    %hit = arith.cmpi eq, %i, %gi : index
    %p = arith.mulf %xv, %wv : f32
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %sig_init = tensor.empty() : tensor<8x6xf32>
  %sig = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<8x6xf32>) outs(%sig_init : tensor<8x6xf32>) {
  ^bb0(%v: f32, %o: f32):
    %one = arith.constant 1.0 : f32
    %n = arith.negf %v : f32
    %ex = math.exp %n : f32
    %d = arith.addf %one, %ex : f32
    %q = arith.divf %one, %d : f32
    linalg.yield %q : f32
  } -> tensor<8x6xf32>
  %h_init = tensor.empty() : tensor<8x6xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %sig : tensor<8x6xf32>, tensor<8x6xf32>) outs(%h_init : tensor<8x6xf32>) {
  ^bb0(%u: f32, %v: f32, %o: f32):
    %m = arith.mulf %u, %v : f32
    linalg.yield %m : f32
  } -> tensor<8x6xf32>
  %y_init = tensor.empty() : tensor<8x4xf32>
  %y_zero = linalg.fill ins(%f0 : f32) outs(%y_init : tensor<8x4xf32>) -> tensor<8x4xf32>
  %y = linalg.generic {indexing_maps = [#rows, #w, #g, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%h, %w2, %g : tensor<8x6xf32>, tensor<4x6x4xf32>, tensor<8xi64>) outs(%y_zero : tensor<8x4xf32>) {
  ^bb0(%xv: f32, %wv: f32, %gv: i64, %acc: f32):
    %i = linalg.index 2 : index
    %gi = arith.index_cast %gv : i64 to index
    %hit = arith.cmpi eq, %i, %gi : index
    %p = arith.mulf %xv, %wv : f32
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// Tests that a grouped matmul whose experts are whole runs over the rows of
// all its experts: groups below 0 and below 4.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @whole_experts
// CHECK: %[[B:.*]] = arith.index_cast %c0 : index to i64
// CHECK: %[[END:.*]] = arith.addi %c0, %c4 : index
// CHECK: %[[E:.*]] = arith.index_cast %[[END]] : index to i64
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction"]}
// CHECK: arith.cmpi slt, %{{.*}}, %[[B]] : i64
// CHECK: arith.cmpi slt, %{{.*}}, %[[E]] : i64
// CHECK: tensor.extract_slice {{.*}} : tensor<8x4xf32> to tensor<?x4xf32>
// CHECK: linalg.generic {{.*}} ins({{.*}} : tensor<?x4xf32>, tensor<4x4x6xf32>, tensor<?xi64>)
func.func @whole_experts(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w1: tensor<4x4x6xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w2: tensor<4x6x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %offs: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %c0 = arith.constant 0 : i64
  %f0 = arith.constant 0.0 : f32
  %g_init = tensor.empty() : tensor<8xi64>
  %g_zero = linalg.fill ins(%c0 : i64) outs(%g_init : tensor<8xi64>) -> tensor<8xi64>
  %g = linalg.generic {indexing_maps = [#end, #row], iterator_types = ["parallel", "reduction"]}
      ins(%offs : tensor<4xi32>) outs(%g_zero : tensor<8xi64>) {
  ^bb0(%end: i32, %acc: i64):
    %i = linalg.index 0 : index
    %r = arith.index_cast %i : index to i64
    %e = arith.extsi %end : i32 to i64
    %le = arith.cmpi sle, %e, %r : i64
    %one = arith.extui %le : i1 to i64
    %s = arith.addi %acc, %one : i64
    linalg.yield %s : i64
  } -> tensor<8xi64>
  %a_init = tensor.empty() : tensor<8x6xf32>
  %a_zero = linalg.fill ins(%f0 : f32) outs(%a_init : tensor<8x6xf32>) -> tensor<8x6xf32>
  %a = linalg.generic {indexing_maps = [#rows, #w, #g, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w1, %g : tensor<8x4xf32>, tensor<4x4x6xf32>, tensor<8xi64>) outs(%a_zero : tensor<8x6xf32>) {
  ^bb0(%xv: f32, %wv: f32, %gv: i64, %acc: f32):
    %i = linalg.index 2 : index
    %gi = arith.index_cast %gv : i64 to index
    %hit = arith.cmpi eq, %i, %gi : index
    %p = arith.mulf %xv, %wv : f32
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %sig_init = tensor.empty() : tensor<8x6xf32>
  %sig = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<8x6xf32>) outs(%sig_init : tensor<8x6xf32>) {
  ^bb0(%v: f32, %o: f32):
    %one = arith.constant 1.0 : f32
    %n = arith.negf %v : f32
    %ex = math.exp %n : f32
    %d = arith.addf %one, %ex : f32
    %q = arith.divf %one, %d : f32
    linalg.yield %q : f32
  } -> tensor<8x6xf32>
  %h_init = tensor.empty() : tensor<8x6xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %sig : tensor<8x6xf32>, tensor<8x6xf32>) outs(%h_init : tensor<8x6xf32>) {
  ^bb0(%u: f32, %v: f32, %o: f32):
    %m = arith.mulf %u, %v : f32
    linalg.yield %m : f32
  } -> tensor<8x6xf32>
  %y_init = tensor.empty() : tensor<8x4xf32>
  %y_zero = linalg.fill ins(%f0 : f32) outs(%y_init : tensor<8x4xf32>) -> tensor<8x4xf32>
  %y = linalg.generic {indexing_maps = [#rows, #w, #g, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%h, %w2, %g : tensor<8x6xf32>, tensor<4x6x4xf32>, tensor<8xi64>) outs(%y_zero : tensor<8x4xf32>) {
  ^bb0(%xv: f32, %wv: f32, %gv: i64, %acc: f32):
    %i = linalg.index 2 : index
    %gi = arith.index_cast %gv : i64 to index
    %hit = arith.cmpi eq, %i, %gi : index
    %p = arith.mulf %xv, %wv : f32
    %z = arith.constant 0.0 : f32
    %t = arith.select %hit, %p, %z : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}
