// RUN: shardx-opt %s --split-input-file --shardx-propagate \
// RUN:   --shardx-ragged-dispatch | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-spmd | FileCheck %s --check-prefix=SPMD

// The global forward of shardx_dev.grouped_moe.GroupedMoEBlock (8 tokens,
// dim 16, hidden 32, 4 experts, top-2: 16 routed rows) as the importer
// writes it after shardx-canonicalize, from the routed choices %flat and
// gates %gates on: a stable argsort of %flat, bincount and cumsum groups,
// the tokens' rows gathered, three grouped matmuls (w1, w3, w2), the rows
// weighted by their gates and index_add'ed to their tokens; the three
// tensor<i64> results are the gathers' index range checks.

// Tests that with the tokens, choices and gates split over ep (the
// experts' axis) the dispatch is rewritten into the rank's local program:
// global -> local casts of the inputs (read in their layouts), the
// per-expert counts exchanged by an even all_to_all, the dispatch and
// combine as ragged all-to-alls given their receive counts, the output cast
// back in x's layout, and the range checks zero.
// CHECK-LABEL: func.func @split
// CHECK-SAME: %[[W1:[a-z0-9]+]]: tensor<4x16x32xf32>
// CHECK-SAME: %[[FLAT:[a-z0-9]+]]: tensor<16xi64>
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK: unrealized_conversion_cast %[[X]] : tensor<8x16xf32> to tensor<4x16xf32> {shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: unrealized_conversion_cast %[[FLAT]] : tensor<16xi64> to tensor<8xi64>
// CHECK: unrealized_conversion_cast %[[W1]] : tensor<4x16x32xf32> to tensor<2x16x32xf32>
// CHECK: %[[PER_EXPERT:.+]] = shardx.all_to_all %{{.+}} on @mesh axes = [0] split_dim = 0 concat_dim = 0 {shardx.ragged_dispatch} : tensor<4xi64> -> tensor<4xi64>
// CHECK: %[[ROWS:.+]] = shardx.ragged_all_to_all %{{.+}}, %[[SEND:.+]] recv_counts = %[[RECV:.+]] on @mesh axes = [0] {shardx.ragged_dispatch} : tensor<8x16xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<16x16xf32>
// CHECK: shardx.ragged_all_to_all %{{.+}}, %[[RECV]] recv_counts = %[[SEND]] on @mesh axes = [0] {shardx.ragged_dispatch} : tensor<16x16xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x16xf32>
// CHECK: %[[OUT:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<4x16xf32> to tensor<8x16xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: return %[[OUT]], %[[C:.+]], %[[C2:.+]], %[[C3:.+]] : tensor<8x16xf32>
// SPMD-LABEL: func.func @split
// SPMD-SAME: tensor<4x16xf32>
// SPMD-NOT: shardx.all_gather
// SPMD: shardx.all_to_all
// SPMD: %[[RECV:.+]] = shardx.ragged_all_to_all {{.*}} -> tensor<16x16xf32>
// The received rows sorted by expert: each grouped matmul runs over the
// received run only (a run-time row count in the 16-row buffer).
// SPMD: tensor.extract_slice %{{.+}}[%[[LO:.+]], 0] [%[[N:.+]], 16] [1, 1] : tensor<16x16xf32> to tensor<?x16xf32>
// SPMD: tensor.insert_slice %{{.+}}[%[[LO]], 0] [%[[N]], 32] [1, 1] : tensor<?x32xf32> into tensor<16x32xf32>
// SPMD: shardx.ragged_all_to_all {{.*}} : tensor<16x16xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x16xf32>
// SPMD-NOT: unrealized_conversion_cast
// SPMD: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0) -> (d0)>
#map5 = affine_map<(d0) -> ()>
#map6 = affine_map<(d0, d1) -> (d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map10 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d2)>
#map12 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map13 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])

func.func @split(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>) {
  %c5_i64 = arith.constant 5 : i64
  %c6_i64 = arith.constant 6 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 1.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_0 = arith.constant 0xFF800000 : f32
  %cst_1 = arith.constant 0.000000e+00 : f32
  %44 = tensor.empty() : tensor<4xi64>
  %45 = linalg.fill ins(%c0_i64 : i64) outs(%44 : tensor<4xi64>) -> tensor<4xi64>
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%45 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = arith.extui %143 : i1 to i64
    %145 = arith.addi %out, %144 : i64
    linalg.yield %145 : i64
  } -> tensor<4xi64>
  %47 = tensor.empty() : tensor<4xi32>
  %48 = linalg.fill ins(%c0_i32 : i32) outs(%47 : tensor<4xi32>) -> tensor<4xi32>
  %49 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%46 : tensor<4xi64>) outs(%48 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi ule, %142, %141 : index
    %144 = arith.trunci %in : i64 to i32
    %145 = arith.select %143, %144, %c0_i32 : i32
    %146 = arith.addi %out, %145 : i32
    linalg.yield %146 : i32
  } -> tensor<4xi32>
  %50 = tensor.empty() : tensor<16xi64>
  %51 = linalg.fill ins(%c0_i64 : i64) outs(%50 : tensor<16xi64>) -> tensor<16xi64>
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%51 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi slt, %in_3, %in : i64
    %144 = arith.cmpi eq, %in_3, %in : i64
    %145 = arith.cmpi ult, %142, %141 : index
    %146 = arith.andi %144, %145 : i1
    %147 = arith.ori %143, %146 : i1
    %148 = arith.extui %147 : i1 to i64
    %149 = arith.addi %out, %148 : i64
    linalg.yield %149 : i64
  } -> tensor<16xi64>
  %53 = tensor.empty() : tensor<16xi64>
  %54 = linalg.fill ins(%c0_i64 : i64) outs(%53 : tensor<16xi64>) -> tensor<16xi64>
  %55 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%52 : tensor<16xi64>) outs(%54 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 1 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<16xi64>
  %56 = tensor.empty() : tensor<16xi64>
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%56 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %141 : i64
  } -> tensor<16xi64>
  %58 = tensor.empty() : tensor<16xi1>
  %59 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%58 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %60 = tensor.empty() : tensor<16xi64>
  %61 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %59 : tensor<16xi64>, tensor<16xi1>) outs(%60 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%59 : tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<i64>
  %65 = linalg.fill ins(%c0_i64 : i64) outs(%64 : tensor<i64>) -> tensor<i64>
  %66 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%63 : tensor<16xi64>) outs(%65 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %67 = tensor.empty() : tensor<16x16xf32>
  %68 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<16xi64>) outs(%67 : tensor<16x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %x[%141, %142] : tensor<8x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x16xf32>
  %69 = tensor.empty() : tensor<16xi64>
  %70 = linalg.fill ins(%c0_i64 : i64) outs(%69 : tensor<16xi64>) -> tensor<16xi64>
  %71 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%70 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %72 = tensor.empty() : tensor<16x32xf32>
  %73 = linalg.fill ins(%cst_1 : f32) outs(%72 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %74 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg0, %71 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%73 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %75 = tensor.empty() : tensor<16x32xf32>
  %76 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%74 : tensor<16x32xf32>) outs(%75 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.negf %in : f32
    %142 = math.exp %141 : f32
    %143 = arith.addf %142, %cst : f32
    %144 = arith.divf %cst, %143 : f32
    linalg.yield %144 : f32
  } -> tensor<16x32xf32>
  %77 = tensor.empty() : tensor<16x32xf32>
  %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %76 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%77 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %79 = tensor.empty() : tensor<16xi64>
  %80 = linalg.fill ins(%c0_i64 : i64) outs(%79 : tensor<16xi64>) -> tensor<16xi64>
  %81 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%80 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %82 = tensor.empty() : tensor<16x32xf32>
  %83 = linalg.fill ins(%cst_1 : f32) outs(%82 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %84 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg1, %81 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%83 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %85 = tensor.empty() : tensor<16x32xf32>
  %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %84 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%85 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %87 = tensor.empty() : tensor<16xi64>
  %88 = linalg.fill ins(%c0_i64 : i64) outs(%87 : tensor<16xi64>) -> tensor<16xi64>
  %89 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%88 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %90 = tensor.empty() : tensor<16x16xf32>
  %91 = linalg.fill ins(%cst_1 : f32) outs(%90 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %92 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%86, %arg2, %89 : tensor<16x32xf32>, tensor<4x32x16xf32>, tensor<16xi64>) outs(%91 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x16xf32>
  %93 = tensor.empty() : tensor<16xi1>
  %94 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%93 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c16_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %95 = tensor.empty() : tensor<16xi64>
  %96 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%55, %94 : tensor<16xi64>, tensor<16xi1>) outs(%95 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %97 = tensor.empty() : tensor<16xi64>
  %98 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%94 : tensor<16xi1>) outs(%97 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %99 = tensor.empty() : tensor<i64>
  %100 = linalg.fill ins(%c0_i64 : i64) outs(%99 : tensor<i64>) -> tensor<i64>
  %101 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%98 : tensor<16xi64>) outs(%100 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %102 = tensor.empty() : tensor<16xf32>
  %103 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%96 : tensor<16xi64>) outs(%102 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%141] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %104 = tensor.empty() : tensor<16x16xf32>
  %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%92, %103 : tensor<16x16xf32>, tensor<16xf32>) outs(%104 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x16xf32>
  %106 = tensor.empty() : tensor<8x16xf32>
  %107 = linalg.fill ins(%cst_1 : f32) outs(%106 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %108 = tensor.empty() : tensor<16xi1>
  %109 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%108 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %110 = tensor.empty() : tensor<16xi64>
  %111 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %109 : tensor<16xi64>, tensor<16xi1>) outs(%110 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %112 = tensor.empty() : tensor<16xi64>
  %113 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%109 : tensor<16xi1>) outs(%112 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %114 = tensor.empty() : tensor<i64>
  %115 = linalg.fill ins(%c0_i64 : i64) outs(%114 : tensor<i64>) -> tensor<i64>
  %116 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%113 : tensor<16xi64>) outs(%115 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %117 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %105 : tensor<16xi64>, tensor<16x16xf32>) outs(%107 : tensor<8x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<8x16xf32>
  return %117, %66, %101, %116 : tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>
}

// -----

// Tests that with the tokens whole over ep (every rank routes every token)
// nothing is rewritten: shardx-ragged-experts' path.
// CHECK-LABEL: func.func @tokens_whole
// CHECK-NOT: ragged_all_to_all
// CHECK: return
// SPMD-LABEL: func.func @tokens_whole
// SPMD-NOT: ragged_all_to_all
// SPMD: return

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0) -> (d0)>
#map5 = affine_map<(d0) -> ()>
#map6 = affine_map<(d0, d1) -> (d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map10 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d2)>
#map12 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map13 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
func.func @tokens_whole(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>})
    -> (tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>) {
  %c5_i64 = arith.constant 5 : i64
  %c6_i64 = arith.constant 6 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 1.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_0 = arith.constant 0xFF800000 : f32
  %cst_1 = arith.constant 0.000000e+00 : f32
  %44 = tensor.empty() : tensor<4xi64>
  %45 = linalg.fill ins(%c0_i64 : i64) outs(%44 : tensor<4xi64>) -> tensor<4xi64>
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%45 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = arith.extui %143 : i1 to i64
    %145 = arith.addi %out, %144 : i64
    linalg.yield %145 : i64
  } -> tensor<4xi64>
  %47 = tensor.empty() : tensor<4xi32>
  %48 = linalg.fill ins(%c0_i32 : i32) outs(%47 : tensor<4xi32>) -> tensor<4xi32>
  %49 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%46 : tensor<4xi64>) outs(%48 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi ule, %142, %141 : index
    %144 = arith.trunci %in : i64 to i32
    %145 = arith.select %143, %144, %c0_i32 : i32
    %146 = arith.addi %out, %145 : i32
    linalg.yield %146 : i32
  } -> tensor<4xi32>
  %50 = tensor.empty() : tensor<16xi64>
  %51 = linalg.fill ins(%c0_i64 : i64) outs(%50 : tensor<16xi64>) -> tensor<16xi64>
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%51 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi slt, %in_3, %in : i64
    %144 = arith.cmpi eq, %in_3, %in : i64
    %145 = arith.cmpi ult, %142, %141 : index
    %146 = arith.andi %144, %145 : i1
    %147 = arith.ori %143, %146 : i1
    %148 = arith.extui %147 : i1 to i64
    %149 = arith.addi %out, %148 : i64
    linalg.yield %149 : i64
  } -> tensor<16xi64>
  %53 = tensor.empty() : tensor<16xi64>
  %54 = linalg.fill ins(%c0_i64 : i64) outs(%53 : tensor<16xi64>) -> tensor<16xi64>
  %55 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%52 : tensor<16xi64>) outs(%54 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 1 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<16xi64>
  %56 = tensor.empty() : tensor<16xi64>
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%56 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %141 : i64
  } -> tensor<16xi64>
  %58 = tensor.empty() : tensor<16xi1>
  %59 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%58 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %60 = tensor.empty() : tensor<16xi64>
  %61 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %59 : tensor<16xi64>, tensor<16xi1>) outs(%60 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%59 : tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<i64>
  %65 = linalg.fill ins(%c0_i64 : i64) outs(%64 : tensor<i64>) -> tensor<i64>
  %66 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%63 : tensor<16xi64>) outs(%65 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %67 = tensor.empty() : tensor<16x16xf32>
  %68 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<16xi64>) outs(%67 : tensor<16x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %x[%141, %142] : tensor<8x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x16xf32>
  %69 = tensor.empty() : tensor<16xi64>
  %70 = linalg.fill ins(%c0_i64 : i64) outs(%69 : tensor<16xi64>) -> tensor<16xi64>
  %71 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%70 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %72 = tensor.empty() : tensor<16x32xf32>
  %73 = linalg.fill ins(%cst_1 : f32) outs(%72 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %74 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg0, %71 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%73 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %75 = tensor.empty() : tensor<16x32xf32>
  %76 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%74 : tensor<16x32xf32>) outs(%75 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.negf %in : f32
    %142 = math.exp %141 : f32
    %143 = arith.addf %142, %cst : f32
    %144 = arith.divf %cst, %143 : f32
    linalg.yield %144 : f32
  } -> tensor<16x32xf32>
  %77 = tensor.empty() : tensor<16x32xf32>
  %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %76 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%77 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %79 = tensor.empty() : tensor<16xi64>
  %80 = linalg.fill ins(%c0_i64 : i64) outs(%79 : tensor<16xi64>) -> tensor<16xi64>
  %81 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%80 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %82 = tensor.empty() : tensor<16x32xf32>
  %83 = linalg.fill ins(%cst_1 : f32) outs(%82 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %84 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg1, %81 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%83 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %85 = tensor.empty() : tensor<16x32xf32>
  %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %84 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%85 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %87 = tensor.empty() : tensor<16xi64>
  %88 = linalg.fill ins(%c0_i64 : i64) outs(%87 : tensor<16xi64>) -> tensor<16xi64>
  %89 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%88 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %90 = tensor.empty() : tensor<16x16xf32>
  %91 = linalg.fill ins(%cst_1 : f32) outs(%90 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %92 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%86, %arg2, %89 : tensor<16x32xf32>, tensor<4x32x16xf32>, tensor<16xi64>) outs(%91 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x16xf32>
  %93 = tensor.empty() : tensor<16xi1>
  %94 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%93 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c16_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %95 = tensor.empty() : tensor<16xi64>
  %96 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%55, %94 : tensor<16xi64>, tensor<16xi1>) outs(%95 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %97 = tensor.empty() : tensor<16xi64>
  %98 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%94 : tensor<16xi1>) outs(%97 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %99 = tensor.empty() : tensor<i64>
  %100 = linalg.fill ins(%c0_i64 : i64) outs(%99 : tensor<i64>) -> tensor<i64>
  %101 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%98 : tensor<16xi64>) outs(%100 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %102 = tensor.empty() : tensor<16xf32>
  %103 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%96 : tensor<16xi64>) outs(%102 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%141] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %104 = tensor.empty() : tensor<16x16xf32>
  %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%92, %103 : tensor<16x16xf32>, tensor<16xf32>) outs(%104 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x16xf32>
  %106 = tensor.empty() : tensor<8x16xf32>
  %107 = linalg.fill ins(%cst_1 : f32) outs(%106 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %108 = tensor.empty() : tensor<16xi1>
  %109 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%108 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %110 = tensor.empty() : tensor<16xi64>
  %111 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %109 : tensor<16xi64>, tensor<16xi1>) outs(%110 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %112 = tensor.empty() : tensor<16xi64>
  %113 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%109 : tensor<16xi1>) outs(%112 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %114 = tensor.empty() : tensor<i64>
  %115 = linalg.fill ins(%c0_i64 : i64) outs(%114 : tensor<i64>) -> tensor<i64>
  %116 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%113 : tensor<16xi64>) outs(%115 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %117 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %105 : tensor<16xi64>, tensor<16x16xf32>) outs(%107 : tensor<8x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<8x16xf32>
  return %117, %66, %101, %116 : tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>
}

// -----

// Tests that with the experts' weights whole nothing is rewritten.
// CHECK-LABEL: func.func @experts_whole
// CHECK-NOT: ragged_all_to_all
// CHECK: return
// SPMD-LABEL: func.func @experts_whole
// SPMD-NOT: ragged_all_to_all
// SPMD: return

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0) -> (d0)>
#map5 = affine_map<(d0) -> ()>
#map6 = affine_map<(d0, d1) -> (d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map10 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d2)>
#map12 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map13 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
func.func @experts_whole(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>},
    %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>) {
  %c5_i64 = arith.constant 5 : i64
  %c6_i64 = arith.constant 6 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 1.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_0 = arith.constant 0xFF800000 : f32
  %cst_1 = arith.constant 0.000000e+00 : f32
  %44 = tensor.empty() : tensor<4xi64>
  %45 = linalg.fill ins(%c0_i64 : i64) outs(%44 : tensor<4xi64>) -> tensor<4xi64>
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%45 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = arith.extui %143 : i1 to i64
    %145 = arith.addi %out, %144 : i64
    linalg.yield %145 : i64
  } -> tensor<4xi64>
  %47 = tensor.empty() : tensor<4xi32>
  %48 = linalg.fill ins(%c0_i32 : i32) outs(%47 : tensor<4xi32>) -> tensor<4xi32>
  %49 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%46 : tensor<4xi64>) outs(%48 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi ule, %142, %141 : index
    %144 = arith.trunci %in : i64 to i32
    %145 = arith.select %143, %144, %c0_i32 : i32
    %146 = arith.addi %out, %145 : i32
    linalg.yield %146 : i32
  } -> tensor<4xi32>
  %50 = tensor.empty() : tensor<16xi64>
  %51 = linalg.fill ins(%c0_i64 : i64) outs(%50 : tensor<16xi64>) -> tensor<16xi64>
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%51 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi slt, %in_3, %in : i64
    %144 = arith.cmpi eq, %in_3, %in : i64
    %145 = arith.cmpi ult, %142, %141 : index
    %146 = arith.andi %144, %145 : i1
    %147 = arith.ori %143, %146 : i1
    %148 = arith.extui %147 : i1 to i64
    %149 = arith.addi %out, %148 : i64
    linalg.yield %149 : i64
  } -> tensor<16xi64>
  %53 = tensor.empty() : tensor<16xi64>
  %54 = linalg.fill ins(%c0_i64 : i64) outs(%53 : tensor<16xi64>) -> tensor<16xi64>
  %55 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%52 : tensor<16xi64>) outs(%54 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 1 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<16xi64>
  %56 = tensor.empty() : tensor<16xi64>
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%56 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %141 : i64
  } -> tensor<16xi64>
  %58 = tensor.empty() : tensor<16xi1>
  %59 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%58 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %60 = tensor.empty() : tensor<16xi64>
  %61 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %59 : tensor<16xi64>, tensor<16xi1>) outs(%60 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%59 : tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<i64>
  %65 = linalg.fill ins(%c0_i64 : i64) outs(%64 : tensor<i64>) -> tensor<i64>
  %66 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%63 : tensor<16xi64>) outs(%65 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %67 = tensor.empty() : tensor<16x16xf32>
  %68 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<16xi64>) outs(%67 : tensor<16x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %x[%141, %142] : tensor<8x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x16xf32>
  %69 = tensor.empty() : tensor<16xi64>
  %70 = linalg.fill ins(%c0_i64 : i64) outs(%69 : tensor<16xi64>) -> tensor<16xi64>
  %71 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%70 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %72 = tensor.empty() : tensor<16x32xf32>
  %73 = linalg.fill ins(%cst_1 : f32) outs(%72 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %74 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg0, %71 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%73 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %75 = tensor.empty() : tensor<16x32xf32>
  %76 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%74 : tensor<16x32xf32>) outs(%75 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.negf %in : f32
    %142 = math.exp %141 : f32
    %143 = arith.addf %142, %cst : f32
    %144 = arith.divf %cst, %143 : f32
    linalg.yield %144 : f32
  } -> tensor<16x32xf32>
  %77 = tensor.empty() : tensor<16x32xf32>
  %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %76 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%77 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %79 = tensor.empty() : tensor<16xi64>
  %80 = linalg.fill ins(%c0_i64 : i64) outs(%79 : tensor<16xi64>) -> tensor<16xi64>
  %81 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%80 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %82 = tensor.empty() : tensor<16x32xf32>
  %83 = linalg.fill ins(%cst_1 : f32) outs(%82 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %84 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg1, %81 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%83 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %85 = tensor.empty() : tensor<16x32xf32>
  %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %84 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%85 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %87 = tensor.empty() : tensor<16xi64>
  %88 = linalg.fill ins(%c0_i64 : i64) outs(%87 : tensor<16xi64>) -> tensor<16xi64>
  %89 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%88 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %90 = tensor.empty() : tensor<16x16xf32>
  %91 = linalg.fill ins(%cst_1 : f32) outs(%90 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %92 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%86, %arg2, %89 : tensor<16x32xf32>, tensor<4x32x16xf32>, tensor<16xi64>) outs(%91 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x16xf32>
  %93 = tensor.empty() : tensor<16xi1>
  %94 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%93 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c16_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %95 = tensor.empty() : tensor<16xi64>
  %96 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%55, %94 : tensor<16xi64>, tensor<16xi1>) outs(%95 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %97 = tensor.empty() : tensor<16xi64>
  %98 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%94 : tensor<16xi1>) outs(%97 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %99 = tensor.empty() : tensor<i64>
  %100 = linalg.fill ins(%c0_i64 : i64) outs(%99 : tensor<i64>) -> tensor<i64>
  %101 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%98 : tensor<16xi64>) outs(%100 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %102 = tensor.empty() : tensor<16xf32>
  %103 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%96 : tensor<16xi64>) outs(%102 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%141] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %104 = tensor.empty() : tensor<16x16xf32>
  %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%92, %103 : tensor<16x16xf32>, tensor<16xf32>) outs(%104 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x16xf32>
  %106 = tensor.empty() : tensor<8x16xf32>
  %107 = linalg.fill ins(%cst_1 : f32) outs(%106 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %108 = tensor.empty() : tensor<16xi1>
  %109 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%108 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %110 = tensor.empty() : tensor<16xi64>
  %111 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %109 : tensor<16xi64>, tensor<16xi1>) outs(%110 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %112 = tensor.empty() : tensor<16xi64>
  %113 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%109 : tensor<16xi1>) outs(%112 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %114 = tensor.empty() : tensor<i64>
  %115 = linalg.fill ins(%c0_i64 : i64) outs(%114 : tensor<i64>) -> tensor<i64>
  %116 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%113 : tensor<16xi64>) outs(%115 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %117 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %105 : tensor<16xi64>, tensor<16x16xf32>) outs(%107 : tensor<8x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<8x16xf32>
  return %117, %66, %101, %116 : tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>
}

// -----

// Tests that where the experts' rows are read by something else (returned
// here; a train step's backward reads them) nothing is rewritten.
// CHECK-LABEL: func.func @rows_read_elsewhere
// CHECK-NOT: ragged_all_to_all
// CHECK: return
// SPMD-LABEL: func.func @rows_read_elsewhere
// SPMD-NOT: ragged_all_to_all
// SPMD: return

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0) -> (d0)>
#map5 = affine_map<(d0) -> ()>
#map6 = affine_map<(d0, d1) -> (d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map10 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d2)>
#map12 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map13 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
func.func @rows_read_elsewhere(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<16x16xf32>) {
  %c5_i64 = arith.constant 5 : i64
  %c6_i64 = arith.constant 6 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 1.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_0 = arith.constant 0xFF800000 : f32
  %cst_1 = arith.constant 0.000000e+00 : f32
  %44 = tensor.empty() : tensor<4xi64>
  %45 = linalg.fill ins(%c0_i64 : i64) outs(%44 : tensor<4xi64>) -> tensor<4xi64>
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%45 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = arith.extui %143 : i1 to i64
    %145 = arith.addi %out, %144 : i64
    linalg.yield %145 : i64
  } -> tensor<4xi64>
  %47 = tensor.empty() : tensor<4xi32>
  %48 = linalg.fill ins(%c0_i32 : i32) outs(%47 : tensor<4xi32>) -> tensor<4xi32>
  %49 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%46 : tensor<4xi64>) outs(%48 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi ule, %142, %141 : index
    %144 = arith.trunci %in : i64 to i32
    %145 = arith.select %143, %144, %c0_i32 : i32
    %146 = arith.addi %out, %145 : i32
    linalg.yield %146 : i32
  } -> tensor<4xi32>
  %50 = tensor.empty() : tensor<16xi64>
  %51 = linalg.fill ins(%c0_i64 : i64) outs(%50 : tensor<16xi64>) -> tensor<16xi64>
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%51 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi slt, %in_3, %in : i64
    %144 = arith.cmpi eq, %in_3, %in : i64
    %145 = arith.cmpi ult, %142, %141 : index
    %146 = arith.andi %144, %145 : i1
    %147 = arith.ori %143, %146 : i1
    %148 = arith.extui %147 : i1 to i64
    %149 = arith.addi %out, %148 : i64
    linalg.yield %149 : i64
  } -> tensor<16xi64>
  %53 = tensor.empty() : tensor<16xi64>
  %54 = linalg.fill ins(%c0_i64 : i64) outs(%53 : tensor<16xi64>) -> tensor<16xi64>
  %55 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%52 : tensor<16xi64>) outs(%54 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 1 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<16xi64>
  %56 = tensor.empty() : tensor<16xi64>
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%56 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %141 : i64
  } -> tensor<16xi64>
  %58 = tensor.empty() : tensor<16xi1>
  %59 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%58 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %60 = tensor.empty() : tensor<16xi64>
  %61 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %59 : tensor<16xi64>, tensor<16xi1>) outs(%60 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%59 : tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<i64>
  %65 = linalg.fill ins(%c0_i64 : i64) outs(%64 : tensor<i64>) -> tensor<i64>
  %66 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%63 : tensor<16xi64>) outs(%65 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %67 = tensor.empty() : tensor<16x16xf32>
  %68 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<16xi64>) outs(%67 : tensor<16x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %x[%141, %142] : tensor<8x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x16xf32>
  %69 = tensor.empty() : tensor<16xi64>
  %70 = linalg.fill ins(%c0_i64 : i64) outs(%69 : tensor<16xi64>) -> tensor<16xi64>
  %71 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%70 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %72 = tensor.empty() : tensor<16x32xf32>
  %73 = linalg.fill ins(%cst_1 : f32) outs(%72 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %74 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg0, %71 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%73 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %75 = tensor.empty() : tensor<16x32xf32>
  %76 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%74 : tensor<16x32xf32>) outs(%75 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.negf %in : f32
    %142 = math.exp %141 : f32
    %143 = arith.addf %142, %cst : f32
    %144 = arith.divf %cst, %143 : f32
    linalg.yield %144 : f32
  } -> tensor<16x32xf32>
  %77 = tensor.empty() : tensor<16x32xf32>
  %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %76 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%77 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %79 = tensor.empty() : tensor<16xi64>
  %80 = linalg.fill ins(%c0_i64 : i64) outs(%79 : tensor<16xi64>) -> tensor<16xi64>
  %81 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%80 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %82 = tensor.empty() : tensor<16x32xf32>
  %83 = linalg.fill ins(%cst_1 : f32) outs(%82 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %84 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %arg1, %81 : tensor<16x16xf32>, tensor<4x16x32xf32>, tensor<16xi64>) outs(%83 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x32xf32>
  %85 = tensor.empty() : tensor<16x32xf32>
  %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %84 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%85 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x32xf32>
  %87 = tensor.empty() : tensor<16xi64>
  %88 = linalg.fill ins(%c0_i64 : i64) outs(%87 : tensor<16xi64>) -> tensor<16xi64>
  %89 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%88 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<16xi64>
  %90 = tensor.empty() : tensor<16x16xf32>
  %91 = linalg.fill ins(%cst_1 : f32) outs(%90 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %92 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%86, %arg2, %89 : tensor<16x32xf32>, tensor<4x32x16xf32>, tensor<16xi64>) outs(%91 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<16x16xf32>
  %93 = tensor.empty() : tensor<16xi1>
  %94 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<16xi64>) outs(%93 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c16_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %95 = tensor.empty() : tensor<16xi64>
  %96 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%55, %94 : tensor<16xi64>, tensor<16xi1>) outs(%95 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c16_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %97 = tensor.empty() : tensor<16xi64>
  %98 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%94 : tensor<16xi1>) outs(%97 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %99 = tensor.empty() : tensor<i64>
  %100 = linalg.fill ins(%c0_i64 : i64) outs(%99 : tensor<i64>) -> tensor<i64>
  %101 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%98 : tensor<16xi64>) outs(%100 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %102 = tensor.empty() : tensor<16xf32>
  %103 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%96 : tensor<16xi64>) outs(%102 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%141] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %104 = tensor.empty() : tensor<16x16xf32>
  %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%92, %103 : tensor<16x16xf32>, tensor<16xf32>) outs(%104 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<16x16xf32>
  %106 = tensor.empty() : tensor<8x16xf32>
  %107 = linalg.fill ins(%cst_1 : f32) outs(%106 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %108 = tensor.empty() : tensor<16xi1>
  %109 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<16xi64>) outs(%108 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c8_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<16xi1>
  %110 = tensor.empty() : tensor<16xi64>
  %111 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %109 : tensor<16xi64>, tensor<16xi1>) outs(%110 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c8_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<16xi64>
  %112 = tensor.empty() : tensor<16xi64>
  %113 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%109 : tensor<16xi1>) outs(%112 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<16xi64>
  %114 = tensor.empty() : tensor<i64>
  %115 = linalg.fill ins(%c0_i64 : i64) outs(%114 : tensor<i64>) -> tensor<i64>
  %116 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%113 : tensor<16xi64>) outs(%115 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %117 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %105 : tensor<16xi64>, tensor<16x16xf32>) outs(%107 : tensor<8x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<8x16xf32>
  return %117, %66, %101, %116, %92 : tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<16x16xf32>
}
