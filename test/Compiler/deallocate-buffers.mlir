// RUN: shardx-opt --shardx-deallocate-buffers --split-input-file %s | FileCheck %s

// Tests that in a straight-line function a temporary buffer is freed right
// after its last use and a returned one is not freed.
// CHECK-LABEL: func.func @straight
// CHECK:      %[[T:.*]] = memref.alloc() : memref<4xf32>
// CHECK:      %[[R:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT: linalg.copy ins(%[[T]] : memref<4xf32>) outs(%[[R]] : memref<4xf32>)
// CHECK-NEXT: memref.dealloc %[[T]] : memref<4xf32>
// CHECK-NOT:  memref.dealloc
// CHECK:      return %[[R]]
func.func @straight(%a: memref<4xf32>) -> memref<4xf32> {
  %t = memref.alloc() : memref<4xf32>
  linalg.copy ins(%a : memref<4xf32>) outs(%t : memref<4xf32>)
  %r = memref.alloc() : memref<4xf32>
  linalg.copy ins(%t : memref<4xf32>) outs(%r : memref<4xf32>)
  return %r : memref<4xf32>
}

// -----

// Tests that a buffer last used inside a region op (one block per region)
// is freed after that op.
// CHECK-LABEL: func.func @in_region
// CHECK:      %[[T:.*]] = memref.alloc() : memref<4xf32>
// CHECK:      scf.if
// CHECK:        linalg.copy ins(%[[T]]
// CHECK:      }
// CHECK-NEXT: memref.dealloc %[[T]] : memref<4xf32>
// CHECK-NEXT: return
func.func @in_region(%a: memref<4xf32>, %c: i1) -> memref<4xf32> {
  %t = memref.alloc() : memref<4xf32>
  linalg.copy ins(%a : memref<4xf32>) outs(%t : memref<4xf32>)
  %r = memref.alloc() : memref<4xf32>
  scf.if %c {
    linalg.copy ins(%t : memref<4xf32>) outs(%r : memref<4xf32>)
  }
  return %r : memref<4xf32>
}

// -----

// Tests that a function with several blocks, which shardx-place-deallocs
// does not handle, is freed by MLIR's ownership-based deallocation: the
// temporary on the branch that does not return it.
// CHECK-LABEL: func.func @blocks
// CHECK:      %[[T:.*]] = memref.alloc() : memref<4xf32>
// CHECK:      cf.cond_br
// CHECK:      %[[R:.*]] = memref.alloc() : memref<4xf32>
// CHECK:      memref.dealloc %[[T]] : memref<4xf32>
// CHECK:      return %[[R]]
func.func @blocks(%a: memref<4xf32>, %c: i1) -> memref<4xf32> {
  %t = memref.alloc() : memref<4xf32>
  linalg.copy ins(%a : memref<4xf32>) outs(%t : memref<4xf32>)
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  %r = memref.alloc() : memref<4xf32>
  linalg.copy ins(%t : memref<4xf32>) outs(%r : memref<4xf32>)
  return %r : memref<4xf32>
^bb2:
  return %t : memref<4xf32>
}

// -----

// Tests that a copy of a buffer onto itself (one-shot bufferization's
// insert_slice of a slice computed in place, in a loop) is erased, and a
// copy between two views is kept.
// CHECK-LABEL: func.func @self_copy
// CHECK:      scf.for
// CHECK-NEXT:   memref.subview
// CHECK-NEXT:   linalg.fill
// CHECK-NEXT: }
// CHECK:      memref.copy %{{.*}}, %{{.*}} : memref<2x4xf32, strided<[4, 1]>> to memref<2x4xf32, strided<[4, 1], offset: 8>>
// CHECK-NOT:  memref.copy
func.func @self_copy(%a: memref<4x4xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %f = arith.constant 1.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %s = memref.subview %a[%i, 0] [1, 4] [1, 1] : memref<4x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    linalg.fill ins(%f : f32) outs(%s : memref<1x4xf32, strided<[4, 1], offset: ?>>)
    memref.copy %s, %s : memref<1x4xf32, strided<[4, 1], offset: ?>> to memref<1x4xf32, strided<[4, 1], offset: ?>>
  }
  %lo = memref.subview %a[0, 0] [2, 4] [1, 1] : memref<4x4xf32> to memref<2x4xf32, strided<[4, 1]>>
  %hi = memref.subview %a[2, 0] [2, 4] [1, 1] : memref<4x4xf32> to memref<2x4xf32, strided<[4, 1], offset: 8>>
  memref.copy %lo, %hi : memref<2x4xf32, strided<[4, 1]>> to memref<2x4xf32, strided<[4, 1], offset: 8>>
  return
}
