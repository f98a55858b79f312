// RUN: shardx-opt %s --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that a call of a function of the module counts, while it runs, what
// the callee allocates beyond the buffer it returns (8 KiB: its 9 KiB peak
// less the 1 KiB result), and the returned buffer from the call on, with
// the call's phase.
// CHECK-LABEL: memory of @caller per rank: peak 10.00 KiB (10240 bytes) at func.call
// CHECK-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// CHECK-NEXT: allocated at the peak 9.00 KiB (9216 bytes): activations 9.00 KiB
func.func @caller(%a: memref<256xf32>) {
  %c = arith.constant 0.0 : f32
  %0 = func.call @callee(%a) : (memref<256xf32>) -> memref<256xf32> loc(#fwd)
  %1 = memref.alloc() : memref<1024xf32> loc(#fwd)
  linalg.fill ins(%c : f32) outs(%1 : memref<1024xf32>) loc(#bwd)
  memref.dealloc %0 : memref<256xf32>
  memref.dealloc %1 : memref<1024xf32>
  return
}

// CHECK-LABEL: memory of @callee per rank: peak 10.00 KiB (10240 bytes) at memref.alloc
// CHECK-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// CHECK-NEXT: allocated at the peak 9.00 KiB (9216 bytes): activations 8.00 KiB, results 1.00 KiB
func.func private @callee(%a: memref<256xf32>) -> memref<256xf32> {
  %t = memref.alloc() : memref<2048xf32> loc(#fwd)
  %r = memref.alloc() : memref<256xf32> loc(#fwd)
  memref.copy %a, %r : memref<256xf32> to memref<256xf32>
  memref.dealloc %t : memref<2048xf32>
  return %r : memref<256xf32>
}

// Tests that a buffer's phase is its first writer's, not its allocation's
// (allocated at a forward location, CSE's choice among identical empty
// tensors, and written in the backward pass).
// CHECK-LABEL: memory of @roles per rank: peak 5.00 KiB (5120 bytes) at memref.alloc
// CHECK-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// CHECK-NEXT: allocated at the peak 4.00 KiB (4096 bytes): gradients 4.00 KiB
func.func @roles(%a: memref<256xf32>) {
  %c = arith.constant 0.0 : f32
  %1 = memref.alloc() : memref<1024xf32> loc(#fwd)
  linalg.fill ins(%c : f32) outs(%1 : memref<1024xf32>) loc(#bwd)
  memref.dealloc %1 : memref<1024xf32>
  return
}

#fwd = loc(fused<"forward">["model.py":1:0])
#bwd = loc(fused<"backward">["model.py":2:0])
