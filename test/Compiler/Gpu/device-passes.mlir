// RUN: shardx-opt --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(shardx-parallel-loops-first)' %s \
// RUN:   | FileCheck %s --check-prefix=FIRST
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-wrap-serial-ops)' %s \
// RUN:   | FileCheck %s --check-prefix=WRAP
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-parallelize-full-sums)' %s \
// RUN:   | FileCheck %s --check-prefix=FULL
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-split-column-sums)' %s \
// RUN:   | FileCheck %s --check-prefix=SPLIT
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-place-buffers-on-device)' %s \
// RUN:   | FileCheck %s --check-prefix=DEVICE
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-contractions-to-cublas)' %s \
// RUN:   | FileCheck %s --check-prefix=CUBLAS
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-record-staging-signatures)' %s \
// RUN:   | FileCheck %s --check-prefix=SIG
// RUN: shardx-opt --split-input-file \
// RUN:   --pass-pipeline='builtin.module(shardx-tile-parallel-loops)' %s \
// RUN:   | FileCheck %s --check-prefix=TILE

// The cuda target's device transforms (lib/Compiler/GpuTransforms.cpp),
// each run alone on one input. The whole pipeline is tested through
// shardx-compile --target=cuda in lowering.mlir.

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A column sum (reduction outer) gets its parallel loop first: a thread per
// output element.
// FIRST-LABEL: func.func @column_sum
// FIRST: iterator_types = ["parallel", "reduction"]
// A row reduction whose loops are in order stays.
// FIRST-LABEL: func.func @row_sum
// FIRST: iterator_types = ["parallel", "reduction"]
// The other passes leave both alone.
// WRAP-LABEL: func.func @column_sum
// WRAP-NOT: scf.parallel
// FULL-LABEL: func.func @column_sum
// FULL-NOT: atomic_rmw
// DEVICE-LABEL: func.func @column_sum
// CUBLAS-LABEL: func.func @column_sum
// CUBLAS-NOT: call
// SIG: module attributes {shardx.staging_signatures = {column_sum = "I2:4 I1:4 ", row_sum = "I2:4 I1:4 "}}
func.func @column_sum(%g: memref<64x32xf32>, %b: memref<32xf32>) {
  linalg.generic {indexing_maps = [#id, #col],
                  iterator_types = ["reduction", "parallel"]}
      ins(%g : memref<64x32xf32>) outs(%b : memref<32xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return
}
func.func @row_sum(%g: memref<64x32xf32>, %b: memref<64xf32>) {
  linalg.generic {indexing_maps = [#id, #row],
                  iterator_types = ["parallel", "reduction"]}
      ins(%g : memref<64x32xf32>) outs(%b : memref<64xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A full f32 sum: each of ceil(N / 32) threads adds 32 elements and its
// partial sum atomically; a 0-d op runs in a one-iteration parallel loop.
// FULL-LABEL: func.func @full_sum
// FULL: scf.parallel
// FULL: scf.for
// FULL: memref.atomic_rmw addf
// WRAP-LABEL: func.func @full_sum
// WRAP: %[[C0:.*]] = arith.constant 0 : index
// WRAP: %[[C1:.*]] = arith.constant 1 : index
// WRAP: scf.parallel (%{{.*}}) = (%[[C0]]) to (%[[C1]]) step (%[[C1]])
// WRAP-NEXT: linalg.generic
#all = affine_map<(d0, d1) -> (d0, d1)>
#none = affine_map<(d0, d1) -> ()>
func.func @full_sum(%x: memref<64x2048xf32>, %out: memref<f32>) {
  linalg.generic {indexing_maps = [#all, #none],
                  iterator_types = ["reduction", "reduction"]}
      ins(%x : memref<64x2048xf32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A long column sum with few outputs is summed in chunks, then added.
// SPLIT-LABEL: func.func @long_column_sum
// SPLIT: memref.alloc() : memref<{{[0-9]+}}x768xf32>
// SPLIT: scf.parallel
// SPLIT: scf.parallel
// SPLIT: memref.dealloc
#in = affine_map<(d0, d1) -> (d1, d0)>
#out = affine_map<(d0, d1) -> (d0)>
func.func @long_column_sum(%g: memref<8192x768xf32>, %b: memref<768xf32>) {
  linalg.generic {indexing_maps = [#in, #out],
                  iterator_types = ["parallel", "reduction"]}
      ins(%g : memref<8192x768xf32>) outs(%b : memref<768xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Copies become kernels (linalg.copy), an alloca a device allocation freed
// at the end of its block.
// DEVICE-LABEL: func.func @buffers
// DEVICE: %[[A:.*]] = memref.alloc() : memref<4xf32>
// DEVICE: linalg.copy ins(%{{.*}} : memref<4xf32>) outs(%[[A]] : memref<4xf32>)
// DEVICE: memref.dealloc %[[A]]
// DEVICE-NEXT: return
func.func @buffers(%x: memref<4xf32>) {
  %a = memref.alloca() : memref<4xf32>
  memref.copy %x, %a : memref<4xf32> to memref<4xf32>
  return
}

// -----

// A matmul on f32 buffers is a cuBLAS call; an i32 one stays.
// CUBLAS-LABEL: func.func @gemm
// CUBLAS: call @shardx_rt_cuda_gemm_f32
// CUBLAS-NOT: linalg.matmul
// CUBLAS-LABEL: func.func @int_gemm
// CUBLAS: linalg.matmul
func.func @gemm(%a: memref<8x16xf32>, %b: memref<16x4xf32>, %c: memref<8x4xf32>) {
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x4xf32>)
                outs(%c : memref<8x4xf32>)
  return
}
func.func @int_gemm(%a: memref<8x16xi32>, %b: memref<16x4xi32>, %c: memref<8x4xi32>) {
  linalg.matmul ins(%a, %b : memref<8x16xi32>, memref<16x4xi32>)
                outs(%c : memref<8x4xi32>)
  return
}

// -----

// An outermost 2-D parallel loop is collapsed to one dim and tiled: blocks
// of 256 consecutive iterations (a short loop is one block of its length).
// TILE-LABEL: func.func @loops
// TILE: %[[C256:.*]] = arith.constant 256 : index
// TILE: %[[STEP:.*]] = arith.muli %{{.*}}, %[[C256]] : index
// TILE: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[N:.*]]) step (%[[STEP]])
// TILE-NEXT: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[STEP]])
// TILE: arith.cmpi ult, %{{.*}}, %[[N]]
// TILE: memref.store
// TILE-LABEL: func.func @short_loop
// TILE: arith.constant 10 : index
// TILE: %[[C10:.*]] = arith.constant 10 : index
// TILE: %[[S:.*]] = arith.muli %{{.*}}, %[[C10]] : index
// TILE: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%[[S]])
func.func @loops(%x: memref<32x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %f = arith.constant 1.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c32, %c64) step (%c1, %c1) {
    memref.store %f, %x[%i, %j] : memref<32x64xf32>
  }
  return
}
func.func @short_loop(%x: memref<10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %f = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c10) step (%c1) {
    memref.store %f, %x[%i] : memref<10xf32>
  }
  return
}
