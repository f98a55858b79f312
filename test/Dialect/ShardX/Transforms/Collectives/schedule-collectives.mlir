// RUN: shardx-opt %s --split-input-file --shardx-schedule-collectives | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-schedule-collectives="max-bytes-in-flight=128" | FileCheck %s --check-prefix=CAP
// RUN: shardx-opt %s --split-input-file --shardx-schedule-collectives="print-schedule" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MODEL

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that each all-reduce starts right after its operand is computed,
// before the compute that does not need it, and that its wait directly
// precedes the first use of its result.
// CHECK-LABEL: func.func @overlap
// CHECK-SAME: %[[X:[^:]*]]: tensor<16x16xf32>, %[[W:[^:]*]]: tensor<16x16xf32>
func.func @overlap(%x: tensor<16x16xf32>, %w: tensor<16x16xf32>)
    -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  // CHECK: %[[G:.*]] = linalg.matmul ins(%[[X]], %[[W]]
  // CHECK-NEXT: %[[P:.*]] = shardx.all_reduce_start %[[G]] on @mesh axes = [0] reduction = sum : tensor<16x16xf32>
  // CHECK-NEXT: %[[H:.*]] = linalg.matmul ins(%[[X]], %[[X]]
  // CHECK-NEXT: %[[R:.*]] = shardx.wait %[[P]] : tensor<16x16xf32>
  // CHECK-NEXT: %[[U:.*]] = arith.subf %[[W]], %[[R]]
  // CHECK-NOT: shardx.all_reduce %
  %e = tensor.empty() : tensor<16x16xf32>
  %g = linalg.matmul ins(%x, %w : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %h = linalg.matmul ins(%x, %x : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = shardx.all_reduce %g on @mesh axes = [0] reduction = sum : tensor<16x16xf32>
  %u = arith.subf %w, %r : tensor<16x16xf32>
  return %u, %h : tensor<16x16xf32>, tensor<16x16xf32>
}

// CAP-LABEL: func.func @overlap
// MODEL: remark: schedule of @overlap: 1 collectives (1 async), 5.005 us communication; exposed 5.005 us before, 0.909 us after scheduling

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that the ops computing a start's operand (a bucket's packing) move
// up with it, and that a result never read is waited for before the return.
// CHECK-LABEL: func.func @packing
// CHECK-SAME: %[[A:[^:]*]]: tensor<16xf32>, %[[B:[^:]*]]: tensor<16xf32>
func.func @packing(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  // CHECK: %[[E:.*]] = tensor.empty() : tensor<32xf32>
  // CHECK-NEXT: %[[I0:.*]] = tensor.insert_slice %[[A]] into %[[E]][0]
  // CHECK-NEXT: %[[I1:.*]] = tensor.insert_slice %[[B]] into %[[I0]][16]
  // CHECK-NEXT: %[[P:.*]] = shardx.all_reduce_start %[[I1]]
  // CHECK-NEXT: %[[S:.*]] = arith.mulf %[[A]], %[[B]]
  // CHECK-NEXT: %{{.*}} = shardx.wait %[[P]]
  // CHECK-NEXT: return %[[S]]
  %s = arith.mulf %a, %b : tensor<16xf32>
  %e = tensor.empty() : tensor<32xf32>
  %i0 = tensor.insert_slice %a into %e[0] [16] [1] : tensor<16xf32> into tensor<32xf32>
  %i1 = tensor.insert_slice %b into %i0[16] [16] [1] : tensor<16xf32> into tensor<32xf32>
  %r = shardx.all_reduce %i1 on @mesh axes = [0] reduction = sum : tensor<32xf32>
  return %s : tensor<16xf32>
}

// MODEL: remark: schedule of @packing: 1 collectives (1 async)
// MODEL-NEXT: all_reduce_start of 128 bytes (bucket of 2)

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that the bytes in flight stay under the cap: with 128 bytes, the
// third 64-byte all-reduce starts only after the first one's wait, although
// that result is read only at the end.
// CHECK-LABEL: func.func @in_flight
// CHECK: %[[P0:.*]] = shardx.all_reduce_start %arg0
// CHECK-NEXT: %[[P1:.*]] = shardx.all_reduce_start %arg1
// CHECK-NEXT: %[[P2:.*]] = shardx.all_reduce_start %arg2
// CHECK: shardx.wait %[[P0]]
// CAP-LABEL: func.func @in_flight
// CAP: %[[P0:.*]] = shardx.all_reduce_start %arg0
// CAP-NEXT: %[[P1:.*]] = shardx.all_reduce_start %arg1
// CAP-NEXT: %[[R0:.*]] = shardx.wait %[[P0]]
// CAP-NEXT: %[[P2:.*]] = shardx.all_reduce_start %arg2
// CAP-NEXT: %[[R1:.*]] = shardx.wait %[[P1]]
// CAP-NEXT: %[[P3:.*]] = shardx.all_reduce_start %arg3
// CAP-DAG: %[[R2:.*]] = shardx.wait %[[P2]]
// CAP-DAG: %[[R3:.*]] = shardx.wait %[[P3]]
// CAP: return %[[R0]], %[[R1]], %[[R2]], %[[R3]]
func.func @in_flight(%a: tensor<16xf32>, %b: tensor<16xf32>, %c: tensor<16xf32>,
                     %d: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %ra = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %rb = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %rc = shardx.all_reduce %c on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %rd = shardx.all_reduce %d on @mesh axes = [0] reduction = sum : tensor<16xf32>
  return %ra, %rb, %rc, %rd : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that a collective larger than the cap still runs, alone.
// CAP-LABEL: func.func @too_big
// CAP: %[[P0:.*]] = shardx.all_reduce_start %arg0
// CAP-NEXT: %[[R0:.*]] = shardx.wait %[[P0]]
// CAP-NEXT: %[[P1:.*]] = shardx.all_reduce_start %arg1
// CAP-NEXT: %[[R1:.*]] = shardx.wait %[[P1]]
func.func @too_big(%a: tensor<64xf32>, %b: tensor<64xf32>)
    -> (tensor<64xf32>, tensor<64xf32>) {
  %ra = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<64xf32>
  %rb = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<64xf32>
  return %ra, %rb : tensor<64xf32>, tensor<64xf32>
}

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that a start stays in its region: an all-reduce inside a loop body
// waits there, before the yield that reads it.
// CHECK-LABEL: func.func @nested
// CHECK: scf.for
// CHECK: %[[P:.*]] = shardx.all_reduce_start
// CHECK-NEXT: %[[R:.*]] = shardx.wait %[[P]]
// CHECK-NEXT: scf.yield %[[R]]
func.func @nested(%a: tensor<16xf32>) -> tensor<16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %a) -> tensor<16xf32> {
    %s = shardx.all_reduce %t on @mesh axes = [0] reduction = sum : tensor<16xf32>
    scf.yield %s : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests FSDP-style overlap: the all-gather of layer 1's (unevenly sharded)
// weight starts before layer 0's compute, which does not need it (the
// prefetch), and waits directly before its first use; the reduce-scatter
// of layer 1's gradient starts right after the gradient is computed, before
// the independent matmul, and waits directly before the return.
// CHECK-LABEL: func.func @fsdp
// CHECK-SAME: %[[X:[^:]*]]: tensor<16x16xf32>, %[[W0:[^:]*]]: tensor<4x16xf32>, %[[W1:[^:]*]]: tensor<?x16xf32>
// CHECK: %[[P0:.*]] = shardx.all_gather_start %[[W0]] on @mesh axes = [0] dim = 0 : tensor<4x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[P1:.*]] = shardx.all_gather_start %[[W1]] on @mesh axes = [0] dim = 0 sizes = [5, 5, 5, 1] : tensor<?x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[E:.*]] = tensor.empty() : tensor<16x16xf32>
// CHECK-NEXT: %[[G0:.*]] = shardx.wait %[[P0]] : tensor<16x16xf32>
// CHECK-NEXT: %[[H:.*]] = linalg.matmul ins(%[[X]], %[[G0]]
// CHECK-NEXT: %[[G1:.*]] = shardx.wait %[[P1]] : tensor<16x16xf32>
// CHECK-NEXT: %[[Y:.*]] = linalg.matmul ins(%[[H]], %[[G1]]
// CHECK-NEXT: %[[PS:.*]] = shardx.reduce_scatter_start %[[Y]] on @mesh axes = [0] dim = 0 reduction = sum sizes = [5, 5, 5, 1] : tensor<16x16xf32> -> tensor<?x16xf32>
// CHECK-NEXT: %[[Z:.*]] = linalg.matmul ins(%[[X]], %[[X]]
// CHECK-NEXT: %[[S:.*]] = shardx.wait %[[PS]] : tensor<?x16xf32>
// CHECK-NEXT: return %[[S]], %[[Z]]
// CAP-LABEL: func.func @fsdp
// CAP: shardx.all_gather_start
// CAP-NEXT: shardx.wait
// CAP-NEXT: shardx.all_gather_start
func.func @fsdp(%x: tensor<16x16xf32>, %w0: tensor<4x16xf32>, %w1: tensor<?x16xf32>)
    -> (tensor<?x16xf32>, tensor<16x16xf32>) {
  %e = tensor.empty() : tensor<16x16xf32>
  %g0 = shardx.all_gather %w0 on @mesh axes = [0] dim = 0 : tensor<4x16xf32> -> tensor<16x16xf32>
  %h = linalg.matmul ins(%x, %g0 : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %g1 = shardx.all_gather %w1 on @mesh axes = [0] dim = 0 sizes = [5, 5, 5, 1] : tensor<?x16xf32> -> tensor<16x16xf32>
  %y = linalg.matmul ins(%h, %g1 : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %z = linalg.matmul ins(%x, %x : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %s = shardx.reduce_scatter %y on @mesh axes = [0] dim = 0 reduction = sum sizes = [5, 5, 5, 1] : tensor<16x16xf32> -> tensor<?x16xf32>
  return %s, %z : tensor<?x16xf32>, tensor<16x16xf32>
}

// MODEL: remark: schedule of @fsdp: 3 collectives (3 async)
// MODEL-NEXT: all_gather_start of 1024 bytes
// MODEL-NEXT: all_gather_start of 1024 bytes
// MODEL-NEXT: reduce_scatter_start of 1024 bytes

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// Tests that the cap counts a collective's larger side: an all-gather of
// 64 bytes into 256 holds 256, so with 128 bytes in flight the second
// all-gather starts only after the first one's wait (and a single one over
// the cap still starts alone).
// CAP-LABEL: func.func @gather_cap
// CAP: %[[P0:.*]] = shardx.all_gather_start %arg0
// CAP-NEXT: %[[R0:.*]] = shardx.wait %[[P0]]
// CAP-NEXT: %[[P1:.*]] = shardx.all_gather_start %arg1
// CAP-NEXT: %[[R1:.*]] = shardx.wait %[[P1]]
// CAP-NEXT: return %[[R0]], %[[R1]]
// CHECK-LABEL: func.func @gather_cap
// CHECK: %[[P0:.*]] = shardx.all_gather_start %arg0
// CHECK-NEXT: %[[P1:.*]] = shardx.all_gather_start %arg1
// CHECK-DAG: shardx.wait %[[P0]]
// CHECK-DAG: shardx.wait %[[P1]]
// CHECK: return
func.func @gather_cap(%a: tensor<16xf32>, %b: tensor<16xf32>)
    -> (tensor<64xf32>, tensor<64xf32>) {
  %ga = shardx.all_gather %a on @mesh axes = [0] dim = 0 : tensor<16xf32> -> tensor<64xf32>
  %gb = shardx.all_gather %b on @mesh axes = [0] dim = 0 : tensor<16xf32> -> tensor<64xf32>
  return %ga, %gb : tensor<64xf32>, tensor<64xf32>
}

// The traced DP x TP MLP train step (examples/mlp_dp_tp_train.mlir) through
// shardx-spmd with scheduling: the five dp all-reduces stay one bucket, the
// tp all-reduce of the forward pass is the other collective, both async.
// RUN: shardx-opt %shardx_src_root/examples/mlp_dp_tp_train.mlir \
// RUN:   --shardx-spmd="schedule-collectives=true print-schedule=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DP
// DP: remark: schedule of @mlp_dp_tp_train: 2 collectives (2 async)
// DP-NEXT: all_reduce_start of 256 bytes
// DP-NEXT: all_reduce_start of 2180 bytes (bucket of 5)
// DP-COUNT-2: shardx.all_reduce_start
// DP-NOT: shardx.all_reduce

// Without the option the pipeline's collectives stay synchronous.
// RUN: shardx-opt %shardx_src_root/examples/mlp_dp_tp_train.mlir --shardx-spmd \
// RUN:   | FileCheck %s --check-prefix=OFF
// OFF-NOT: shardx.all_reduce_start
// OFF-NOT: shardx.wait

// shardx-print-plan on the local program gives the same summary.
// RUN: shardx-opt %shardx_src_root/examples/mlp_dp_tp_train.mlir --shardx-spmd \
// RUN:   | shardx-opt --shardx-print-plan -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PLAN
// PLAN: remark: schedule of @mlp_dp_tp_train: 2 collectives (2 async)
// PLAN-NEXT: all_reduce_start of 256 bytes
// PLAN-NEXT: all_reduce_start of 2180 bytes (bucket of 5)
