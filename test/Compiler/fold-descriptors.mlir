// RUN: shardx-opt %s --shardx-fold-descriptors --split-input-file | FileCheck %s

// Tests that an extraction of a field an insertion chain set becomes the
// inserted value (through an inserted sub-aggregate too), that the chain
// then goes, and that a field the chain did not set stays an extraction.
// CHECK-LABEL: llvm.func @host
// CHECK-SAME: (%[[P:.*]]: !llvm.ptr, %[[N:.*]]: i64, %[[S:.*]]: !llvm.struct<(ptr, ptr, i64)>)
// CHECK-NOT: llvm.insertvalue
// CHECK: %[[E:.*]] = llvm.extractvalue %[[S]][2]
// CHECK-NOT: llvm.extractvalue
// CHECK: llvm.call @use(%[[P]], %[[N]], %[[E]])
llvm.func @use(!llvm.ptr, i64, i64)
llvm.func @host(%p: !llvm.ptr, %n: i64, %s: !llvm.struct<(ptr, ptr, i64)>) {
  %0 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<1 x i64>)>
  %1 = llvm.insertvalue %p, %0[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>)>
  %2 = llvm.mlir.poison : !llvm.array<1 x i64>
  %3 = llvm.insertvalue %n, %2[0] : !llvm.array<1 x i64>
  %4 = llvm.insertvalue %3, %1[3] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>)>
  %5 = llvm.extractvalue %4[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>)>
  %6 = llvm.extractvalue %4[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>)>
  %7 = llvm.insertvalue %p, %s[0] : !llvm.struct<(ptr, ptr, i64)>
  %8 = llvm.extractvalue %7[2] : !llvm.struct<(ptr, ptr, i64)>
  llvm.call @use(%5, %6, %8) : (!llvm.ptr, i64, i64) -> ()
  llvm.return
}

// -----

// Tests that an outlined kernel is left as it is.
// CHECK-LABEL: llvm.func @shardx_kernel_k
// CHECK: llvm.insertvalue
// CHECK: llvm.extractvalue
llvm.func @shardx_kernel_k(%p: !llvm.ptr) -> !llvm.ptr {
  %0 = llvm.mlir.poison : !llvm.struct<(ptr, ptr)>
  %1 = llvm.insertvalue %p, %0[1] : !llvm.struct<(ptr, ptr)>
  %2 = llvm.extractvalue %1[1] : !llvm.struct<(ptr, ptr)>
  llvm.return %2 : !llvm.ptr
}
