// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-ragged-experts --shardx-insert-reshards --shardx-verify-layouts | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-ragged-experts --shardx-insert-reshards --shardx-print-plan -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAN

// Tests that print-plan names each operand a grouped matmul reads with its
// rows on their experts' ranks, after the reshards: @experts' second matmul
// (the only reshard its output's all-reduce), @derived_read_elsewhere's
// (after the first output's all-reduce and its own), none in @other_groups
// (two all-reduces) and @whole_experts (none).
// PLAN: remark: plan [P(sum)] -> [R] for tensor<8x4xf32>
// PLAN-NEXT: all_reduce
// PLAN-NOT: remark: plan
// PLAN: remark: ragged rows: grouped matmul reads operand #0 tensor<8x6xf32> as [P(sum)], its experts' rows on their ranks: no reshard
// PLAN: remark: plan [P(sum)] -> [R] for tensor<8x6xf32>
// PLAN: remark: plan [P(sum)] -> [R] for tensor<8x4xf32>
// PLAN-NOT: remark: plan
// PLAN: remark: ragged rows: grouped matmul reads operand #0 tensor<8x6xf32>
// PLAN: remark: plan [P(sum)] -> [R] for tensor<8x6xf32>
// PLAN: remark: plan [P(sum)] -> [R] for tensor<8x4xf32>
// PLAN-NOT: remark

// Tests that the SiLU-gated rows between two grouped matmuls of one
// offs, experts split over ep, stay on their experts: the gate ops read and
// give Partial(sum) (exact on each rank's own rows), the second matmul reads
// them so, and the only reshard is the all-reduce of its own output.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @experts
// CHECK-NOT: shardx.redistribute
// CHECK: %[[A:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK: %[[SIG:.*]] = linalg.generic {{.*}} ins(%[[A]] : {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>], shardx.operand_layouts = [#shardx.layout<@mesh, [P(sum)]>, {{.*}}], shardx.ragged_rows
// CHECK: %[[H:.*]] = linalg.generic {{.*}} ins(%[[A]], %[[SIG]] : {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>], shardx.operand_layouts = [#shardx.layout<@mesh, [P(sum)]>, #shardx.layout<@mesh, [P(sum)]>, {{.*}}], shardx.ragged_rows
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[H]], {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>], shardx.operand_layouts = [#shardx.layout<@mesh, [P(sum)]>, {{.*}}], shardx.ragged_rows
// CHECK-NOT: shardx.redistribute {{.*}} tensor<8x6xf32>
// CHECK: %[[R:.*]] = shardx.redistribute %[[Y]] : tensor<8x4xf32> from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [R]>
// CHECK-NEXT: return %[[R]]
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

// Tests that a derived row value read elsewhere (the sigmoid, returned) is
// not kept on its experts (it is not zero on the other ranks' rows): it is
// computed from the all-reduced first output, while the product, which
// only the second matmul reads, still reads that output pending its sum.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @derived_read_elsewhere
// CHECK: %[[A:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK: %[[AR:.*]] = shardx.redistribute %[[A]] : tensor<8x6xf32> from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [R]>
// CHECK: %[[SIG:.*]] = linalg.generic {{.*}} ins(%[[AR]] : {{.*}} {shardx.layouts = [#shardx.layout<@mesh, [R]>], shardx.operand_layouts = [#shardx.layout<@mesh, [R]>, #shardx.layout<@mesh, [R]>]} {
// CHECK: linalg.generic {{.*}} ins(%[[A]], %[[SIG]] : {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>], shardx.operand_layouts = [#shardx.layout<@mesh, [P(sum)]>, #shardx.layout<@mesh, [R]>, {{.*}}], shardx.ragged_rows
// CHECK: return %{{.*}}, %[[SIG]]
func.func @derived_read_elsewhere(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w1: tensor<4x4x6xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %w2: tensor<4x6x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %offs: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}, tensor<8x6xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
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
  return %y, %sig : tensor<8x4xf32>, tensor<8x6xf32>
}

// -----

// Tests that a grouped matmul whose groups come from other offs does not
// read the rows the first one left on its experts: the rows are all-reduced.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @other_groups
// CHECK-NOT: ragged_rows
// CHECK: shardx.redistribute {{.*}} : tensor<8x6xf32> from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [R]>
// CHECK-NOT: ragged_rows
func.func @other_groups(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %w1: tensor<4x4x6xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %w2: tensor<4x6x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %offs: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %offs2: tensor<4xi32> {shardx.layout = #shardx.layout<@mesh, [R]>})
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
  %g2_init = tensor.empty() : tensor<8xi64>
  %g2_zero = linalg.fill ins(%c0 : i64) outs(%g2_init : tensor<8xi64>) -> tensor<8xi64>
  %g2 = linalg.generic {indexing_maps = [#end, #row], iterator_types = ["parallel", "reduction"]}
      ins(%offs2 : tensor<4xi32>) outs(%g2_zero : tensor<8xi64>) {
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
      ins(%h, %w2, %g2 : tensor<8x6xf32>, tensor<4x6x4xf32>, tensor<8xi64>) outs(%y_zero : tensor<8x4xf32>) {
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

// Tests that grouped matmuls whose experts are not split are left alone.
#rows = affine_map<(r, n, e, k) -> (r, k)>
#w = affine_map<(r, n, e, k) -> (e, k, n)>
#g = affine_map<(r, n, e, k) -> (r)>
#out = affine_map<(r, n, e, k) -> (r, n)>
#id = affine_map<(r, n) -> (r, n)>
#end = affine_map<(r, e) -> (e)>
#row = affine_map<(r, e) -> (r)>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
// CHECK-LABEL: func.func @whole_experts
// CHECK-NOT: ragged_rows
// CHECK-NOT: shardx.redistribute
// CHECK: return
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
