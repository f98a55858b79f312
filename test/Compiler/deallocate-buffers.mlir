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
