// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-warp-reductions)' %s \
// RUN:   | FileCheck %s
// RUN: %if cuda-toolkit %{ shardx-compile --target=cuda --emit=mlir \
// RUN:   %S/Inputs/softmax-rows.mlir -o %t.mlir %}
// RUN: %if cuda-toolkit %{ FileCheck %s --check-prefix=LAUNCH < %t.mlir %}
// RUN: %if cuda-toolkit %{ shardx-compile --target=cuda --emit=ptx \
// RUN:   %S/Inputs/softmax-rows.mlir -o %t.ptx %}
// RUN: %if cuda-toolkit %{ FileCheck %s --check-prefix=PTX < %t.ptx %}
// RUN: %if cuda-toolkit %{ %ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

// shardx-warp-reductions (lib/Compiler/GpuReductions.cpp) run alone: a
// reduction over the innermost loops runs on a warp per output element (a
// block per row for long rows and full reductions), combined by shuffles;
// everything it is not sure of stays a linalg op (the existing paths).

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>

// A row max, 100 rows of 768: 13 blocks of 8 warps, the last block's rows
// past 100 guarded, each lane from -inf over k = lane, lane + 32, ..., then
// a butterfly of five xor shuffles, lane 0 combines into the output.
// CHECK-LABEL: func.func @row_max
// CHECK: gpu.launch blocks({{.*}}) in (%{{[a-z0-9]+}} = %c13{{[_0-9]*}}, %{{.*}}) threads(%[[LANE:[a-z0-9]+]], %{{[a-z0-9]+}}, %{{[a-z0-9]+}}) in (%{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c8{{[_0-9]*}}, %{{[a-z0-9]+}} = %c1{{[_0-9]*}})
// CHECK: arith.cmpi ult, %{{.*}}, %c100
// CHECK: scf.if
// CHECK: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: scf.for %{{.*}} = %[[LANE]] to %c768{{.*}} step %c32{{.*}} iter_args(%{{.*}} = %[[NINF]])
// CHECK: memref.load
// CHECK: arith.maximumf
// CHECK: gpu.shuffle  xor %{{.*}}, %c16_i32, %c32_i32
// CHECK: arith.maximumf
// CHECK: gpu.shuffle  xor
// CHECK: gpu.shuffle  xor
// CHECK: gpu.shuffle  xor
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32
// CHECK: arith.cmpi eq, %[[LANE]], %c0
// CHECK: scf.if
// CHECK: memref.load %arg1
// CHECK: arith.maximumf
// CHECK: memref.store
// CHECK-NOT: linalg.generic
func.func @row_max(%x: memref<100x768xf32>, %m: memref<100xf32>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<100x768xf32>) outs(%m : memref<100xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.maximumf %acc, %a : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A sum of exp(x - max) in bf16 as the program says: the identity -0.0,
// the shuffles of the 16-bit values through i32, no guard (64 rows).
// CHECK-LABEL: func.func @row_sum_bf16
// CHECK: gpu.launch
// CHECK-NOT: arith.cmpi ult
// CHECK: arith.constant -0.000000e+00 : bf16
// CHECK: scf.for
// CHECK: math.exp
// CHECK: arith.addf %{{.*}} : bf16
// CHECK: arith.bitcast %{{.*}} : bf16 to i16
// CHECK: arith.extui %{{.*}} : i16 to i32
// CHECK: gpu.shuffle  xor %{{.*}} : i32
// CHECK: arith.trunci %{{.*}} : i32 to i16
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_sum_bf16(%x: memref<64x768xbf16>, %mx: memref<64xbf16>, %s: memref<64xbf16>) {
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x, %mx : memref<64x768xbf16>, memref<64xbf16>) outs(%s : memref<64xbf16>) {
  ^bb0(%a: bf16, %m: bf16, %acc: bf16):
    %d = arith.subf %a, %m : bf16
    %e = math.exp %d : bf16
    %r = arith.addf %acc, %e : bf16
    linalg.yield %r : bf16
  }
  return
}

// -----

// f64 values travel as two i32 halves.
// CHECK-LABEL: func.func @row_sum_f64
// CHECK: arith.bitcast %{{.*}} : f64 to i64
// CHECK: gpu.shuffle  xor %{{.*}} : i32
// CHECK: gpu.shuffle  xor %{{.*}} : i32
// CHECK: arith.ori
// CHECK: arith.bitcast %{{.*}} : i64 to f64
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_sum_f64(%x: memref<40x256xf64>, %s: memref<40xf64>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<40x256xf64>) outs(%s : memref<40xf64>) {
  ^bb0(%a: f64, %acc: f64):
    %r = arith.addf %acc, %a : f64
    linalg.yield %r : f64
  }
  return
}

// -----

// Rows of 8192: a block of 8 warps per row (12 blocks), each warp's value
// through shared memory, the first warp combines the 8 (the lanes past 8
// from the identity, +inf for minimumf).
// CHECK-LABEL: func.func @long_row_min
// CHECK: gpu.launch blocks({{.*}}) in (%{{[a-z0-9]+}} = %c12{{[_0-9]*}}, %{{.*}}) threads({{.*}}) in (%{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c8{{[_0-9]*}}, %{{[a-z0-9]+}} = %c1{{[_0-9]*}}) workgroup(%[[BUF:[a-z0-9]+]] : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for {{.*}} step %c256
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: memref.store %{{.*}}, %[[BUF]]
// CHECK: gpu.barrier
// CHECK: arith.cmpi ult, %{{.*}}, %c8
// CHECK: memref.load %[[BUF]]
// CHECK: arith.constant 0x7F800000 : f32
// CHECK-COUNT-5: gpu.shuffle  xor
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @long_row_min(%x: memref<12x8192xf32>, %m: memref<12xf32>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<12x8192xf32>) outs(%m : memref<12xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.minimumf %a, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A full max (shardx-parallelize-full-sums takes f32 sums only): one block
// of 32 warps.
// CHECK-LABEL: func.func @full_max
// CHECK: gpu.launch blocks({{.*}}) in (%{{[a-z0-9]+}} = %c1{{[_0-9]*}}, %{{.*}}) threads({{.*}}) in (%{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c1{{[_0-9]*}}) workgroup({{.*}} : memref<32xf32, #gpu.address_space<workgroup>>)
// CHECK: step %c1024
// CHECK: arith.maximumf
func.func @full_max(%x: memref<12x8192xf32>, %m: memref<f32>) {
  linalg.reduce ins(%x : memref<12x8192xf32>) outs(%m : memref<f32>) dimensions = [0, 1]
    (%a: f32, %acc: f32) {
      %r = arith.maximumf %a, %acc : f32
      linalg.yield %r : f32
    }
  return
}

// -----

// A full reduction of 2^20 elements: 256 blocks of 8 warps, each thread
// grid-strided (step 256 * 256), into a temporary of 256; then one block of
// 32 warps combines the temporary into the output, and the temporary is
// freed.
// CHECK-LABEL: func.func @full_min_grid
// CHECK: %[[T:.*]] = memref.alloc() : memref<256xf32>
// CHECK: gpu.launch blocks({{.*}}) in (%{{[a-z0-9]+}} = %c256{{[_0-9]*}}, %{{.*}}) threads({{.*}}) in (%{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c8{{[_0-9]*}}, %{{.*}}) workgroup({{.*}} : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for {{.*}} to %c1048576{{.*}} step %c65536
// CHECK: arith.minimumf
// CHECK: gpu.barrier
// CHECK: memref.store %{{.*}}, %[[T]][%{{.*}}] : memref<256xf32>
// CHECK: gpu.launch blocks({{.*}}) in (%{{[a-z0-9]+}} = %c1{{[_0-9]*}}, %{{.*}}) threads({{.*}}) in (%{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{[a-z0-9]+}} = %c32{{[_0-9]*}}, %{{.*}}) workgroup({{.*}} : memref<32xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for {{.*}} to %c256{{.*}} step %c1024
// CHECK: memref.load %[[T]]
// CHECK: memref.load %arg1[]
// CHECK: arith.minimumf
// CHECK: memref.store %{{.*}}, %arg1[]
// CHECK: memref.dealloc %[[T]]
func.func @full_min_grid(%x: memref<1024x1024xf32>, %m: memref<f32>) {
  linalg.reduce ins(%x : memref<1024x1024xf32>) outs(%m : memref<f32>) dimensions = [0, 1]
    (%a: f32, %acc: f32) {
      %r = arith.minimumf %a, %acc : f32
      linalg.yield %r : f32
    }
  return
}

// -----

// Integer sums too (exact in any order).
// CHECK-LABEL: func.func @row_sum_i32
// CHECK: arith.constant 0 : i32
// CHECK: gpu.shuffle  xor %{{.*}} : i32
// CHECK: arith.addi
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_sum_i32(%x: memref<16x64xi32>, %s: memref<16xi32>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x64xi32>) outs(%s : memref<16xi32>) {
  ^bb0(%a: i32, %acc: i32):
    %r = arith.addi %acc, %a : i32
    linalg.yield %r : i32
  }
  return
}

// -----

// An i1 "any" over a row (an attention mask's): the i1 travels in an i32.
// CHECK-LABEL: func.func @row_any_i1
// CHECK: %[[F:.*]] = arith.constant false
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[F]]) -> (i1)
// CHECK: arith.extui %{{.*}} : i1 to i32
// CHECK: gpu.shuffle  xor %{{.*}} : i32
// CHECK: arith.trunci %{{.*}} : i32 to i1
// CHECK: arith.ori
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_any_i1(%x: memref<16x1024xf32>, %s: memref<16xi1>) {
  %c = arith.constant 0.0 : f32
  %true = arith.constant true
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x1024xf32>) outs(%s : memref<16xi1>) {
  ^bb0(%a: f32, %acc: i1):
    %e = arith.cmpf oeq, %a, %c : f32
    %n = arith.xori %e, %true : i1
    %r = arith.ori %n, %acc : i1
    linalg.yield %r : i1
  }
  return
}

// -----

// What stays: rows shorter than 32, a reduction that reads its input
// along a non-innermost dim (a column sum: a thread per output reads
// consecutive elements), dynamic shapes, two outputs (an argmax), a body
// that is not `combine(out, term)` (select on a compare), a strided row.
// CHECK-LABEL: func.func @stays
// CHECK-NOT: gpu.launch
// CHECK-COUNT-6: linalg.generic
// CHECK-NOT: gpu.launch
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#t = affine_map<(d0, d1) -> (d1, d0)>
func.func @stays(%short: memref<64x16xf32>, %s16: memref<64xf32>,
                 %g: memref<512x64xf32>, %b: memref<64xf32>,
                 %dyn: memref<?x768xf32>, %sd: memref<?xf32>,
                 %x: memref<64x768xf32>, %mv: memref<64xf32>, %mi: memref<64xi64>,
                 %strided: memref<64x768xf32, strided<[1536, 2]>>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%short : memref<64x16xf32>) outs(%s16 : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %acc, %a : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#t, #row], iterator_types = ["parallel", "reduction"]}
      ins(%g : memref<512x64xf32>) outs(%b : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %acc, %a : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%dyn : memref<?x768xf32>) outs(%sd : memref<?xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %acc, %a : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x768xf32>) outs(%mv, %mi : memref<64xf32>, memref<64xi64>) {
  ^bb0(%a: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %gt = arith.cmpf ogt, %a, %acc : f32
    %v = arith.select %gt, %a, %acc : f32
    %n = arith.select %gt, %ii, %idx : i64
    linalg.yield %v, %n : f32, i64
  }
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x768xf32>) outs(%mv : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %gt = arith.cmpf ogt, %a, %acc : f32
    %v = arith.select %gt, %a, %acc : f32
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%strided : memref<64x768xf32, strided<[1536, 2]>>) outs(%mv : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %acc, %a : f32
    linalg.yield %r : f32
  }
  return
}

// The whole cuda pipeline on a softmax (Inputs/softmax-rows.mlir): the row
// max and the row sum are launches of 8 blocks of 32 x 8 threads (64 rows
// of 768), and their PTX shuffles (shfl.sync.bfly) and passes ptxas.
// LAUNCH-COUNT-2: gpu.launch_func @shardx_kernels::@{{.*}} blocks in (%[[B:.*]], %[[ONE:.*]], %[[ONE]]) threads in (%[[W:.*]], %[[B]], %[[ONE]])
// PTX-COUNT-10: shfl.sync.bfly.b32
