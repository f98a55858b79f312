// The two orders of shardx-lower-masked-scatters compute the same table,
// run on the CPU by MLIR's runner (the GPU order's parallel loop runs
// serially there): the CPU's (tokens outside, columns inside) and the
// GPU's (a thread per block of 3 rows and column, 23,334 blocks, each
// visiting every token in order). Tokens repeat (row 3 three times, 69999
// twice), fall in neighbouring blocks (69998 and 69999) and outside the
// table (-1, 70000).

// DEFINE: %{lower} = --convert-linalg-to-loops --lower-affine \
// DEFINE:   --convert-scf-to-cf --expand-strided-metadata --lower-affine \
// DEFINE:   --finalize-memref-to-llvm --convert-arith-to-llvm \
// DEFINE:   --convert-index-to-llvm --convert-cf-to-llvm \
// DEFINE:   --convert-func-to-llvm --reconcile-unrealized-casts
// RUN: shardx-opt --shardx-lower-masked-scatters=order=cpu %s \
// RUN:   | mlir-opt %{lower} \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_runner_libs | FileCheck %s
// RUN: shardx-opt --shardx-lower-masked-scatters=order=gpu %s \
// RUN:   | mlir-opt %{lower} \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_runner_libs | FileCheck %s

// Rows 0-4: row 0 is token (0, 1), row 1 (1, 1), row 3 the tokens (0, 0),
// (0, 3) and (1, 2) in that order; g[b, s, d] = 1 + 10 (5 b + s) + d / 2.
// CHECK: sizes = [5, 2]
// CHECK-NEXT: {{\[\[}}11,   11.5],
// CHECK-NEXT:  [61,   61.5],
// CHECK-NEXT:  [0,   0],
// CHECK-NEXT:  [103,   104.5],
// CHECK-NEXT:  [0,   0]]
// Rows 69997-69999: 69998 is (1, 3), 69999 is (0, 2) + (1, 4).
// CHECK: sizes = [3, 2]
// CHECK-NEXT: {{\[\[}}0,   0],
// CHECK-NEXT:  [81,   81.5],
// CHECK-NEXT:  [112,   113]]

func.func private @printMemrefF32(memref<*xf32>)

// Tokens: rows 3, 0, 69999, 3, -1 / 70000, 1, 3, 69998, 69999.
memref.global "private" constant @tokens : memref<2x5xi64> = dense<[[3, 0, 69999, 3, -1], [70000, 1, 3, 69998, 69999]]>

func.func @scatter(%idx: memref<2x5xi64>, %g: memref<2x5x2xf32>, %w: memref<70000x2xf32>) {
  linalg.generic {indexing_maps = [affine_map<(v, d, b, s) -> (b, s)>,
                                   affine_map<(v, d, b, s) -> (b, s, d)>,
                                   affine_map<(v, d, b, s) -> (v, d)>],
                  iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%idx, %g : memref<2x5xi64>, memref<2x5x2xf32>) outs(%w : memref<70000x2xf32>) {
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

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c5 = arith.constant 5 : index
  %idx = memref.alloc() : memref<2x5xi64>
  %g = memref.alloc() : memref<2x5x2xf32>
  %w = memref.alloc() : memref<70000x2xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%w : memref<70000x2xf32>)
  %tb = memref.get_global @tokens : memref<2x5xi64>
  memref.copy %tb, %idx : memref<2x5xi64> to memref<2x5xi64>
  // g[b, s, d] = 1 + 10 * (5 b + s) + 0.5 d: every visit's value distinct.
  scf.for %b = %c0 to %c2 step %c1 {
    scf.for %s = %c0 to %c5 step %c1 {
      scf.for %d = %c0 to %c2 step %c1 {
        %bs = affine.apply affine_map<(b, s) -> (b * 5 + s)>(%b, %s)
        %bsi = arith.index_cast %bs : index to i64
        %bsf = arith.sitofp %bsi : i64 to f32
        %di = arith.index_cast %d : index to i64
        %df = arith.sitofp %di : i64 to f32
        %ten = arith.constant 10.0 : f32
        %half = arith.constant 0.5 : f32
        %one = arith.constant 1.0 : f32
        %a = arith.mulf %bsf, %ten : f32
        %h = arith.mulf %df, %half : f32
        %v0 = arith.addf %a, %h : f32
        %v = arith.addf %v0, %one : f32
        memref.store %v, %g[%b, %s, %d] : memref<2x5x2xf32>
      }
    }
  }
  call @scatter(%idx, %g, %w) : (memref<2x5xi64>, memref<2x5x2xf32>, memref<70000x2xf32>) -> ()
  %head = memref.subview %w[0, 0] [5, 2] [1, 1] : memref<70000x2xf32> to memref<5x2xf32, strided<[2, 1]>>
  %tail = memref.subview %w[69997, 0] [3, 2] [1, 1] : memref<70000x2xf32> to memref<3x2xf32, strided<[2, 1], offset: 139994>>
  %hu = memref.cast %head : memref<5x2xf32, strided<[2, 1]>> to memref<*xf32>
  %tu = memref.cast %tail : memref<3x2xf32, strided<[2, 1], offset: 139994>> to memref<*xf32>
  call @printMemrefF32(%hu) : (memref<*xf32>) -> ()
  call @printMemrefF32(%tu) : (memref<*xf32>) -> ()
  return
}
