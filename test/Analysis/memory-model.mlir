// RUN: shardx-opt %s --split-input-file --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that an elementwise chain is one buffer (the first op is fused into
// the second), allocated where its empty tensor is made, and that the peak
// counts the arguments.
// CHECK: memory of @chain per rank: peak 2.00 KiB (2048 bytes) at tensor.empty
// CHECK-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// CHECK-NEXT: allocated at the peak 1.00 KiB (1024 bytes): results 1.00 KiB
func.func @chain(%a: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %e = tensor.empty() : tensor<16x16xf32>
  %0 = linalg.exp ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = linalg.negf ins(%0 : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}

// -----

// Tests that a value read after a later op keeps its buffer alive, that a
// fill is written in place by the matmul that reads it, and that arguments
// marked torch.state (and those before them) are classified.
// The peak: both products and the first sum (allocated at its empty tensor).
// CHECK: memory of @live per rank: peak 1.75 KiB (1792 bytes) at tensor.empty
// CHECK-SAME: (op 8 of 12)
// CHECK-NEXT: arguments 1.00 KiB: parameters 256 B, optimizer state 512 B, inputs 256 B
// CHECK-NEXT: allocated at the peak 768 B (768 bytes): activations 512 B, results 256 B
func.func @live(%w: tensor<8x8xf32>, %s: tensor<8x8xf32> {torch.state = "exp_avg"},
                %t: tensor<8x8xf32> {torch.state = "exp_avg_sq"}, %x: tensor<8x8xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m = linalg.matmul ins(%x, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m2 = linalg.matmul ins(%m, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f2 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %e3 = tensor.empty() : tensor<8x8xf32>
  %a = linalg.add ins(%m, %m2 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%e3 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %e4 = tensor.empty() : tensor<8x8xf32>
  %b = linalg.add ins(%a, %s : tensor<8x8xf32>, tensor<8x8xf32>) outs(%e4 : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %a, %b : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Tests that a bufferized function is modeled by replaying its allocations:
// the peak is where both buffers are alive.
// CHECK: memory of @buffers per rank: peak 3.00 KiB (3072 bytes) at memref.alloc
// CHECK-SAME: modeled on buffers
// CHECK-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// CHECK-NEXT: allocated at the peak 2.00 KiB (2048 bytes): activations 2.00 KiB
func.func @buffers(%a: memref<256xf32>) {
  %0 = memref.alloc() : memref<256xf32>
  memref.copy %a, %0 : memref<256xf32> to memref<256xf32>
  %1 = memref.alloc() : memref<256xf32>
  memref.copy %0, %1 : memref<256xf32> to memref<256xf32>
  memref.dealloc %0 : memref<256xf32>
  %2 = memref.alloc() : memref<256xf32>
  memref.dealloc %1 : memref<256xf32>
  memref.dealloc %2 : memref<256xf32>
  return
}

// -----

// Tests that memory-level=buffers models a copy lowered through the CPU
// code generation up to its deallocations (on tensors the same function
// holds 1 KiB; the lowered copy allocates two buffers).
// RUN: shardx-opt %s --split-input-file --shardx-print-plan=memory-level=buffers -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=BUF
// BUF: memory of @lowered per rank: peak 3.00 KiB (3072 bytes) at memref.alloc
// BUF-SAME: modeled on buffers
// BUF-NEXT: arguments 1.00 KiB: inputs 1.00 KiB
// BUF-NEXT: allocated at the peak 2.00 KiB (2048 bytes)
func.func @lowered(%a: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %e = tensor.empty() : tensor<16x16xf32>
  %0 = linalg.exp ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = linalg.negf ins(%0 : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}

// -----

// Tests that a memory level other than tensors or buffers is an error.
// RUN: not shardx-opt %s --shardx-print-plan=memory-level=bytes -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: memory-level is tensors or buffers, not 'bytes'
