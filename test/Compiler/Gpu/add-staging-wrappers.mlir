// RUN: shardx-opt --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(shardx-add-staging-wrappers)' %s \
// RUN:   | FileCheck %s

// The cuda target's entry points (lib/Compiler/GpuEntryPoints.cpp), added
// on the LLVM dialect from the signatures shardx-record-staging-signatures
// recorded (tested in device-passes.mlir, SIG). No GPU is needed.

// Tests that an entry point with a recorded signature gets its three
// wrappers (staged, on device descriptors, resident), that the signature
// becomes a constant string and that the module attribute is removed; an
// entry point without a signature gets none.
// CHECK-LABEL: module {
// CHECK-NOT: shardx.staging_signatures
// CHECK-DAG: llvm.func @shardx_rt_cuda_stage_in(!llvm.ptr, !llvm.ptr) -> !llvm.ptr
// CHECK-DAG: llvm.func @shardx_rt_cuda_stage_out(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: llvm.func @shardx_rt_cuda_run_resident(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-LABEL: llvm.func @_mlir_ciface_step(
// CHECK: llvm.mlir.global internal constant @shardx_signature_step("O1:4 I2:4 \00")
// CHECK-LABEL: llvm.func @shardx_entry_step_device(
// CHECK-SAME: %[[DEV:.*]]: !llvm.ptr)
// CHECK: %[[S0:.*]] = llvm.getelementptr %[[DEV]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[P0:.*]] = llvm.load %[[S0]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[S1:.*]] = llvm.getelementptr %[[DEV]][1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[P1:.*]] = llvm.load %[[S1]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.call @_mlir_ciface_step(%[[P0]], %[[P1]])
// CHECK-LABEL: llvm.func @shardx_entry_step(
// CHECK-SAME: %[[ARGV:.*]]: !llvm.ptr)
// CHECK: %[[SIG:.*]] = llvm.mlir.addressof @shardx_signature_step
// CHECK: %[[IN:.*]] = llvm.call @shardx_rt_cuda_stage_in(%[[ARGV]], %[[SIG]])
// CHECK: llvm.call @shardx_entry_step_device(%[[IN]])
// CHECK: llvm.call @shardx_rt_cuda_stage_out(%[[ARGV]], %[[IN]], %[[SIG]])
// CHECK-LABEL: llvm.func @shardx_entry_step_resident(
// CHECK-SAME: %[[RARGV:.*]]: !llvm.ptr)
// CHECK: %[[RSIG:.*]] = llvm.mlir.addressof @shardx_signature_step
// CHECK: %[[ENTRY:.*]] = llvm.mlir.addressof @shardx_entry_step_device
// CHECK: llvm.call @shardx_rt_cuda_run_resident(%[[RARGV]], %[[RSIG]], %[[ENTRY]])
// CHECK-NOT: shardx_entry_helper
module attributes {shardx.staging_signatures = {step = "O1:4 I2:4 "}} {
  llvm.func @_mlir_ciface_step(%out: !llvm.ptr, %in: !llvm.ptr) {
    llvm.return
  }
  llvm.func @_mlir_ciface_helper(%in: !llvm.ptr) {
    llvm.return
  }
}

// -----

// Tests that the pass refuses a module whose signatures were not recorded.
// expected-error @+1 {{no 'shardx.staging_signatures' (run shardx-record-staging-signatures before bufferization)}}
module {
  llvm.func @_mlir_ciface_step(%out: !llvm.ptr, %in: !llvm.ptr) {
    llvm.return
  }
}
