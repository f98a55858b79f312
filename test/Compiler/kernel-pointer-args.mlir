// RUN: shardx-opt %s --shardx-kernel-pointer-args="layer-functions=true" --split-input-file | FileCheck %s
// RUN: shardx-opt %s --shardx-kernel-pointer-args --split-input-file | FileCheck %s --check-prefix=OFF

// Tests that a kernel's statically shaped buffers become pointers: the
// caller passes the aligned pointer plus the view's dynamic offset (an
// identity layout's pointer as it is), the kernel rebuilds each descriptor
// from its type with offset 0, sizes and strides constant, and a scalar
// argument stays as it is.
// CHECK-LABEL: func.func @host
// CHECK-SAME: (%[[BUF:.*]]: memref<128xf32>, %[[OUT:.*]]: memref<4x8xf32>, %[[S:.*]]: f32)
// CHECK: %[[V:.*]] = memref.cast
// CHECK: %[[D0:.*]] = builtin.unrealized_conversion_cast %[[V]] : memref<64xf32, strided<[1], offset: ?>> to !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK: %[[P0:.*]] = llvm.extractvalue %[[D0]][1]
// CHECK: %[[O0:.*]] = llvm.extractvalue %[[D0]][2]
// CHECK: %[[Q0:.*]] = llvm.getelementptr %[[P0]][%[[O0]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: %[[D1:.*]] = builtin.unrealized_conversion_cast %[[OUT]] : memref<4x8xf32> to !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK: %[[P1:.*]] = llvm.extractvalue %[[D1]][1]
// CHECK-NOT: llvm.getelementptr
// CHECK: call @shardx_kernel_a(%[[Q0]], %[[P1]], %[[S]]) : (!llvm.ptr, !llvm.ptr, f32) -> ()
// CHECK: func.func private @shardx_kernel_a(%[[A:.*]]: !llvm.ptr, %[[B:.*]]: !llvm.ptr, %[[X:.*]]: f32)
// CHECK: llvm.insertvalue %[[A]], %{{.*}}[0]
// CHECK: llvm.insertvalue %[[A]], %{{.*}}[1]
// CHECK: %[[Z:.*]] = llvm.mlir.constant(0 : index) : i64
// CHECK: llvm.insertvalue %[[Z]], %{{.*}}[2]
// CHECK: %[[C64:.*]] = llvm.mlir.constant(64 : index) : i64
// CHECK: llvm.insertvalue %[[C64]], %{{.*}}[3, 0]
// CHECK: %[[C1:.*]] = llvm.mlir.constant(1 : index) : i64
// CHECK: %[[DA:.*]] = llvm.insertvalue %[[C1]], %{{.*}}[4, 0]
// CHECK: %[[MA:.*]] = builtin.unrealized_conversion_cast %[[DA]] : {{.*}} to memref<64xf32, strided<[1], offset: ?>>
// CHECK: llvm.insertvalue %[[B]], %{{.*}}[0]
// CHECK: llvm.insertvalue %[[B]], %{{.*}}[1]
// CHECK: %[[C4:.*]] = llvm.mlir.constant(4 : index) : i64
// CHECK: llvm.insertvalue %[[C4]], %{{.*}}[3, 0]
// CHECK: %[[C8:.*]] = llvm.mlir.constant(8 : index) : i64
// CHECK: llvm.insertvalue %[[C8]], %{{.*}}[3, 1]
// CHECK: %[[S8:.*]] = llvm.mlir.constant(8 : index) : i64
// CHECK: llvm.insertvalue %[[S8]], %{{.*}}[4, 0]
// CHECK: %[[MB:.*]] = builtin.unrealized_conversion_cast {{.*}} to memref<4x8xf32>
// CHECK: memref.load %[[MA]]
// CHECK: memref.store %[[X]], %[[MB]]
func.func @host(%buf: memref<128xf32>, %out: memref<4x8xf32>, %s: f32) {
  %v = memref.subview %buf[64] [64] [1] : memref<128xf32> to memref<64xf32, strided<[1], offset: 64>>
  %c = memref.cast %v : memref<64xf32, strided<[1], offset: 64>> to memref<64xf32, strided<[1], offset: ?>>
  call @shardx_kernel_a(%c, %out, %s) : (memref<64xf32, strided<[1], offset: ?>>, memref<4x8xf32>, f32) -> ()
  return
}
func.func private @shardx_kernel_a(%a: memref<64xf32, strided<[1], offset: ?>>, %b: memref<4x8xf32>, %x: f32) {
  %i = arith.constant 3 : index
  %v = memref.load %a[%i] : memref<64xf32, strided<[1], offset: ?>>
  memref.store %x, %b[%i, %i] : memref<4x8xf32>
  memref.store %v, %b[%i, %i] : memref<4x8xf32>
  return
}

// -----

// Tests that a buffer with a dynamic size keeps the descriptor ABI while
// the kernel's static buffer becomes a pointer, that a kernel whose body
// the cache holds (a declaration) changes its signature alike, and that
// functions other than kernels keep theirs.
// CHECK-LABEL: func.func @mixed
// CHECK: call @shardx_kernel_b(%{{.*}}, %{{.*}}) : (memref<?xf32>, !llvm.ptr) -> ()
// CHECK: call @shardx_kernel_c(%{{.*}}) : (!llvm.ptr) -> ()
// CHECK: call @layer(%{{.*}}) : (memref<8xf32>) -> ()
// CHECK: func.func private @shardx_kernel_b(%{{.*}}: memref<?xf32>, %{{.*}}: !llvm.ptr)
// CHECK: func.func private @shardx_kernel_c(!llvm.ptr)
// CHECK: func.func private @layer(memref<8xf32>)
func.func @mixed(%d: memref<?xf32>, %e: memref<8xf32>) {
  call @shardx_kernel_b(%d, %e) : (memref<?xf32>, memref<8xf32>) -> ()
  call @shardx_kernel_c(%e) : (memref<8xf32>) -> ()
  call @layer(%e) : (memref<8xf32>) -> ()
  return
}
func.func private @shardx_kernel_b(%d: memref<?xf32>, %e: memref<8xf32>) {
  %i = arith.constant 0 : index
  %v = memref.load %d[%i] : memref<?xf32>
  memref.store %v, %e[%i] : memref<8xf32>
  return
}
func.func private @shardx_kernel_c(memref<8xf32>)
func.func private @layer(memref<8xf32>)

// -----

// Tests that, with layer-functions=true, a layer function's static buffer
// becomes a pointer where every use, through views, only addresses elements
// (a load, a copy, a kernel, the runtime), and keeps its descriptor where
// the body may read the allocated pointer: a buffer it frees, one it
// returns, one it hands to a function other than a kernel or the runtime.
// A static result travels as its allocated and aligned pointers, the
// caller rebuilding its descriptor. Without the option, layer functions
// keep their ABI.
// CHECK-LABEL: func.func @layers
// CHECK-SAME: (%[[A:.*]]: memref<8xf32>, %[[B:.*]]: memref<8xf32>, %[[C:.*]]: memref<8xf32>, %[[D:.*]]: memref<8xf32>)
// CHECK: %[[DA:.*]] = builtin.unrealized_conversion_cast %[[A]] : memref<8xf32> to !llvm.struct
// CHECK: %[[PA:.*]] = llvm.extractvalue %[[DA]][1]
// CHECK: %[[R:.*]]:2 = call @shardx_call_1(%[[PA]], %[[B]], %[[C]], %[[D]]) : (!llvm.ptr, memref<8xf32>, memref<8xf32>, memref<8xf32>) -> (!llvm.ptr, !llvm.ptr)
// CHECK: llvm.insertvalue %[[R]]#0, %{{.*}}[0]
// CHECK: llvm.insertvalue %[[R]]#1, %{{.*}}[1]
// CHECK: %[[MR:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<{{.*}}> to memref<8xf32>
// CHECK: memref.dealloc %[[MR]]
// CHECK: func.func private @shardx_call_1(%[[X:.*]]: !llvm.ptr, %[[FREED:.*]]: memref<8xf32>, %[[RETURNED:.*]]: memref<8xf32>, %[[PASSED:.*]]: memref<8xf32>) -> (!llvm.ptr, !llvm.ptr)
// CHECK: llvm.insertvalue %[[X]], %{{.*}}[0]
// CHECK: llvm.insertvalue %[[X]], %{{.*}}[1]
// CHECK: %[[MX:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<{{.*}}> to memref<8xf32>
// CHECK: memref.load %[[MX]]
// CHECK: memref.cast %[[MX]]
// CHECK: memref.dealloc %[[FREED]]
// CHECK: call @other(%[[PASSED]])
// CHECK: %[[DR:.*]] = builtin.unrealized_conversion_cast %[[RETURNED]] : memref<8xf32> to !llvm.struct
// CHECK: %[[RA:.*]] = llvm.extractvalue %[[DR]][0]
// CHECK: %[[RB:.*]] = llvm.extractvalue %[[DR]][1]
// CHECK: return %[[RA]], %[[RB]] : !llvm.ptr, !llvm.ptr
// OFF-LABEL: func.func @layers
// OFF: call @shardx_call_1(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>) -> memref<8xf32>
func.func @layers(%a: memref<8xf32>, %b: memref<8xf32>, %c: memref<8xf32>, %d: memref<8xf32>) {
  %r = call @shardx_call_1(%a, %b, %c, %d) : (memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  memref.dealloc %r : memref<8xf32>
  return
}
func.func private @shardx_call_1(%x: memref<8xf32>, %freed: memref<8xf32>, %returned: memref<8xf32>, %passed: memref<8xf32>) -> memref<8xf32> {
  %i = arith.constant 0 : index
  %v = memref.load %x[%i] : memref<8xf32>
  memref.store %v, %freed[%i] : memref<8xf32>
  %dyn = memref.cast %x : memref<8xf32> to memref<?xf32, strided<[?], offset: ?>>
  call @shardx_rt_use(%dyn) : (memref<?xf32, strided<[?], offset: ?>>) -> ()
  %y = memref.alloc() : memref<8xf32>
  memref.copy %x, %y : memref<8xf32> to memref<8xf32>
  call @shardx_kernel_d(%x, %y) : (memref<8xf32>, memref<8xf32>) -> ()
  memref.dealloc %y : memref<8xf32>
  memref.dealloc %freed : memref<8xf32>
  call @other(%passed) : (memref<8xf32>) -> ()
  return %returned : memref<8xf32>
}
func.func private @shardx_kernel_d(memref<8xf32>, memref<8xf32>)
func.func private @shardx_rt_use(memref<?xf32, strided<[?], offset: ?>>)
func.func private @other(memref<8xf32>)

// -----

// Tests that a buffer freed through a view of it (the base buffer of its
// strided metadata, reinterpreted) keeps its descriptor.
// CHECK-LABEL: func.func @view_freed
// CHECK: call @shardx_call_2(%{{.*}}) : (memref<4xf32>) -> ()
// CHECK: func.func private @shardx_call_2(%{{.*}}: memref<4xf32>)
func.func @view_freed(%a: memref<4xf32>) {
  call @shardx_call_2(%a) : (memref<4xf32>) -> ()
  return
}
func.func private @shardx_call_2(%a: memref<4xf32>) {
  %base, %offset, %size, %stride = memref.extract_strided_metadata %a : memref<4xf32> -> memref<f32>, index, index, index
  %v = memref.reinterpret_cast %base to offset: [0], sizes: [2, 2], strides: [2, 1] : memref<f32> to memref<2x2xf32>
  memref.dealloc %v : memref<2x2xf32>
  return
}
