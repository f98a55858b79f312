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
// CHECK: unrealized_conversion_cast %[[FLAT]] : tensor<16xi64> to tensor<8xi64> {shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: %[[PER_EXPERT:.+]] = shardx.all_to_all %{{.+}} on @mesh axes = [0] split_dim = 0 concat_dim = 0 {shardx.ragged_dispatch} : tensor<4xi64> -> tensor<4xi64>
// CHECK: unrealized_conversion_cast %[[X]] : tensor<8x16xf32> to tensor<4x16xf32> {shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: %[[ROWS:.+]] = shardx.ragged_all_to_all %{{.+}}, %[[SEND:.+]] recv_counts = %[[RECV:.+]] on @mesh axes = [0] {shardx.ragged_dispatch} : tensor<8x16xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<16x16xf32>
// CHECK: unrealized_conversion_cast %[[W1]] : tensor<4x16x32xf32> to tensor<2x16x32xf32>
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

// Tests that where the experts' rows are read by something else than the
// rows' ops (returned here) nothing is rewritten.
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

// -----

// A train step of one expert layer (8 tokens, dim 8, 4 experts of one
// grouped matmul, top-2: 16 routed rows), traced by the importer from
// torch.autograd.grad of the forward above given the output's gradient
// %gout, after shardx-canonicalize: the forward, then the output
// gradient's rows gathered by token, times the gates (the experts' output
// gradient dY) and times the experts' outputs summed per row (the gates'
// gradient, added back by item), the weights' gradient a Weights grouped
// matmul of the gathered rows and dY, the rows' gradient a Rows grouped
// matmul of dY and the transposed weights, added back by token (x's
// gradient). Results: out, dW, dx, dgates, the range checks.

// Tests that the backward is rewritten with its forward: four ragged
// all-to-alls each given its receive counts (the tokens' rows out, the
// experts' outputs back, the output gradient's rows out as the forward's
// tokens, the rows' gradients back as the forward's outputs), the gates'
// and x's gradients recorded in the items' and tokens' split, the
// weights' gradient in the weights' layout; no all-gather.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x8x8xf32>
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<8x8xf32>
// CHECK-SAME: %[[FLAT:[a-z0-9]+]]: tensor<16xi64>
// CHECK-SAME: %[[GATES:[a-z0-9]+]]: tensor<16xf32>
// CHECK-SAME: %[[GOUT:[a-z0-9]+]]: tensor<8x8xf32>
// CHECK: unrealized_conversion_cast %[[FLAT]] : tensor<16xi64> to tensor<8xi64>
// CHECK: shardx.all_to_all
// CHECK: unrealized_conversion_cast %[[X]] : tensor<8x8xf32> to tensor<4x8xf32>
// CHECK: shardx.ragged_all_to_all %{{.+}}, %[[SEND:.+]] recv_counts = %[[RECV:.+]] on @mesh axes = [0] {shardx.ragged_dispatch} : tensor<8x8xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<16x8xf32>
// CHECK: unrealized_conversion_cast %[[W]] : tensor<4x8x8xf32> to tensor<2x8x8xf32>
// CHECK: unrealized_conversion_cast %[[GATES]] : tensor<16xf32> to tensor<8xf32>
// CHECK: shardx.ragged_all_to_all %{{.+}}, %[[RECV]] recv_counts = %[[SEND]] {{.*}} -> tensor<8x8xf32>
// CHECK: %[[OUT:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<4x8xf32> to tensor<8x8xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: unrealized_conversion_cast %[[GOUT]] : tensor<8x8xf32> to tensor<4x8xf32>
// CHECK: %[[DGATES:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<8xf32> to tensor<16xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: shardx.ragged_all_to_all %{{.+}}, %[[SEND]] recv_counts = %[[RECV]] {{.*}} -> tensor<16x8xf32>
// CHECK: %[[DW:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<2x8x8xf32> to tensor<4x8x8xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: shardx.ragged_all_to_all %{{.+}}, %[[RECV]] recv_counts = %[[SEND]] {{.*}} -> tensor<8x8xf32>
// CHECK: %[[DX:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<4x8xf32> to tensor<8x8xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: return %[[OUT]], %[[DW]], %[[DX]], %[[DGATES]], %{{.+}} :
// SPMD-LABEL: func.func @train_step
// SPMD-NOT: shardx.all_gather
// SPMD-COUNT-4: shardx.ragged_all_to_all
// SPMD-NOT: shardx.all_gather
// SPMD: return
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map9 = affine_map<(d0, d1, d2) -> (d2)>
#map10 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map12 = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#map13 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map14 = affine_map<(d0, d1, d2, d3) -> (d3)>
#map15 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map16 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
func.func @train_step(%w: tensor<4x8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %x: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %gout: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> (tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<i64> {shardx.index_checks = [{exception = "RuntimeError", message = "bincount only supports 1-d non-negative integral inputs."}, {exception = "RuntimeError", message = "bincount: a value >= minlength 4 (eager returns a longer result; the compiled program's length is fixed: pass a larger minlength)"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of range in self"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}], shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %c9_i64 = arith.constant 9 : i64
  %c7_i64 = arith.constant 7 : i64
  %c6_i64 = arith.constant 6 : i64
  %c5_i64 = arith.constant 5 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 0.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %0 = tensor.empty() : tensor<16xi1>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%0 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %2 = tensor.empty() : tensor<16xi64>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%1 : tensor<16xi1>) outs(%2 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %4 = tensor.empty() : tensor<i64>
  %5 = linalg.fill ins(%c0_i64 : i64) outs(%4 : tensor<i64>) -> tensor<i64>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%3 : tensor<16xi64>) outs(%5 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %7 = tensor.empty() : tensor<16xi1>
  %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%7 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c4_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %9 = tensor.empty() : tensor<16xi64>
  %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%8 : tensor<16xi1>) outs(%9 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %11 = tensor.empty() : tensor<i64>
  %12 = linalg.fill ins(%c0_i64 : i64) outs(%11 : tensor<i64>) -> tensor<i64>
  %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%10 : tensor<16xi64>) outs(%12 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %14 = tensor.empty() : tensor<4xi64>
  %15 = linalg.fill ins(%c0_i64 : i64) outs(%14 : tensor<4xi64>) -> tensor<4xi64>
  %16 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%15 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = arith.extui %163 : i1 to i64
    %165 = arith.addi %out, %164 : i64
    linalg.yield %165 : i64
  } -> tensor<4xi64>
  %17 = tensor.empty() : tensor<4xi32>
  %18 = linalg.fill ins(%c0_i32 : i32) outs(%17 : tensor<4xi32>) -> tensor<4xi32>
  %19 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%16 : tensor<4xi64>) outs(%18 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi ule, %162, %161 : index
    %164 = arith.trunci %in : i64 to i32
    %165 = arith.select %163, %164, %c0_i32 : i32
    %166 = arith.addi %out, %165 : i32
    linalg.yield %166 : i32
  } -> tensor<4xi32>
  %20 = tensor.empty() : tensor<16xi64>
  %21 = linalg.fill ins(%c0_i64 : i64) outs(%20 : tensor<16xi64>) -> tensor<16xi64>
  %22 = linalg.generic {indexing_maps = [#map3, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%21 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi slt, %in_1, %in : i64
    %164 = arith.cmpi eq, %in_1, %in : i64
    %165 = arith.cmpi ult, %162, %161 : index
    %166 = arith.andi %164, %165 : i1
    %167 = arith.ori %163, %166 : i1
    %168 = arith.extui %167 : i1 to i64
    %169 = arith.addi %out, %168 : i64
    linalg.yield %169 : i64
  } -> tensor<16xi64>
  %23 = tensor.empty() : tensor<16xi64>
  %24 = linalg.fill ins(%c0_i64 : i64) outs(%23 : tensor<16xi64>) -> tensor<16xi64>
  %25 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%22 : tensor<16xi64>) outs(%24 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = linalg.index 1 : index
    %165 = arith.index_cast %164 : index to i64
    %166 = arith.select %163, %165, %c0_i64 : i64
    %167 = arith.addi %out, %166 : i64
    linalg.yield %167 : i64
  } -> tensor<16xi64>
  %26 = tensor.empty() : tensor<16xi64>
  %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%26 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %28 = tensor.empty() : tensor<16xi1>
  %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%28 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %30 = tensor.empty() : tensor<16xi64>
  %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %29 : tensor<16xi64>, tensor<16xi1>) outs(%30 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %32 = tensor.empty() : tensor<16xi64>
  %33 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%29 : tensor<16xi1>) outs(%32 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %34 = tensor.empty() : tensor<i64>
  %35 = linalg.fill ins(%c0_i64 : i64) outs(%34 : tensor<i64>) -> tensor<i64>
  %36 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%33 : tensor<16xi64>) outs(%35 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %37 = tensor.empty() : tensor<16x8xf32>
  %38 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%31 : tensor<16xi64>) outs(%37 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %x[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %39 = tensor.empty() : tensor<16xi64>
  %40 = linalg.fill ins(%c0_i64 : i64) outs(%39 : tensor<16xi64>) -> tensor<16xi64>
  %41 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%40 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %42 = tensor.empty() : tensor<16x8xf32>
  %43 = linalg.fill ins(%cst : f32) outs(%42 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %44 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%38, %w, %41 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%43 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %45 = tensor.empty() : tensor<16xi1>
  %46 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%45 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %47 = tensor.empty() : tensor<16xi64>
  %48 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %46 : tensor<16xi64>, tensor<16xi1>) outs(%47 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %49 = tensor.empty() : tensor<16xi64>
  %50 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%46 : tensor<16xi1>) outs(%49 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %51 = tensor.empty() : tensor<i64>
  %52 = linalg.fill ins(%c0_i64 : i64) outs(%51 : tensor<i64>) -> tensor<i64>
  %53 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%50 : tensor<16xi64>) outs(%52 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %54 = tensor.empty() : tensor<16xf32>
  %55 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%48 : tensor<16xi64>) outs(%54 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%161] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %56 = tensor.empty() : tensor<16x8xf32>
  %57 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%44, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%56 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %58 = tensor.empty() : tensor<8x8xf32>
  %59 = linalg.fill ins(%cst : f32) outs(%58 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %60 = tensor.empty() : tensor<16xi1>
  %61 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%60 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %61 : tensor<16xi64>, tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<16xi64>
  %65 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%61 : tensor<16xi1>) outs(%64 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %66 = tensor.empty() : tensor<i64>
  %67 = linalg.fill ins(%c0_i64 : i64) outs(%66 : tensor<i64>) -> tensor<i64>
  %68 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%65 : tensor<16xi64>) outs(%67 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %69 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%63, %57 : tensor<16xi64>, tensor<16x8xf32>) outs(%59 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %70 = tensor.empty() : tensor<16xi1>
  %71 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%70 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    %162 = arith.cmpi slt, %in, %c8_i64 : i64
    %163 = arith.andi %161, %162 : i1
    linalg.yield %163 : i1
  } -> tensor<16xi1>
  %72 = tensor.empty() : tensor<16xi64>
  %73 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %71 : tensor<16xi64>, tensor<16xi1>) outs(%72 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.select %in_1, %in, %c0_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %74 = tensor.empty() : tensor<16xi64>
  %75 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%71 : tensor<16xi1>) outs(%74 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %76 = tensor.empty() : tensor<i64>
  %77 = linalg.fill ins(%c0_i64 : i64) outs(%76 : tensor<i64>) -> tensor<i64>
  %78 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%75 : tensor<16xi64>) outs(%77 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %79 = tensor.empty() : tensor<16x8xf32>
  %80 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%73 : tensor<16xi64>) outs(%79 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %gout[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %81 = tensor.empty() : tensor<16x8xf32>
  %82 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %44 : tensor<16x8xf32>, tensor<16x8xf32>) outs(%81 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %83 = tensor.empty() : tensor<16x8xf32>
  %84 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%83 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %85 = tensor.empty() : tensor<16xf32>
  %86 = linalg.fill ins(%cst : f32) outs(%85 : tensor<16xf32>) -> tensor<16xf32>
  %87 = linalg.generic {indexing_maps = [#map4, #map3], iterator_types = ["parallel", "reduction"]} ins(%82 : tensor<16x8xf32>) outs(%86 : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %161 = arith.addf %in, %out : f32
    linalg.yield %161 : f32
  } -> tensor<16xf32>
  %88 = tensor.empty() : tensor<16xf32>
  %89 = linalg.fill ins(%cst : f32) outs(%88 : tensor<16xf32>) -> tensor<16xf32>
  %90 = tensor.empty() : tensor<16xi1>
  %91 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%90 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %92 = tensor.empty() : tensor<16xi64>
  %93 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %91 : tensor<16xi64>, tensor<16xi1>) outs(%92 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %94 = tensor.empty() : tensor<16xi64>
  %95 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%91 : tensor<16xi1>) outs(%94 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %96 = tensor.empty() : tensor<i64>
  %97 = linalg.fill ins(%c0_i64 : i64) outs(%96 : tensor<i64>) -> tensor<i64>
  %98 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%95 : tensor<16xi64>) outs(%97 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %99 = linalg.generic {indexing_maps = [#map2, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%93, %87 : tensor<16xi64>, tensor<16xf32>) outs(%89 : tensor<16xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<16xf32>
  %100 = tensor.empty() : tensor<8x16xf32>
  %transposed = linalg.transpose ins(%38 : tensor<16x8xf32>) outs(%100 : tensor<8x16xf32>) permutation = [1, 0] 
  %101 = tensor.empty() : tensor<16xi64>
  %102 = linalg.fill ins(%c0_i64 : i64) outs(%101 : tensor<16xi64>) -> tensor<16xi64>
  %103 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%102 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %104 = tensor.empty() : tensor<4x8x8xf32>
  %105 = linalg.fill ins(%cst : f32) outs(%104 : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %106 = linalg.generic {indexing_maps = [#map12, #map13, #map14, #map15], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%transposed, %84, %103 : tensor<8x16xf32>, tensor<16x8xf32>, tensor<16xi64>) outs(%105 : tensor<4x8x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<4x8x8xf32>
  %107 = tensor.empty() : tensor<4x8x8xf32>
  %transposed_0 = linalg.transpose ins(%w : tensor<4x8x8xf32>) outs(%107 : tensor<4x8x8xf32>) permutation = [0, 2, 1] 
  %108 = tensor.empty() : tensor<16xi64>
  %109 = linalg.fill ins(%c0_i64 : i64) outs(%108 : tensor<16xi64>) -> tensor<16xi64>
  %110 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%109 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %111 = tensor.empty() : tensor<16x8xf32>
  %112 = linalg.fill ins(%cst : f32) outs(%111 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %113 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%84, %transposed_0, %110 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%112 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %114 = tensor.empty() : tensor<8x8xf32>
  %115 = linalg.fill ins(%cst : f32) outs(%114 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %116 = tensor.empty() : tensor<16xi1>
  %117 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%116 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %118 = tensor.empty() : tensor<16xi64>
  %119 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %117 : tensor<16xi64>, tensor<16xi1>) outs(%118 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %120 = tensor.empty() : tensor<16xi64>
  %121 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%117 : tensor<16xi1>) outs(%120 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %122 = tensor.empty() : tensor<i64>
  %123 = linalg.fill ins(%c0_i64 : i64) outs(%122 : tensor<i64>) -> tensor<i64>
  %124 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%121 : tensor<16xi64>) outs(%123 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %125 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%119, %113 : tensor<16xi64>, tensor<16x8xf32>) outs(%115 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %126 = tensor.empty() : tensor<8xi64>
  %127 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%6 : tensor<i64>) outs(%126 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c0_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %128 = tensor.empty() : tensor<8xi64>
  %129 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%13 : tensor<i64>) outs(%128 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c1_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %130 = tensor.empty() : tensor<8xi64>
  %131 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%127, %129 : tensor<8xi64>, tensor<8xi64>) outs(%130 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %132 = tensor.empty() : tensor<8xi64>
  %133 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%36 : tensor<i64>) outs(%132 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c2_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %134 = tensor.empty() : tensor<8xi64>
  %135 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%131, %133 : tensor<8xi64>, tensor<8xi64>) outs(%134 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %136 = tensor.empty() : tensor<8xi64>
  %137 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%53 : tensor<i64>) outs(%136 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c3_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %138 = tensor.empty() : tensor<8xi64>
  %139 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%135, %137 : tensor<8xi64>, tensor<8xi64>) outs(%138 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %140 = tensor.empty() : tensor<8xi64>
  %141 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%68 : tensor<i64>) outs(%140 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c4_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %142 = tensor.empty() : tensor<8xi64>
  %143 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%139, %141 : tensor<8xi64>, tensor<8xi64>) outs(%142 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %144 = tensor.empty() : tensor<8xi64>
  %145 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%78 : tensor<i64>) outs(%144 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c5_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %146 = tensor.empty() : tensor<8xi64>
  %147 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%143, %145 : tensor<8xi64>, tensor<8xi64>) outs(%146 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %148 = tensor.empty() : tensor<8xi64>
  %149 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%98 : tensor<i64>) outs(%148 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c6_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %150 = tensor.empty() : tensor<8xi64>
  %151 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%147, %149 : tensor<8xi64>, tensor<8xi64>) outs(%150 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %152 = tensor.empty() : tensor<8xi64>
  %153 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%124 : tensor<i64>) outs(%152 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c7_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %154 = tensor.empty() : tensor<8xi64>
  %155 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%151, %153 : tensor<8xi64>, tensor<8xi64>) outs(%154 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %156 = tensor.empty() : tensor<i64>
  %157 = linalg.fill ins(%c9_i64 : i64) outs(%156 : tensor<i64>) -> tensor<i64>
  %158 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%155 : tensor<8xi64>) outs(%157 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.addi %162, %c1_i64 : i64
    %164 = arith.cmpi sgt, %in, %c0_i64 : i64
    %165 = arith.select %164, %163, %c9_i64 : i64
    %166 = arith.minsi %165, %out : i64
    linalg.yield %166 : i64
  } -> tensor<i64>
  %159 = tensor.empty() : tensor<i64>
  %160 = linalg.generic {indexing_maps = [#map16, #map16], iterator_types = []} ins(%158 : tensor<i64>) outs(%159 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.cmpi sgt, %in, %c8_i64 : i64
    %162 = arith.select %161, %c0_i64, %in : i64
    linalg.yield %162 : i64
  } -> tensor<i64>
  return %69, %106, %125, %99, %160 : tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<i64>
}

// -----

// Tests that on a 2x2 dp x ep mesh, the tokens split over both axes and
// the experts over ep, the weights' gradient (this dp rank's tokens'
// rows) is recorded as a partial sum over dp (the data-parallel
// all-reduce follows), and the four exchanges run over ep.
// CHECK-LABEL: func.func @train_step_dp
// CHECK: %[[DW:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<2x8x8xf32> to tensor<4x8x8xf32> {shardx.layouts = [#shardx.layout<@mesh, [P(sum), S(0)]>]}
// CHECK: return %{{.+}}, %[[DW]],
// SPMD-LABEL: func.func @train_step_dp
// SPMD-NOT: shardx.all_gather
// SPMD-COUNT-3: shardx.ragged_all_to_all {{.*}} on @mesh axes = [1]
// SPMD: shardx.all_reduce %{{.+}} on @mesh axes = [0] reduction = sum : tensor<2x8x8xf32>
// SPMD: shardx.ragged_all_to_all {{.*}} on @mesh axes = [1]
// SPMD-NOT: shardx.all_gather
// SPMD: return
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map9 = affine_map<(d0, d1, d2) -> (d2)>
#map10 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map12 = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#map13 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map14 = affine_map<(d0, d1, d2, d3) -> (d3)>
#map15 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map16 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "ep"])
func.func @train_step_dp(%w: tensor<4x8x8xf32> {shardx.layout = #shardx.layout<@mesh, [R, S(0)]>}, %x: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}, %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}, %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}, %gout: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}) -> (tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<i64> {shardx.index_checks = [{exception = "RuntimeError", message = "bincount only supports 1-d non-negative integral inputs."}, {exception = "RuntimeError", message = "bincount: a value >= minlength 4 (eager returns a longer result; the compiled program's length is fixed: pass a larger minlength)"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of range in self"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}], shardx.layout = #shardx.layout<@mesh, [R, R]>}) {
  %c9_i64 = arith.constant 9 : i64
  %c7_i64 = arith.constant 7 : i64
  %c6_i64 = arith.constant 6 : i64
  %c5_i64 = arith.constant 5 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 0.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %0 = tensor.empty() : tensor<16xi1>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%0 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %2 = tensor.empty() : tensor<16xi64>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%1 : tensor<16xi1>) outs(%2 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %4 = tensor.empty() : tensor<i64>
  %5 = linalg.fill ins(%c0_i64 : i64) outs(%4 : tensor<i64>) -> tensor<i64>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%3 : tensor<16xi64>) outs(%5 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %7 = tensor.empty() : tensor<16xi1>
  %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%7 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c4_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %9 = tensor.empty() : tensor<16xi64>
  %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%8 : tensor<16xi1>) outs(%9 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %11 = tensor.empty() : tensor<i64>
  %12 = linalg.fill ins(%c0_i64 : i64) outs(%11 : tensor<i64>) -> tensor<i64>
  %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%10 : tensor<16xi64>) outs(%12 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %14 = tensor.empty() : tensor<4xi64>
  %15 = linalg.fill ins(%c0_i64 : i64) outs(%14 : tensor<4xi64>) -> tensor<4xi64>
  %16 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%15 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = arith.extui %163 : i1 to i64
    %165 = arith.addi %out, %164 : i64
    linalg.yield %165 : i64
  } -> tensor<4xi64>
  %17 = tensor.empty() : tensor<4xi32>
  %18 = linalg.fill ins(%c0_i32 : i32) outs(%17 : tensor<4xi32>) -> tensor<4xi32>
  %19 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%16 : tensor<4xi64>) outs(%18 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi ule, %162, %161 : index
    %164 = arith.trunci %in : i64 to i32
    %165 = arith.select %163, %164, %c0_i32 : i32
    %166 = arith.addi %out, %165 : i32
    linalg.yield %166 : i32
  } -> tensor<4xi32>
  %20 = tensor.empty() : tensor<16xi64>
  %21 = linalg.fill ins(%c0_i64 : i64) outs(%20 : tensor<16xi64>) -> tensor<16xi64>
  %22 = linalg.generic {indexing_maps = [#map3, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%21 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi slt, %in_1, %in : i64
    %164 = arith.cmpi eq, %in_1, %in : i64
    %165 = arith.cmpi ult, %162, %161 : index
    %166 = arith.andi %164, %165 : i1
    %167 = arith.ori %163, %166 : i1
    %168 = arith.extui %167 : i1 to i64
    %169 = arith.addi %out, %168 : i64
    linalg.yield %169 : i64
  } -> tensor<16xi64>
  %23 = tensor.empty() : tensor<16xi64>
  %24 = linalg.fill ins(%c0_i64 : i64) outs(%23 : tensor<16xi64>) -> tensor<16xi64>
  %25 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%22 : tensor<16xi64>) outs(%24 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = linalg.index 1 : index
    %165 = arith.index_cast %164 : index to i64
    %166 = arith.select %163, %165, %c0_i64 : i64
    %167 = arith.addi %out, %166 : i64
    linalg.yield %167 : i64
  } -> tensor<16xi64>
  %26 = tensor.empty() : tensor<16xi64>
  %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%26 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %28 = tensor.empty() : tensor<16xi1>
  %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%28 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %30 = tensor.empty() : tensor<16xi64>
  %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %29 : tensor<16xi64>, tensor<16xi1>) outs(%30 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %32 = tensor.empty() : tensor<16xi64>
  %33 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%29 : tensor<16xi1>) outs(%32 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %34 = tensor.empty() : tensor<i64>
  %35 = linalg.fill ins(%c0_i64 : i64) outs(%34 : tensor<i64>) -> tensor<i64>
  %36 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%33 : tensor<16xi64>) outs(%35 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %37 = tensor.empty() : tensor<16x8xf32>
  %38 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%31 : tensor<16xi64>) outs(%37 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %x[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %39 = tensor.empty() : tensor<16xi64>
  %40 = linalg.fill ins(%c0_i64 : i64) outs(%39 : tensor<16xi64>) -> tensor<16xi64>
  %41 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%40 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %42 = tensor.empty() : tensor<16x8xf32>
  %43 = linalg.fill ins(%cst : f32) outs(%42 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %44 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%38, %w, %41 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%43 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %45 = tensor.empty() : tensor<16xi1>
  %46 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%45 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %47 = tensor.empty() : tensor<16xi64>
  %48 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %46 : tensor<16xi64>, tensor<16xi1>) outs(%47 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %49 = tensor.empty() : tensor<16xi64>
  %50 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%46 : tensor<16xi1>) outs(%49 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %51 = tensor.empty() : tensor<i64>
  %52 = linalg.fill ins(%c0_i64 : i64) outs(%51 : tensor<i64>) -> tensor<i64>
  %53 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%50 : tensor<16xi64>) outs(%52 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %54 = tensor.empty() : tensor<16xf32>
  %55 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%48 : tensor<16xi64>) outs(%54 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%161] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %56 = tensor.empty() : tensor<16x8xf32>
  %57 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%44, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%56 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %58 = tensor.empty() : tensor<8x8xf32>
  %59 = linalg.fill ins(%cst : f32) outs(%58 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %60 = tensor.empty() : tensor<16xi1>
  %61 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%60 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %61 : tensor<16xi64>, tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<16xi64>
  %65 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%61 : tensor<16xi1>) outs(%64 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %66 = tensor.empty() : tensor<i64>
  %67 = linalg.fill ins(%c0_i64 : i64) outs(%66 : tensor<i64>) -> tensor<i64>
  %68 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%65 : tensor<16xi64>) outs(%67 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %69 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%63, %57 : tensor<16xi64>, tensor<16x8xf32>) outs(%59 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %70 = tensor.empty() : tensor<16xi1>
  %71 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%70 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    %162 = arith.cmpi slt, %in, %c8_i64 : i64
    %163 = arith.andi %161, %162 : i1
    linalg.yield %163 : i1
  } -> tensor<16xi1>
  %72 = tensor.empty() : tensor<16xi64>
  %73 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %71 : tensor<16xi64>, tensor<16xi1>) outs(%72 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.select %in_1, %in, %c0_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %74 = tensor.empty() : tensor<16xi64>
  %75 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%71 : tensor<16xi1>) outs(%74 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %76 = tensor.empty() : tensor<i64>
  %77 = linalg.fill ins(%c0_i64 : i64) outs(%76 : tensor<i64>) -> tensor<i64>
  %78 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%75 : tensor<16xi64>) outs(%77 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %79 = tensor.empty() : tensor<16x8xf32>
  %80 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%73 : tensor<16xi64>) outs(%79 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %gout[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %81 = tensor.empty() : tensor<16x8xf32>
  %82 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %44 : tensor<16x8xf32>, tensor<16x8xf32>) outs(%81 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %83 = tensor.empty() : tensor<16x8xf32>
  %84 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%83 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %85 = tensor.empty() : tensor<16xf32>
  %86 = linalg.fill ins(%cst : f32) outs(%85 : tensor<16xf32>) -> tensor<16xf32>
  %87 = linalg.generic {indexing_maps = [#map4, #map3], iterator_types = ["parallel", "reduction"]} ins(%82 : tensor<16x8xf32>) outs(%86 : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %161 = arith.addf %in, %out : f32
    linalg.yield %161 : f32
  } -> tensor<16xf32>
  %88 = tensor.empty() : tensor<16xf32>
  %89 = linalg.fill ins(%cst : f32) outs(%88 : tensor<16xf32>) -> tensor<16xf32>
  %90 = tensor.empty() : tensor<16xi1>
  %91 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%90 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %92 = tensor.empty() : tensor<16xi64>
  %93 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %91 : tensor<16xi64>, tensor<16xi1>) outs(%92 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %94 = tensor.empty() : tensor<16xi64>
  %95 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%91 : tensor<16xi1>) outs(%94 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %96 = tensor.empty() : tensor<i64>
  %97 = linalg.fill ins(%c0_i64 : i64) outs(%96 : tensor<i64>) -> tensor<i64>
  %98 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%95 : tensor<16xi64>) outs(%97 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %99 = linalg.generic {indexing_maps = [#map2, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%93, %87 : tensor<16xi64>, tensor<16xf32>) outs(%89 : tensor<16xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<16xf32>
  %100 = tensor.empty() : tensor<8x16xf32>
  %transposed = linalg.transpose ins(%38 : tensor<16x8xf32>) outs(%100 : tensor<8x16xf32>) permutation = [1, 0] 
  %101 = tensor.empty() : tensor<16xi64>
  %102 = linalg.fill ins(%c0_i64 : i64) outs(%101 : tensor<16xi64>) -> tensor<16xi64>
  %103 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%102 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %104 = tensor.empty() : tensor<4x8x8xf32>
  %105 = linalg.fill ins(%cst : f32) outs(%104 : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %106 = linalg.generic {indexing_maps = [#map12, #map13, #map14, #map15], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%transposed, %84, %103 : tensor<8x16xf32>, tensor<16x8xf32>, tensor<16xi64>) outs(%105 : tensor<4x8x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<4x8x8xf32>
  %107 = tensor.empty() : tensor<4x8x8xf32>
  %transposed_0 = linalg.transpose ins(%w : tensor<4x8x8xf32>) outs(%107 : tensor<4x8x8xf32>) permutation = [0, 2, 1] 
  %108 = tensor.empty() : tensor<16xi64>
  %109 = linalg.fill ins(%c0_i64 : i64) outs(%108 : tensor<16xi64>) -> tensor<16xi64>
  %110 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%109 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %111 = tensor.empty() : tensor<16x8xf32>
  %112 = linalg.fill ins(%cst : f32) outs(%111 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %113 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%84, %transposed_0, %110 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%112 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %114 = tensor.empty() : tensor<8x8xf32>
  %115 = linalg.fill ins(%cst : f32) outs(%114 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %116 = tensor.empty() : tensor<16xi1>
  %117 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%116 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %118 = tensor.empty() : tensor<16xi64>
  %119 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %117 : tensor<16xi64>, tensor<16xi1>) outs(%118 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %120 = tensor.empty() : tensor<16xi64>
  %121 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%117 : tensor<16xi1>) outs(%120 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %122 = tensor.empty() : tensor<i64>
  %123 = linalg.fill ins(%c0_i64 : i64) outs(%122 : tensor<i64>) -> tensor<i64>
  %124 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%121 : tensor<16xi64>) outs(%123 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %125 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%119, %113 : tensor<16xi64>, tensor<16x8xf32>) outs(%115 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %126 = tensor.empty() : tensor<8xi64>
  %127 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%6 : tensor<i64>) outs(%126 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c0_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %128 = tensor.empty() : tensor<8xi64>
  %129 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%13 : tensor<i64>) outs(%128 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c1_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %130 = tensor.empty() : tensor<8xi64>
  %131 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%127, %129 : tensor<8xi64>, tensor<8xi64>) outs(%130 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %132 = tensor.empty() : tensor<8xi64>
  %133 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%36 : tensor<i64>) outs(%132 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c2_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %134 = tensor.empty() : tensor<8xi64>
  %135 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%131, %133 : tensor<8xi64>, tensor<8xi64>) outs(%134 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %136 = tensor.empty() : tensor<8xi64>
  %137 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%53 : tensor<i64>) outs(%136 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c3_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %138 = tensor.empty() : tensor<8xi64>
  %139 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%135, %137 : tensor<8xi64>, tensor<8xi64>) outs(%138 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %140 = tensor.empty() : tensor<8xi64>
  %141 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%68 : tensor<i64>) outs(%140 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c4_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %142 = tensor.empty() : tensor<8xi64>
  %143 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%139, %141 : tensor<8xi64>, tensor<8xi64>) outs(%142 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %144 = tensor.empty() : tensor<8xi64>
  %145 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%78 : tensor<i64>) outs(%144 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c5_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %146 = tensor.empty() : tensor<8xi64>
  %147 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%143, %145 : tensor<8xi64>, tensor<8xi64>) outs(%146 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %148 = tensor.empty() : tensor<8xi64>
  %149 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%98 : tensor<i64>) outs(%148 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c6_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %150 = tensor.empty() : tensor<8xi64>
  %151 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%147, %149 : tensor<8xi64>, tensor<8xi64>) outs(%150 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %152 = tensor.empty() : tensor<8xi64>
  %153 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%124 : tensor<i64>) outs(%152 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c7_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %154 = tensor.empty() : tensor<8xi64>
  %155 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%151, %153 : tensor<8xi64>, tensor<8xi64>) outs(%154 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %156 = tensor.empty() : tensor<i64>
  %157 = linalg.fill ins(%c9_i64 : i64) outs(%156 : tensor<i64>) -> tensor<i64>
  %158 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%155 : tensor<8xi64>) outs(%157 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.addi %162, %c1_i64 : i64
    %164 = arith.cmpi sgt, %in, %c0_i64 : i64
    %165 = arith.select %164, %163, %c9_i64 : i64
    %166 = arith.minsi %165, %out : i64
    linalg.yield %166 : i64
  } -> tensor<i64>
  %159 = tensor.empty() : tensor<i64>
  %160 = linalg.generic {indexing_maps = [#map16, #map16], iterator_types = []} ins(%158 : tensor<i64>) outs(%159 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.cmpi sgt, %in, %c8_i64 : i64
    %162 = arith.select %161, %c0_i64, %in : i64
    linalg.yield %162 : i64
  } -> tensor<i64>
  return %69, %106, %125, %99, %160 : tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<i64>
}

// -----

// Tests that where a backward value of the rows (dY, returned here) is
// read by something else than the rows' ops, nothing is rewritten,
// forward included.
// CHECK-LABEL: func.func @backward_rows_returned
// CHECK-NOT: ragged_all_to_all
// CHECK: return
// SPMD-LABEL: func.func @backward_rows_returned
// SPMD-NOT: ragged_all_to_all
// SPMD: return
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map9 = affine_map<(d0, d1, d2) -> (d2)>
#map10 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map11 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map12 = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#map13 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map14 = affine_map<(d0, d1, d2, d3) -> (d3)>
#map15 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map16 = affine_map<() -> ()>
shardx.mesh @mesh(shape = 2, axes = ["ep"])
func.func @backward_rows_returned(%w: tensor<4x8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %x: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %gout: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> (tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<i64> {shardx.index_checks = [{exception = "RuntimeError", message = "bincount only supports 1-d non-negative integral inputs."}, {exception = "RuntimeError", message = "bincount: a value >= minlength 4 (eager returns a longer result; the compiled program's length is fixed: pass a larger minlength)"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}, {exception = "IndexError", message = "index out of range in self"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 16"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 8"}], shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %c9_i64 = arith.constant 9 : i64
  %c7_i64 = arith.constant 7 : i64
  %c6_i64 = arith.constant 6 : i64
  %c5_i64 = arith.constant 5 : i64
  %c3_i64 = arith.constant 3 : i64
  %c16_i64 = arith.constant 16 : i64
  %cst = arith.constant 0.000000e+00 : f32
  %c8_i64 = arith.constant 8 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %0 = tensor.empty() : tensor<16xi1>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%0 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %2 = tensor.empty() : tensor<16xi64>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%1 : tensor<16xi1>) outs(%2 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %4 = tensor.empty() : tensor<i64>
  %5 = linalg.fill ins(%c0_i64 : i64) outs(%4 : tensor<i64>) -> tensor<i64>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%3 : tensor<16xi64>) outs(%5 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %7 = tensor.empty() : tensor<16xi1>
  %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%7 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c4_i64 : i64
    linalg.yield %161 : i1
  } -> tensor<16xi1>
  %9 = tensor.empty() : tensor<16xi64>
  %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%8 : tensor<16xi1>) outs(%9 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %11 = tensor.empty() : tensor<i64>
  %12 = linalg.fill ins(%c0_i64 : i64) outs(%11 : tensor<i64>) -> tensor<i64>
  %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%10 : tensor<16xi64>) outs(%12 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %14 = tensor.empty() : tensor<4xi64>
  %15 = linalg.fill ins(%c0_i64 : i64) outs(%14 : tensor<4xi64>) -> tensor<4xi64>
  %16 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi64>) outs(%15 : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = arith.extui %163 : i1 to i64
    %165 = arith.addi %out, %164 : i64
    linalg.yield %165 : i64
  } -> tensor<4xi64>
  %17 = tensor.empty() : tensor<4xi32>
  %18 = linalg.fill ins(%c0_i32 : i32) outs(%17 : tensor<4xi32>) -> tensor<4xi32>
  %19 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%16 : tensor<4xi64>) outs(%18 : tensor<4xi32>) {
  ^bb0(%in: i64, %out: i32):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi ule, %162, %161 : index
    %164 = arith.trunci %in : i64 to i32
    %165 = arith.select %163, %164, %c0_i32 : i32
    %166 = arith.addi %out, %165 : i32
    linalg.yield %166 : i32
  } -> tensor<4xi32>
  %20 = tensor.empty() : tensor<16xi64>
  %21 = linalg.fill ins(%c0_i64 : i64) outs(%20 : tensor<16xi64>) -> tensor<16xi64>
  %22 = linalg.generic {indexing_maps = [#map3, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi64>, tensor<16xi64>) outs(%21 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = linalg.index 1 : index
    %163 = arith.cmpi slt, %in_1, %in : i64
    %164 = arith.cmpi eq, %in_1, %in : i64
    %165 = arith.cmpi ult, %162, %161 : index
    %166 = arith.andi %164, %165 : i1
    %167 = arith.ori %163, %166 : i1
    %168 = arith.extui %167 : i1 to i64
    %169 = arith.addi %out, %168 : i64
    linalg.yield %169 : i64
  } -> tensor<16xi64>
  %23 = tensor.empty() : tensor<16xi64>
  %24 = linalg.fill ins(%c0_i64 : i64) outs(%23 : tensor<16xi64>) -> tensor<16xi64>
  %25 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%22 : tensor<16xi64>) outs(%24 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %in, %162 : i64
    %164 = linalg.index 1 : index
    %165 = arith.index_cast %164 : index to i64
    %166 = arith.select %163, %165, %c0_i64 : i64
    %167 = arith.addi %out, %166 : i64
    linalg.yield %167 : i64
  } -> tensor<16xi64>
  %26 = tensor.empty() : tensor<16xi64>
  %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%26 : tensor<16xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %28 = tensor.empty() : tensor<16xi1>
  %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%28 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %30 = tensor.empty() : tensor<16xi64>
  %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %29 : tensor<16xi64>, tensor<16xi1>) outs(%30 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %32 = tensor.empty() : tensor<16xi64>
  %33 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%29 : tensor<16xi1>) outs(%32 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %34 = tensor.empty() : tensor<i64>
  %35 = linalg.fill ins(%c0_i64 : i64) outs(%34 : tensor<i64>) -> tensor<i64>
  %36 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%33 : tensor<16xi64>) outs(%35 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %37 = tensor.empty() : tensor<16x8xf32>
  %38 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%31 : tensor<16xi64>) outs(%37 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %x[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %39 = tensor.empty() : tensor<16xi64>
  %40 = linalg.fill ins(%c0_i64 : i64) outs(%39 : tensor<16xi64>) -> tensor<16xi64>
  %41 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%40 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %42 = tensor.empty() : tensor<16x8xf32>
  %43 = linalg.fill ins(%cst : f32) outs(%42 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %44 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%38, %w, %41 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%43 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %45 = tensor.empty() : tensor<16xi1>
  %46 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%45 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %47 = tensor.empty() : tensor<16xi64>
  %48 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %46 : tensor<16xi64>, tensor<16xi1>) outs(%47 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %49 = tensor.empty() : tensor<16xi64>
  %50 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%46 : tensor<16xi1>) outs(%49 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %51 = tensor.empty() : tensor<i64>
  %52 = linalg.fill ins(%c0_i64 : i64) outs(%51 : tensor<i64>) -> tensor<i64>
  %53 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%50 : tensor<16xi64>) outs(%52 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %54 = tensor.empty() : tensor<16xf32>
  %55 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%48 : tensor<16xi64>) outs(%54 : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %gates[%161] : tensor<16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16xf32>
  %56 = tensor.empty() : tensor<16x8xf32>
  %57 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%44, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%56 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %58 = tensor.empty() : tensor<8x8xf32>
  %59 = linalg.fill ins(%cst : f32) outs(%58 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %60 = tensor.empty() : tensor<16xi1>
  %61 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%60 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %62 = tensor.empty() : tensor<16xi64>
  %63 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %61 : tensor<16xi64>, tensor<16xi1>) outs(%62 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %64 = tensor.empty() : tensor<16xi64>
  %65 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%61 : tensor<16xi1>) outs(%64 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %66 = tensor.empty() : tensor<i64>
  %67 = linalg.fill ins(%c0_i64 : i64) outs(%66 : tensor<i64>) -> tensor<i64>
  %68 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%65 : tensor<16xi64>) outs(%67 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %69 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%63, %57 : tensor<16xi64>, tensor<16x8xf32>) outs(%59 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %70 = tensor.empty() : tensor<16xi1>
  %71 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%70 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi sge, %in, %c0_i64 : i64
    %162 = arith.cmpi slt, %in, %c8_i64 : i64
    %163 = arith.andi %161, %162 : i1
    linalg.yield %163 : i1
  } -> tensor<16xi1>
  %72 = tensor.empty() : tensor<16xi64>
  %73 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %71 : tensor<16xi64>, tensor<16xi1>) outs(%72 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.select %in_1, %in, %c0_i64 : i64
    linalg.yield %161 : i64
  } -> tensor<16xi64>
  %74 = tensor.empty() : tensor<16xi64>
  %75 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%71 : tensor<16xi1>) outs(%74 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %76 = tensor.empty() : tensor<i64>
  %77 = linalg.fill ins(%c0_i64 : i64) outs(%76 : tensor<i64>) -> tensor<i64>
  %78 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%75 : tensor<16xi64>) outs(%77 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %79 = tensor.empty() : tensor<16x8xf32>
  %80 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%73 : tensor<16xi64>) outs(%79 : tensor<16x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %161 = arith.index_cast %in : i64 to index
    %162 = linalg.index 1 : index
    %extracted = tensor.extract %gout[%161, %162] : tensor<8x8xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x8xf32>
  %81 = tensor.empty() : tensor<16x8xf32>
  %82 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %44 : tensor<16x8xf32>, tensor<16x8xf32>) outs(%81 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %83 = tensor.empty() : tensor<16x8xf32>
  %84 = linalg.generic {indexing_maps = [#map4, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%80, %55 : tensor<16x8xf32>, tensor<16xf32>) outs(%83 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %161 = arith.mulf %in, %in_1 : f32
    linalg.yield %161 : f32
  } -> tensor<16x8xf32>
  %85 = tensor.empty() : tensor<16xf32>
  %86 = linalg.fill ins(%cst : f32) outs(%85 : tensor<16xf32>) -> tensor<16xf32>
  %87 = linalg.generic {indexing_maps = [#map4, #map3], iterator_types = ["parallel", "reduction"]} ins(%82 : tensor<16x8xf32>) outs(%86 : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %161 = arith.addf %in, %out : f32
    linalg.yield %161 : f32
  } -> tensor<16xf32>
  %88 = tensor.empty() : tensor<16xf32>
  %89 = linalg.fill ins(%cst : f32) outs(%88 : tensor<16xf32>) -> tensor<16xf32>
  %90 = tensor.empty() : tensor<16xi1>
  %91 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%25 : tensor<16xi64>) outs(%90 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c16_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %92 = tensor.empty() : tensor<16xi64>
  %93 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%25, %91 : tensor<16xi64>, tensor<16xi1>) outs(%92 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c16_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %94 = tensor.empty() : tensor<16xi64>
  %95 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%91 : tensor<16xi1>) outs(%94 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %96 = tensor.empty() : tensor<i64>
  %97 = linalg.fill ins(%c0_i64 : i64) outs(%96 : tensor<i64>) -> tensor<i64>
  %98 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%95 : tensor<16xi64>) outs(%97 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %99 = linalg.generic {indexing_maps = [#map2, #map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%93, %87 : tensor<16xi64>, tensor<16xf32>) outs(%89 : tensor<16xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<16xf32>
  %100 = tensor.empty() : tensor<8x16xf32>
  %transposed = linalg.transpose ins(%38 : tensor<16x8xf32>) outs(%100 : tensor<8x16xf32>) permutation = [1, 0] 
  %101 = tensor.empty() : tensor<16xi64>
  %102 = linalg.fill ins(%c0_i64 : i64) outs(%101 : tensor<16xi64>) -> tensor<16xi64>
  %103 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%102 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %104 = tensor.empty() : tensor<4x8x8xf32>
  %105 = linalg.fill ins(%cst : f32) outs(%104 : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %106 = linalg.generic {indexing_maps = [#map12, #map13, #map14, #map15], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%transposed, %84, %103 : tensor<8x16xf32>, tensor<16x8xf32>, tensor<16xi64>) outs(%105 : tensor<4x8x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<4x8x8xf32>
  %107 = tensor.empty() : tensor<4x8x8xf32>
  %transposed_0 = linalg.transpose ins(%w : tensor<4x8x8xf32>) outs(%107 : tensor<4x8x8xf32>) permutation = [0, 2, 1] 
  %108 = tensor.empty() : tensor<16xi64>
  %109 = linalg.fill ins(%c0_i64 : i64) outs(%108 : tensor<16xi64>) -> tensor<16xi64>
  %110 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<4xi32>) outs(%109 : tensor<16xi64>) {
  ^bb0(%in: i32, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.extsi %in : i32 to i64
    %164 = arith.cmpi sle, %163, %162 : i64
    %165 = arith.extui %164 : i1 to i64
    %166 = arith.addi %out, %165 : i64
    linalg.yield %166 : i64
  } -> tensor<16xi64>
  %111 = tensor.empty() : tensor<16x8xf32>
  %112 = linalg.fill ins(%cst : f32) outs(%111 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %113 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map8], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%84, %transposed_0, %110 : tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<16xi64>) outs(%112 : tensor<16x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: i64, %out: f32):
    %161 = linalg.index 2 : index
    %162 = arith.index_cast %in_2 : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.mulf %in, %in_1 : f32
    %165 = arith.select %163, %164, %cst : f32
    %166 = arith.addf %out, %165 : f32
    linalg.yield %166 : f32
  } -> tensor<16x8xf32>
  %114 = tensor.empty() : tensor<8x8xf32>
  %115 = linalg.fill ins(%cst : f32) outs(%114 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %116 = tensor.empty() : tensor<16xi1>
  %117 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%27 : tensor<16xi64>) outs(%116 : tensor<16xi1>) {
  ^bb0(%in: i64, %out: i1):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.cmpi sge, %163, %c0_i64 : i64
    %165 = arith.cmpi slt, %163, %c8_i64 : i64
    %166 = arith.andi %164, %165 : i1
    linalg.yield %166 : i1
  } -> tensor<16xi1>
  %118 = tensor.empty() : tensor<16xi64>
  %119 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%27, %117 : tensor<16xi64>, tensor<16xi1>) outs(%118 : tensor<16xi64>) {
  ^bb0(%in: i64, %in_1: i1, %out: i64):
    %161 = arith.cmpi slt, %in, %c0_i64 : i64
    %162 = arith.addi %in, %c8_i64 : i64
    %163 = arith.select %161, %162, %in : i64
    %164 = arith.select %in_1, %163, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<16xi64>
  %120 = tensor.empty() : tensor<16xi64>
  %121 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%117 : tensor<16xi1>) outs(%120 : tensor<16xi64>) {
  ^bb0(%in: i1, %out: i64):
    %161 = arith.xori %in, %true : i1
    %162 = arith.extui %161 : i1 to i64
    linalg.yield %162 : i64
  } -> tensor<16xi64>
  %122 = tensor.empty() : tensor<i64>
  %123 = linalg.fill ins(%c0_i64 : i64) outs(%122 : tensor<i64>) -> tensor<i64>
  %124 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%121 : tensor<16xi64>) outs(%123 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.addi %in, %out : i64
    linalg.yield %161 : i64
  } -> tensor<i64>
  %125 = linalg.generic {indexing_maps = [#map9, #map10, #map11], iterator_types = ["parallel", "parallel", "reduction"]} ins(%119, %113 : tensor<16xi64>, tensor<16x8xf32>) outs(%115 : tensor<8x8xf32>) {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %in : i64 to index
    %163 = arith.cmpi eq, %161, %162 : index
    %164 = arith.select %163, %in_1, %cst : f32
    %165 = arith.addf %out, %164 : f32
    linalg.yield %165 : f32
  } -> tensor<8x8xf32>
  %126 = tensor.empty() : tensor<8xi64>
  %127 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%6 : tensor<i64>) outs(%126 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c0_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %128 = tensor.empty() : tensor<8xi64>
  %129 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%13 : tensor<i64>) outs(%128 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c1_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %130 = tensor.empty() : tensor<8xi64>
  %131 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%127, %129 : tensor<8xi64>, tensor<8xi64>) outs(%130 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %132 = tensor.empty() : tensor<8xi64>
  %133 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%36 : tensor<i64>) outs(%132 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c2_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %134 = tensor.empty() : tensor<8xi64>
  %135 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%131, %133 : tensor<8xi64>, tensor<8xi64>) outs(%134 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %136 = tensor.empty() : tensor<8xi64>
  %137 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%53 : tensor<i64>) outs(%136 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c3_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %138 = tensor.empty() : tensor<8xi64>
  %139 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%135, %137 : tensor<8xi64>, tensor<8xi64>) outs(%138 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %140 = tensor.empty() : tensor<8xi64>
  %141 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%68 : tensor<i64>) outs(%140 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c4_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %142 = tensor.empty() : tensor<8xi64>
  %143 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%139, %141 : tensor<8xi64>, tensor<8xi64>) outs(%142 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %144 = tensor.empty() : tensor<8xi64>
  %145 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%78 : tensor<i64>) outs(%144 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c5_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %146 = tensor.empty() : tensor<8xi64>
  %147 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%143, %145 : tensor<8xi64>, tensor<8xi64>) outs(%146 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %148 = tensor.empty() : tensor<8xi64>
  %149 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%98 : tensor<i64>) outs(%148 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c6_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %150 = tensor.empty() : tensor<8xi64>
  %151 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%147, %149 : tensor<8xi64>, tensor<8xi64>) outs(%150 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %152 = tensor.empty() : tensor<8xi64>
  %153 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel"]} ins(%124 : tensor<i64>) outs(%152 : tensor<8xi64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.cmpi eq, %162, %c7_i64 : i64
    %164 = arith.select %163, %in, %c0_i64 : i64
    linalg.yield %164 : i64
  } -> tensor<8xi64>
  %154 = tensor.empty() : tensor<8xi64>
  %155 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%151, %153 : tensor<8xi64>, tensor<8xi64>) outs(%154 : tensor<8xi64>) {
  ^bb0(%in: i64, %in_1: i64, %out: i64):
    %161 = arith.addi %in, %in_1 : i64
    linalg.yield %161 : i64
  } -> tensor<8xi64>
  %156 = tensor.empty() : tensor<i64>
  %157 = linalg.fill ins(%c9_i64 : i64) outs(%156 : tensor<i64>) -> tensor<i64>
  %158 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%155 : tensor<8xi64>) outs(%157 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = linalg.index 0 : index
    %162 = arith.index_cast %161 : index to i64
    %163 = arith.addi %162, %c1_i64 : i64
    %164 = arith.cmpi sgt, %in, %c0_i64 : i64
    %165 = arith.select %164, %163, %c9_i64 : i64
    %166 = arith.minsi %165, %out : i64
    linalg.yield %166 : i64
  } -> tensor<i64>
  %159 = tensor.empty() : tensor<i64>
  %160 = linalg.generic {indexing_maps = [#map16, #map16], iterator_types = []} ins(%158 : tensor<i64>) outs(%159 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %161 = arith.cmpi sgt, %in, %c8_i64 : i64
    %162 = arith.select %161, %c0_i64, %in : i64
    linalg.yield %162 : i64
  } -> tensor<i64>
  return %69, %106, %125, %99, %84, %160 : tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<8x8xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<i64>
}

// -----

// The block's forward as the importer writes it (the router in the
// program, the choices and gates flattened from [T, k]) with 6 tokens on
// ep4: 2, 2, 1 and 1 tokens per rank (propagation then keeps the
// flattened choices whole).

// Tests that with tokens that do not divide over the ranks the forward is
// rewritten with each rank's tokens padded to the most any rank holds (2):
// the choices and gates read from their [T, k] forms in the tokens'
// split, padded (the padding's choices the slot past every expert, never
// sent) and flattened, x padded with zero rows, and the output sliced to
// the rank's own tokens before its cast back.
// CHECK-LABEL: func.func @tokens_uneven
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<6x16xf32>
// CHECK: %[[C:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<6x2xi64> to tensor<?x2xi64> {shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: %[[OWN:.+]] = tensor.dim %[[C]], %c0
// CHECK: tensor.pad %[[C]] low[0, 0] high[%{{.+}}, 0]
// CHECK-NEXT: ^bb0
// CHECK-NEXT: tensor.yield %c4_i64
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0, 1]] : tensor<2x2xi64> into tensor<4xi64>
// CHECK: shardx.all_to_all
// CHECK: unrealized_conversion_cast %[[X]] : tensor<6x16xf32> to tensor<?x16xf32>
// CHECK: tensor.pad
// CHECK: shardx.ragged_all_to_all {{.*}} : tensor<4x16xf32>, tensor<4xi64>, tensor<4xi64> -> tensor<16x16xf32>
// CHECK: unrealized_conversion_cast %{{.+}} : tensor<6x2xf32> to tensor<?x2xf32>
// CHECK: shardx.ragged_all_to_all {{.*}} : tensor<16x16xf32>, tensor<4xi64>, tensor<4xi64> -> tensor<4x16xf32>
// CHECK: %[[OUT:.+]] = tensor.extract_slice %{{.+}}[0, 0] [%[[OWN]], 16] [1, 1] : tensor<2x16xf32> to tensor<?x16xf32>
// CHECK: %[[G:.+]] = builtin.unrealized_conversion_cast %[[OUT]] : tensor<?x16xf32> to tensor<6x16xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: return %[[G]],
// SPMD-LABEL: func.func @tokens_uneven
// SPMD-NOT: shardx.all_gather
// SPMD-COUNT-2: shardx.ragged_all_to_all
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
shardx.mesh @mesh(shape = 4, axes = ["ep"])
func.func @tokens_uneven(%w1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %w3: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %w2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %router: tensor<4x16xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}, %x: tensor<6x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> (tensor<6x16xf32>, tensor<i64> {shardx.index_checks = [{exception = "RuntimeError", message = "bincount only supports 1-d non-negative integral inputs."}, {exception = "RuntimeError", message = "bincount: a value >= minlength 4 (eager returns a longer result; the compiled program's length is fixed: pass a larger minlength)"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 6"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 12"}, {exception = "IndexError", message = "index out of bounds for dimension 0 with size 6"}], shardx.layout = #shardx.layout<@mesh, [R]>}) {
  %c5_i64 = arith.constant 5 : i64
  %c3_i64 = arith.constant 3 : i64
  %c12_i64 = arith.constant 12 : i64
  %cst = arith.constant 1.000000e+00 : f32
  %c6_i64 = arith.constant 6 : i64
  %c2_i64 = arith.constant 2 : i64
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_0 = arith.constant 0xFF800000 : f32
  %cst_1 = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<16x4xf32>
  %transposed = linalg.transpose ins(%router : tensor<4x16xf32>) outs(%0 : tensor<16x4xf32>) permutation = [1, 0] 
  %1 = tensor.empty() : tensor<6x4xf32>
  %2 = linalg.fill ins(%cst_1 : f32) outs(%1 : tensor<6x4xf32>) -> tensor<6x4xf32>
  %3 = linalg.matmul ins(%x, %transposed : tensor<6x16xf32>, tensor<16x4xf32>) outs(%2 : tensor<6x4xf32>) -> tensor<6x4xf32>
  %4 = tensor.empty() : tensor<6xf32>
  %5 = linalg.fill ins(%cst_0 : f32) outs(%4 : tensor<6xf32>) -> tensor<6xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%3 : tensor<6x4xf32>) outs(%5 : tensor<6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.maximumf %in, %out : f32
    linalg.yield %141 : f32
  } -> tensor<6xf32>
  %7 = tensor.empty() : tensor<6x4xf32>
  %8 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%3, %6 : tensor<6x4xf32>, tensor<6xf32>) outs(%7 : tensor<6x4xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.subf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<6x4xf32>
  %9 = tensor.empty() : tensor<6x4xf32>
  %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<6x4xf32>) outs(%9 : tensor<6x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = math.exp %in : f32
    linalg.yield %141 : f32
  } -> tensor<6x4xf32>
  %11 = tensor.empty() : tensor<6xf32>
  %12 = linalg.fill ins(%cst_1 : f32) outs(%11 : tensor<6xf32>) -> tensor<6xf32>
  %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%10 : tensor<6x4xf32>) outs(%12 : tensor<6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.addf %in, %out : f32
    linalg.yield %141 : f32
  } -> tensor<6xf32>
  %14 = tensor.empty() : tensor<6x4xf32>
  %15 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%10, %13 : tensor<6x4xf32>, tensor<6xf32>) outs(%14 : tensor<6x4xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.divf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<6x4xf32>
  %16 = tensor.empty() : tensor<6x4xi64>
  %17 = linalg.fill ins(%c0_i64 : i64) outs(%16 : tensor<6x4xi64>) -> tensor<6x4xi64>
  %18 = linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%15, %15 : tensor<6x4xf32>, tensor<6x4xf32>) outs(%17 : tensor<6x4xi64>) {
  ^bb0(%in: f32, %in_3: f32, %out: i64):
    %141 = linalg.index 1 : index
    %142 = linalg.index 2 : index
    %143 = arith.cmpf ogt, %in_3, %in : f32
    %144 = arith.cmpf oeq, %in_3, %in : f32
    %145 = arith.cmpi ult, %142, %141 : index
    %146 = arith.andi %144, %145 : i1
    %147 = arith.ori %143, %146 : i1
    %148 = arith.extui %147 : i1 to i64
    %149 = arith.addi %out, %148 : i64
    linalg.yield %149 : i64
  } -> tensor<6x4xi64>
  %19 = tensor.empty() : tensor<6x2xf32>
  %20 = linalg.fill ins(%cst_1 : f32) outs(%19 : tensor<6x2xf32>) -> tensor<6x2xf32>
  %21 = linalg.generic {indexing_maps = [#map3, #map3, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%18, %15 : tensor<6x4xi64>, tensor<6x4xf32>) outs(%20 : tensor<6x2xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 1 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<6x2xf32>
  %22 = tensor.empty() : tensor<6x2xi64>
  %23 = linalg.fill ins(%c0_i64 : i64) outs(%22 : tensor<6x2xi64>) -> tensor<6x2xi64>
  %24 = linalg.generic {indexing_maps = [#map3, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%18 : tensor<6x4xi64>) outs(%23 : tensor<6x2xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 1 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 2 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<6x2xi64>
  %25 = tensor.empty() : tensor<6xf32>
  %26 = linalg.fill ins(%cst_1 : f32) outs(%25 : tensor<6xf32>) -> tensor<6xf32>
  %27 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%21 : tensor<6x2xf32>) outs(%26 : tensor<6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.addf %in, %out : f32
    linalg.yield %141 : f32
  } -> tensor<6xf32>
  %28 = tensor.empty() : tensor<6x2xf32>
  %29 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%21, %27 : tensor<6x2xf32>, tensor<6xf32>) outs(%28 : tensor<6x2xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.divf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<6x2xf32>
  %collapsed = tensor.collapse_shape %24 [[0, 1]] : tensor<6x2xi64> into tensor<12xi64>
  %30 = tensor.empty() : tensor<12xi1>
  %31 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%collapsed : tensor<12xi64>) outs(%30 : tensor<12xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi sge, %in, %c0_i64 : i64
    linalg.yield %141 : i1
  } -> tensor<12xi1>
  %32 = tensor.empty() : tensor<12xi64>
  %33 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%31 : tensor<12xi1>) outs(%32 : tensor<12xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<12xi64>
  %34 = tensor.empty() : tensor<i64>
  %35 = linalg.fill ins(%c0_i64 : i64) outs(%34 : tensor<i64>) -> tensor<i64>
  %36 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%33 : tensor<12xi64>) outs(%35 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %37 = tensor.empty() : tensor<12xi1>
  %38 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%collapsed : tensor<12xi64>) outs(%37 : tensor<12xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c4_i64 : i64
    linalg.yield %141 : i1
  } -> tensor<12xi1>
  %39 = tensor.empty() : tensor<12xi64>
  %40 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%38 : tensor<12xi1>) outs(%39 : tensor<12xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<12xi64>
  %41 = tensor.empty() : tensor<i64>
  %42 = linalg.fill ins(%c0_i64 : i64) outs(%41 : tensor<i64>) -> tensor<i64>
  %43 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%40 : tensor<12xi64>) outs(%42 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %44 = tensor.empty() : tensor<4xi64>
  %45 = linalg.fill ins(%c0_i64 : i64) outs(%44 : tensor<4xi64>) -> tensor<4xi64>
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%collapsed : tensor<12xi64>) outs(%45 : tensor<4xi64>) {
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
  %50 = tensor.empty() : tensor<12xi64>
  %51 = linalg.fill ins(%c0_i64 : i64) outs(%50 : tensor<12xi64>) -> tensor<12xi64>
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%collapsed, %collapsed : tensor<12xi64>, tensor<12xi64>) outs(%51 : tensor<12xi64>) {
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
  } -> tensor<12xi64>
  %53 = tensor.empty() : tensor<12xi64>
  %54 = linalg.fill ins(%c0_i64 : i64) outs(%53 : tensor<12xi64>) -> tensor<12xi64>
  %55 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%52 : tensor<12xi64>) outs(%54 : tensor<12xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %in, %142 : i64
    %144 = linalg.index 1 : index
    %145 = arith.index_cast %144 : index to i64
    %146 = arith.select %143, %145, %c0_i64 : i64
    %147 = arith.addi %out, %146 : i64
    linalg.yield %147 : i64
  } -> tensor<12xi64>
  %56 = tensor.empty() : tensor<12xi64>
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<12xi64>) outs(%56 : tensor<12xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.floordivsi %in, %c2_i64 : i64
    linalg.yield %141 : i64
  } -> tensor<12xi64>
  %58 = tensor.empty() : tensor<12xi1>
  %59 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<12xi64>) outs(%58 : tensor<12xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c6_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c6_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<12xi1>
  %60 = tensor.empty() : tensor<12xi64>
  %61 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %59 : tensor<12xi64>, tensor<12xi1>) outs(%60 : tensor<12xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c6_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<12xi64>
  %62 = tensor.empty() : tensor<12xi64>
  %63 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%59 : tensor<12xi1>) outs(%62 : tensor<12xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<12xi64>
  %64 = tensor.empty() : tensor<i64>
  %65 = linalg.fill ins(%c0_i64 : i64) outs(%64 : tensor<i64>) -> tensor<i64>
  %66 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%63 : tensor<12xi64>) outs(%65 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %67 = tensor.empty() : tensor<12x16xf32>
  %68 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<12xi64>) outs(%67 : tensor<12x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %x[%141, %142] : tensor<6x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<12x16xf32>
  %69 = tensor.empty() : tensor<12xi64>
  %70 = linalg.fill ins(%c0_i64 : i64) outs(%69 : tensor<12xi64>) -> tensor<12xi64>
  %71 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%70 : tensor<12xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<12xi64>
  %72 = tensor.empty() : tensor<12x32xf32>
  %73 = linalg.fill ins(%cst_1 : f32) outs(%72 : tensor<12x32xf32>) -> tensor<12x32xf32>
  %74 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %w1, %71 : tensor<12x16xf32>, tensor<4x16x32xf32>, tensor<12xi64>) outs(%73 : tensor<12x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<12x32xf32>
  %75 = tensor.empty() : tensor<12x32xf32>
  %76 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%74 : tensor<12x32xf32>) outs(%75 : tensor<12x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.negf %in : f32
    %142 = math.exp %141 : f32
    %143 = arith.addf %142, %cst : f32
    %144 = arith.divf %cst, %143 : f32
    linalg.yield %144 : f32
  } -> tensor<12x32xf32>
  %77 = tensor.empty() : tensor<12x32xf32>
  %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %76 : tensor<12x32xf32>, tensor<12x32xf32>) outs(%77 : tensor<12x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<12x32xf32>
  %79 = tensor.empty() : tensor<12xi64>
  %80 = linalg.fill ins(%c0_i64 : i64) outs(%79 : tensor<12xi64>) -> tensor<12xi64>
  %81 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%80 : tensor<12xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<12xi64>
  %82 = tensor.empty() : tensor<12x32xf32>
  %83 = linalg.fill ins(%cst_1 : f32) outs(%82 : tensor<12x32xf32>) -> tensor<12x32xf32>
  %84 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%68, %w3, %81 : tensor<12x16xf32>, tensor<4x16x32xf32>, tensor<12xi64>) outs(%83 : tensor<12x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<12x32xf32>
  %85 = tensor.empty() : tensor<12x32xf32>
  %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %84 : tensor<12x32xf32>, tensor<12x32xf32>) outs(%85 : tensor<12x32xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<12x32xf32>
  %87 = tensor.empty() : tensor<12xi64>
  %88 = linalg.fill ins(%c0_i64 : i64) outs(%87 : tensor<12xi64>) -> tensor<12xi64>
  %89 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%49 : tensor<4xi32>) outs(%88 : tensor<12xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.extsi %in : i32 to i64
    %144 = arith.cmpi sle, %143, %142 : i64
    %145 = arith.extui %144 : i1 to i64
    %146 = arith.addi %out, %145 : i64
    linalg.yield %146 : i64
  } -> tensor<12xi64>
  %90 = tensor.empty() : tensor<12x16xf32>
  %91 = linalg.fill ins(%cst_1 : f32) outs(%90 : tensor<12x16xf32>) -> tensor<12x16xf32>
  %92 = linalg.generic {indexing_maps = [#map7, #map8, #map9, #map10], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%86, %w2, %89 : tensor<12x32xf32>, tensor<4x32x16xf32>, tensor<12xi64>) outs(%91 : tensor<12x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %in_4: i64, %out: f32):
    %141 = linalg.index 2 : index
    %142 = arith.index_cast %in_4 : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.mulf %in, %in_3 : f32
    %145 = arith.select %143, %144, %cst_1 : f32
    %146 = arith.addf %out, %145 : f32
    linalg.yield %146 : f32
  } -> tensor<12x16xf32>
  %collapsed_2 = tensor.collapse_shape %29 [[0, 1]] : tensor<6x2xf32> into tensor<12xf32>
  %93 = tensor.empty() : tensor<12xi1>
  %94 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%55 : tensor<12xi64>) outs(%93 : tensor<12xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c12_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c12_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<12xi1>
  %95 = tensor.empty() : tensor<12xi64>
  %96 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%55, %94 : tensor<12xi64>, tensor<12xi1>) outs(%95 : tensor<12xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c12_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<12xi64>
  %97 = tensor.empty() : tensor<12xi64>
  %98 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%94 : tensor<12xi1>) outs(%97 : tensor<12xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<12xi64>
  %99 = tensor.empty() : tensor<i64>
  %100 = linalg.fill ins(%c0_i64 : i64) outs(%99 : tensor<i64>) -> tensor<i64>
  %101 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%98 : tensor<12xi64>) outs(%100 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %102 = tensor.empty() : tensor<12xf32>
  %103 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%96 : tensor<12xi64>) outs(%102 : tensor<12xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %extracted = tensor.extract %collapsed_2[%141] : tensor<12xf32>
    linalg.yield %extracted : f32
  } -> tensor<12xf32>
  %104 = tensor.empty() : tensor<12x16xf32>
  %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%92, %103 : tensor<12x16xf32>, tensor<12xf32>) outs(%104 : tensor<12x16xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %141 = arith.mulf %in, %in_3 : f32
    linalg.yield %141 : f32
  } -> tensor<12x16xf32>
  %106 = tensor.empty() : tensor<6x16xf32>
  %107 = linalg.fill ins(%cst_1 : f32) outs(%106 : tensor<6x16xf32>) -> tensor<6x16xf32>
  %108 = tensor.empty() : tensor<12xi1>
  %109 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%57 : tensor<12xi64>) outs(%108 : tensor<12xi1>) {
  ^bb0(%in: i64, %out: i1):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c6_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.cmpi sge, %143, %c0_i64 : i64
    %145 = arith.cmpi slt, %143, %c6_i64 : i64
    %146 = arith.andi %144, %145 : i1
    linalg.yield %146 : i1
  } -> tensor<12xi1>
  %110 = tensor.empty() : tensor<12xi64>
  %111 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%57, %109 : tensor<12xi64>, tensor<12xi1>) outs(%110 : tensor<12xi64>) {
  ^bb0(%in: i64, %in_3: i1, %out: i64):
    %141 = arith.cmpi slt, %in, %c0_i64 : i64
    %142 = arith.addi %in, %c6_i64 : i64
    %143 = arith.select %141, %142, %in : i64
    %144 = arith.select %in_3, %143, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<12xi64>
  %112 = tensor.empty() : tensor<12xi64>
  %113 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%109 : tensor<12xi1>) outs(%112 : tensor<12xi64>) {
  ^bb0(%in: i1, %out: i64):
    %141 = arith.xori %in, %true : i1
    %142 = arith.extui %141 : i1 to i64
    linalg.yield %142 : i64
  } -> tensor<12xi64>
  %114 = tensor.empty() : tensor<i64>
  %115 = linalg.fill ins(%c0_i64 : i64) outs(%114 : tensor<i64>) -> tensor<i64>
  %116 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%113 : tensor<12xi64>) outs(%115 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.addi %in, %out : i64
    linalg.yield %141 : i64
  } -> tensor<i64>
  %117 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %105 : tensor<12xi64>, tensor<12x16xf32>) outs(%107 : tensor<6x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<6x16xf32>
  %118 = tensor.empty() : tensor<5xi64>
  %119 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel"]} ins(%36 : tensor<i64>) outs(%118 : tensor<5xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %142, %c0_i64 : i64
    %144 = arith.select %143, %in, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<5xi64>
  %120 = tensor.empty() : tensor<5xi64>
  %121 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel"]} ins(%43 : tensor<i64>) outs(%120 : tensor<5xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %142, %c1_i64 : i64
    %144 = arith.select %143, %in, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<5xi64>
  %122 = tensor.empty() : tensor<5xi64>
  %123 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%119, %121 : tensor<5xi64>, tensor<5xi64>) outs(%122 : tensor<5xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = arith.addi %in, %in_3 : i64
    linalg.yield %141 : i64
  } -> tensor<5xi64>
  %124 = tensor.empty() : tensor<5xi64>
  %125 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel"]} ins(%66 : tensor<i64>) outs(%124 : tensor<5xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %142, %c2_i64 : i64
    %144 = arith.select %143, %in, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<5xi64>
  %126 = tensor.empty() : tensor<5xi64>
  %127 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%123, %125 : tensor<5xi64>, tensor<5xi64>) outs(%126 : tensor<5xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = arith.addi %in, %in_3 : i64
    linalg.yield %141 : i64
  } -> tensor<5xi64>
  %128 = tensor.empty() : tensor<5xi64>
  %129 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel"]} ins(%101 : tensor<i64>) outs(%128 : tensor<5xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %142, %c3_i64 : i64
    %144 = arith.select %143, %in, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<5xi64>
  %130 = tensor.empty() : tensor<5xi64>
  %131 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%127, %129 : tensor<5xi64>, tensor<5xi64>) outs(%130 : tensor<5xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = arith.addi %in, %in_3 : i64
    linalg.yield %141 : i64
  } -> tensor<5xi64>
  %132 = tensor.empty() : tensor<5xi64>
  %133 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel"]} ins(%116 : tensor<i64>) outs(%132 : tensor<5xi64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.cmpi eq, %142, %c4_i64 : i64
    %144 = arith.select %143, %in, %c0_i64 : i64
    linalg.yield %144 : i64
  } -> tensor<5xi64>
  %134 = tensor.empty() : tensor<5xi64>
  %135 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel"]} ins(%131, %133 : tensor<5xi64>, tensor<5xi64>) outs(%134 : tensor<5xi64>) {
  ^bb0(%in: i64, %in_3: i64, %out: i64):
    %141 = arith.addi %in, %in_3 : i64
    linalg.yield %141 : i64
  } -> tensor<5xi64>
  %136 = tensor.empty() : tensor<i64>
  %137 = linalg.fill ins(%c6_i64 : i64) outs(%136 : tensor<i64>) -> tensor<i64>
  %138 = linalg.generic {indexing_maps = [#map4, #map5], iterator_types = ["reduction"]} ins(%135 : tensor<5xi64>) outs(%137 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i64
    %143 = arith.addi %142, %c1_i64 : i64
    %144 = arith.cmpi sgt, %in, %c0_i64 : i64
    %145 = arith.select %144, %143, %c6_i64 : i64
    %146 = arith.minsi %145, %out : i64
    linalg.yield %146 : i64
  } -> tensor<i64>
  %139 = tensor.empty() : tensor<i64>
  %140 = linalg.generic {indexing_maps = [#map13, #map13], iterator_types = []} ins(%138 : tensor<i64>) outs(%139 : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %141 = arith.cmpi sgt, %in, %c5_i64 : i64
    %142 = arith.select %141, %c0_i64, %in : i64
    linalg.yield %142 : i64
  } -> tensor<i64>
  return %117, %140 : tensor<6x16xf32>, tensor<i64>
}

// -----

// Tests that where the rewritten output is gathered again by the same
// tokens (doubled and added back), the second gather reads the output's
// cast (the rank's own tokens: no exchange, and no global program left
// behind to compute the replaced output again).
// CHECK-LABEL: func.func @output_gathered_again
// CHECK: %[[OUT:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<4x16xf32> to tensor<8x16xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: unrealized_conversion_cast %[[OUT]] : tensor<8x16xf32> to tensor<4x16xf32>
// CHECK: %[[OUT2:.+]] = builtin.unrealized_conversion_cast %{{.+}} : tensor<4x16xf32> to tensor<8x16xf32> {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]}
// CHECK: return %[[OUT]], %[[OUT2]],
// SPMD-LABEL: func.func @output_gathered_again
// SPMD-NOT: shardx.all_gather
// SPMD-COUNT-2: shardx.ragged_all_to_all
// SPMD-NOT: shardx.ragged_all_to_all
// SPMD-NOT: shardx.all_reduce {{.*}}f32
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

func.func @output_gathered_again(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %flat: tensor<16xi64> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %gates: tensor<16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %x: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>) {
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
  // The output's rows gathered again by the same tokens, doubled, and
  // added back.
  %r0 = tensor.empty() : tensor<16x16xf32>
  %r1 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%61 : tensor<16xi64>) outs(%r0 : tensor<16x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %141 = arith.index_cast %in : i64 to index
    %142 = linalg.index 1 : index
    %extracted = tensor.extract %117[%141, %142] : tensor<8x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<16x16xf32>
  %r2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%r1 : tensor<16x16xf32>) outs(%r0 : tensor<16x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %141 = arith.addf %in, %in : f32
    linalg.yield %141 : f32
  } -> tensor<16x16xf32>
  %r3 = linalg.generic {indexing_maps = [#map11, #map12, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%111, %r2 : tensor<16xi64>, tensor<16x16xf32>) outs(%107 : tensor<8x16xf32>) {
  ^bb0(%in: i64, %in_3: f32, %out: f32):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %in : i64 to index
    %143 = arith.cmpi eq, %141, %142 : index
    %144 = arith.select %143, %in_3, %cst_1 : f32
    %145 = arith.addf %out, %144 : f32
    linalg.yield %145 : f32
  } -> tensor<8x16xf32>
  return %117, %r3, %66, %101, %116 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<i64>, tensor<i64>, tensor<i64>
}

// -----

// Tests that @split's routing in i32 (the choices, their sort and their
// bincount; the local program builds the routing and the received rows'
// experts in i64) is left to propagation's plan: the pass built a sort of
// the i64 experts with i32 arguments (verifier error) before.
// CHECK-LABEL: func.func @routing_i32
// CHECK-NOT: ragged_all_to_all
// CHECK: return
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

func.func @routing_i32(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %arg2: tensor<4x32x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
    %flat: tensor<16xi32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
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
  %46 = linalg.generic {indexing_maps = [#map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat : tensor<16xi32>) outs(%45 : tensor<4xi64>) {
  ^bb0(%in: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = arith.index_cast %141 : index to i32
    %143 = arith.cmpi eq, %in, %142 : i32
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
  %52 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "reduction"]} ins(%flat, %flat : tensor<16xi32>, tensor<16xi32>) outs(%51 : tensor<16xi64>) {
  ^bb0(%in: i32, %in_3: i32, %out: i64):
    %141 = linalg.index 0 : index
    %142 = linalg.index 1 : index
    %143 = arith.cmpi slt, %in_3, %in : i32
    %144 = arith.cmpi eq, %in_3, %in : i32
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

// Tests that where x's gather reads `7 - token` (the bounds-checked index's
// select yields another value than the wrapped token) nothing is
// rewritten: the pass read the checked index as the token and gathered
// x[token] before (shardx-run --check: 128 of 128 outputs differ).
// CHECK-LABEL: func.func @checked_index_other
// CHECK-NOT: ragged_all_to_all
// CHECK: return
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

func.func @checked_index_other(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
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
    %c7_i64 = arith.constant 7 : i64
    %145 = arith.subi %c7_i64, %143 : i64
    %144 = arith.select %in_3, %145, %c0_i64 : i64
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

// Tests that a sum over a replaced gather's mask that is not the count of
// its false entries (xor with false: the count of the indices in range) is
// kept, while the dispatch is rewritten and the two range checks' counts
// become zeros: it was replaced with zero before.
// CHECK-LABEL: func.func @check_count_not_negated
// CHECK: %[[KEPT:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<i64>)
// CHECK: shardx.ragged_all_to_all
// CHECK: %[[ZERO:.+]] = arith.constant {{.*}} dense<0> : tensor<i64>
// CHECK: return %{{.+}}, %[[KEPT]], %[[ZERO]], %{{.+}} :
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

func.func @check_count_not_negated(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
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
    %false = arith.constant false
    %141 = arith.xori %in, %false : i1
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

// Tests that a floordiv generic writing into order's buffer (order its
// init, `flat // 2` its value) is not taken for the tokens: nothing is
// rewritten. The pass gathered x[order // 2] before (shardx-run --check:
// 128 of 128 outputs differ).
// CHECK-LABEL: func.func @token_of_other
// CHECK-NOT: ragged_all_to_all
// CHECK: return
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

func.func @token_of_other(%arg0: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %arg1: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
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
  %57 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel"]} ins(%flat : tensor<16xi64>) outs(%55 : tensor<16xi64>) {
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
