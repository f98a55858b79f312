// RUN: shardx-opt --shardx-place-deallocs --split-input-file --verify-diagnostics %s | FileCheck %s

// Tests that each buffer is freed right after its last use, also where the
// use is through a view (a transpose, a cast): not at the end of the
// function, where every temporary of a train step would be alive at once.
// CHECK-LABEL: func.func @after_last_use
// CHECK: %[[A:.*]] = memref.alloc() : memref<4x4xf32>
// CHECK: linalg.fill {{.*}} outs(%[[A]]
// CHECK: %[[T:.*]] = memref.transpose %[[A]]
// CHECK: %[[B:.*]] = memref.alloc() : memref<4x4xf32>
// CHECK: linalg.copy ins(%[[T]] {{.*}} outs(%[[B]]
// CHECK-NEXT: memref.dealloc %[[A]]
// CHECK: linalg.copy ins(%[[B]] {{.*}} outs(%arg0
// CHECK-NEXT: memref.dealloc %[[B]]
// CHECK-NEXT: %[[C:.*]] = memref.alloc() : memref<4x4xf32>
// CHECK: return %[[C]]
func.func @after_last_use(%out: memref<4x4xf32>) -> memref<4x4xf32> {
  %cst = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<4x4xf32>
  linalg.fill ins(%cst : f32) outs(%a : memref<4x4xf32>)
  %t = memref.transpose %a (d0, d1) -> (d1, d0) : memref<4x4xf32> to memref<4x4xf32, strided<[1, 4]>>
  %b = memref.alloc() : memref<4x4xf32>
  linalg.copy ins(%t : memref<4x4xf32, strided<[1, 4]>>) outs(%b : memref<4x4xf32>)
  linalg.copy ins(%b : memref<4x4xf32>) outs(%out : memref<4x4xf32>)
  %c = memref.alloc() : memref<4x4xf32>
  linalg.fill ins(%cst : f32) outs(%c : memref<4x4xf32>)
  return %c : memref<4x4xf32>
}

// -----

// Tests that a buffer a started collective reads stays alive until the call
// that takes the start's request (the wait), even when nothing else uses the
// buffer in between.
// CHECK-LABEL: func.func @started_collective
// CHECK: %[[IN:.*]] = memref.alloc()
// CHECK: %[[REQ:.*]] = call @start(%[[IN]])
// CHECK: linalg.fill
// CHECK: call @wait(%[[REQ]])
// CHECK-NEXT: memref.dealloc %[[IN]]
func.func private @start(memref<8xf32>) -> i64
func.func private @wait(i64)
func.func @started_collective(%out: memref<8xf32>) {
  %cst = arith.constant 0.0 : f32
  %in = memref.alloc() : memref<8xf32>
  %req = call @start(%in) : (memref<8xf32>) -> i64
  linalg.fill ins(%cst : f32) outs(%out : memref<8xf32>)
  call @wait(%req) : (i64) -> ()
  return
}

// -----

// Tests that a function returns only buffers its caller may free: a
// returned constant, a returned argument and a buffer returned twice are
// copied into fresh allocations, which are not freed; a buffer returned
// through a strided view is not freed and not copied (the executor frees a
// buffer two results share once).
// CHECK-LABEL: func.func @returned
// CHECK: %[[G:.*]] = memref.get_global @g
// CHECK: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[V:.*]] = memref.subview %[[A]]
// CHECK: %[[CG:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %[[G]], %[[CG]]
// CHECK: %[[CA:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %arg0, %[[CA]]
// CHECK: %[[CD:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %[[A]], %[[CD]]
// CHECK-NOT: memref.dealloc
// CHECK: return %[[CG]], %[[CA]], %[[A]], %[[CD]], %[[V]]
memref.global "private" constant @g : memref<4xf32> = dense<1.0>
func.func @returned(%arg: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<2xf32, strided<[1], offset: 2>>) {
  %g = memref.get_global @g : memref<4xf32>
  %a = memref.alloc() : memref<4xf32>
  %v = memref.subview %a[2] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1], offset: 2>>
  return %g, %arg, %a, %a, %v : memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<2xf32, strided<[1], offset: 2>>
}

// -----

// Tests that a buffer passed to a call of a module function is freed after
// the call although the call's result is returned: the callee returns a
// fresh buffer (its returned argument is copied), never the one passed, and
// the caller owns the result. (Followed through the call, the passed buffer
// counted as returned and leaked on every run: each update call of a
// regional train step leaked its gradient slice's copy.)
// CHECK-LABEL: func.func private @callee
// CHECK: %[[R:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %arg0, %[[R]]
// CHECK-NOT: memref.dealloc
// CHECK: return %[[R]]
// CHECK-LABEL: func.func @passed_to_call
// CHECK: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[C:.*]] = call @callee(%[[A]])
// CHECK-NEXT: memref.dealloc %[[A]]
// CHECK-NOT: memref.dealloc
// CHECK: return %[[C]]
func.func private @callee(%arg: memref<4xf32>) -> memref<4xf32> {
  return %arg : memref<4xf32>
}
func.func @passed_to_call(%in: memref<4xf32>) -> memref<4xf32> {
  %a = memref.alloc() : memref<4xf32>
  memref.copy %in, %a : memref<4xf32> to memref<4xf32>
  %c = call @callee(%a) : (memref<4xf32>) -> memref<4xf32>
  return %c : memref<4xf32>
}

// -----

// Tests that a function with a buffer allocated in a nested region is not
// handled here (the compiler then runs MLIR's ownership-based deallocation).
// expected-error @+1 {{shardx-place-deallocs: @nested: it allocates a buffer in a nested region}}
module {
  func.func @nested(%n: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %n step %c1 {
      %a = memref.alloc() : memref<4xf32>
    }
    return
  }
}

// -----

// Tests that a region op returning a buffer (which may alias one of the
// function's allocations) is not handled here either.
// expected-error @+1 {{shardx-place-deallocs: @yields: a region op returns a buffer}}
module {
  func.func @yields(%c: i1) -> memref<4xf32> {
    %a = memref.alloc() : memref<4xf32>
    %b = memref.alloc() : memref<4xf32>
    %r = scf.if %c -> memref<4xf32> {
      scf.yield %a : memref<4xf32>
    } else {
      scf.yield %b : memref<4xf32>
    }
    return %r : memref<4xf32>
  }
}
