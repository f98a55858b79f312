// RUN: shardx-opt %s --split-input-file --shardx-bucket-collectives="print-buckets" --verify-diagnostics | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-bucket-collectives="max-bucket-bytes=64" | FileCheck %s --check-prefix=CAP

// Three sum all-reduces over the same axis pack into one flat buffer (a 0-d,
// a 1-D and a 2-D tensor), emitted right before the first use of any of
// them; the max all-reduce keys a bucket of its own, alone, so it stays.

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// CHECK-LABEL: func.func @three
func.func @three(%a: tensor<f32>, %b: tensor<16xf32>, %c: tensor<4x8xf32>,
                 %d: tensor<16xf32>)
    -> (tensor<f32>, tensor<16xf32>, tensor<4x8xf32>, tensor<16xf32>) {
  // CHECK: %[[M:.*]] = shardx.all_reduce %{{.*}} reduction = max : tensor<16xf32>
  // CHECK: %[[E:.*]] = tensor.empty() : tensor<49xf32>
  // CHECK: %[[A1:.*]] = tensor.expand_shape %{{.*}} [] output_shape [1] : tensor<f32> into tensor<1xf32>
  // CHECK: %[[P0:.*]] = tensor.insert_slice %[[A1]] into %[[E]][0] [1] [1]
  // CHECK: %[[P1:.*]] = tensor.insert_slice %{{.*}} into %[[P0]][1] [16] [1]
  // CHECK: %[[C1:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
  // CHECK: %[[P2:.*]] = tensor.insert_slice %[[C1]] into %[[P1]][17] [32] [1]
  // CHECK: %[[R:.*]] = shardx.all_reduce %[[P2]] on @mesh axes = [0] reduction = sum : tensor<49xf32>
  // CHECK: %[[SA:.*]] = tensor.extract_slice %[[R]][0] [1] [1]
  // CHECK: %[[RA:.*]] = tensor.collapse_shape %[[SA]] [] : tensor<1xf32> into tensor<f32>
  // CHECK: %[[RB:.*]] = tensor.extract_slice %[[R]][1] [16] [1]
  // CHECK: %[[SC:.*]] = tensor.extract_slice %[[R]][17] [32] [1]
  // CHECK: %[[RC:.*]] = tensor.expand_shape %[[SC]] {{\[}}[0, 1]] output_shape [4, 8] : tensor<32xf32> into tensor<4x8xf32>
  // CHECK-NOT: shardx.all_reduce
  // CHECK: return %[[RA]], %[[RB]], %[[RC]], %[[M]]
  // expected-remark @below {{bucket of 3 all-reduces, 196 bytes}}
  %ra = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<f32>
  %rb = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %rd = shardx.all_reduce %d on @mesh axes = [0] reduction = max : tensor<16xf32>
  %rc = shardx.all_reduce %c on @mesh axes = [0] reduction = sum : tensor<4x8xf32>
  return %ra, %rb, %rc, %rd : tensor<f32>, tensor<16xf32>, tensor<4x8xf32>, tensor<16xf32>
}

// With a 64-byte cap, the 16-element tensors (64 bytes each) cannot share.
// CAP-LABEL: func.func @three
// CAP-COUNT-3: shardx.all_reduce %{{.*}} reduction = sum : tensor<{{.*}}>
// CAP-NOT: tensor<49xf32>

// -----

shardx.mesh @mesh(shape = 4, axes = ["dp"])

// A result read before the next all-reduce closes the bucket: nothing is
// merged.
// CHECK-LABEL: func.func @used_between
func.func @used_between(%a: tensor<16xf32>, %b: tensor<16xf32>)
    -> tensor<16xf32> {
  // CHECK: %[[RA:.*]] = shardx.all_reduce %arg0 on @mesh axes = [0] reduction = sum : tensor<16xf32>
  // CHECK: %[[S:.*]] = arith.addf %[[RA]], %arg1
  // CHECK: shardx.all_reduce %[[S]] on @mesh axes = [0] reduction = sum : tensor<16xf32>
  // CHECK-NOT: insert_slice
  %ra = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %s = arith.addf %ra, %b : tensor<16xf32>
  %rs = shardx.all_reduce %s on @mesh axes = [0] reduction = sum : tensor<16xf32>
  return %rs : tensor<16xf32>
}

// -----

shardx.mesh @mesh(shape = 2, axes = ["dp"])

// A 4 MiB tensor costs more to copy in and out (2 x 4 MiB at 10 GB/s) than
// the 5 us latency it would save, and a dynamic (uneven) shape cannot be
// packed: both stay alone; different axes never share.
// CHECK-LABEL: func.func @stay_alone
func.func @stay_alone(%a: tensor<1048576xf32>, %b: tensor<1048576xf32>,
                      %c: tensor<?xf32>, %d: tensor<?xf32>)
    -> (tensor<1048576xf32>, tensor<1048576xf32>, tensor<?xf32>, tensor<?xf32>) {
  // CHECK-COUNT-4: shardx.all_reduce
  // CHECK-NOT: insert_slice
  %ra = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<1048576xf32>
  %rb = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<1048576xf32>
  %rc = shardx.all_reduce %c on @mesh axes = [0] reduction = sum : tensor<?xf32>
  %rd = shardx.all_reduce %d on @mesh axes = [0] reduction = sum : tensor<?xf32>
  return %ra, %rb, %rc, %rd : tensor<1048576xf32>, tensor<1048576xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// The latency comes from the mesh: at 0.1 us, 128-byte tensors are worth
// packing (2 x 128 bytes at 10 GB/s = 0.026 us) but 8 KiB tensors (1.6 us)
// are not.
shardx.mesh @fast(shape = 2, latency = [0.1])

// CHECK-LABEL: func.func @latency_from_mesh
func.func @latency_from_mesh(%a: tensor<32xf32>, %b: tensor<32xf32>,
                             %c: tensor<2048xf32>, %d: tensor<2048xf32>)
    -> (tensor<32xf32>, tensor<32xf32>, tensor<2048xf32>, tensor<2048xf32>) {
  // CHECK-DAG: shardx.all_reduce %{{.*}} : tensor<2048xf32>
  // CHECK-DAG: shardx.all_reduce %{{.*}} : tensor<2048xf32>
  // CHECK-DAG: shardx.all_reduce %{{.*}} : tensor<64xf32>
  // expected-remark @below {{bucket of 2 all-reduces, 256 bytes}}
  %ra = shardx.all_reduce %a on @fast axes = [0] reduction = sum : tensor<32xf32>
  %rb = shardx.all_reduce %b on @fast axes = [0] reduction = sum : tensor<32xf32>
  %rc = shardx.all_reduce %c on @fast axes = [0] reduction = sum : tensor<2048xf32>
  %rd = shardx.all_reduce %d on @fast axes = [0] reduction = sum : tensor<2048xf32>
  return %ra, %rb, %rc, %rd : tensor<32xf32>, tensor<32xf32>, tensor<2048xf32>, tensor<2048xf32>
}

// -----

shardx.mesh @mesh(shape = 2, axes = ["dp"])

// All-reduces in a loop body bucket within the body; a result read only
// inside a later op's region forces the bucket before that op.
// CHECK-LABEL: func.func @nested
func.func @nested(%a: tensor<16xf32>, %b: tensor<16xf32>, %n: index)
    -> tensor<16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // CHECK: scf.for
  // CHECK: %[[R:.*]] = shardx.all_reduce %{{.*}} : tensor<32xf32>
  // CHECK: %[[X:.*]] = tensor.extract_slice %[[R]][0] [16] [1]
  // CHECK: %[[Y:.*]] = tensor.extract_slice %[[R]][16] [16] [1]
  // CHECK: arith.addf %[[X]], %[[Y]]
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %a) -> tensor<16xf32> {
    // expected-remark @below {{bucket of 2 all-reduces, 128 bytes}}
    %x = shardx.all_reduce %acc on @mesh axes = [0] reduction = sum : tensor<16xf32>
    %y = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<16xf32>
    %s = arith.addf %x, %y : tensor<16xf32>
    scf.yield %s : tensor<16xf32>
  }
  // CHECK: %[[P:.*]] = shardx.all_reduce %{{.*}} : tensor<32xf32>
  // CHECK: scf.for
  // expected-remark @below {{bucket of 2 all-reduces, 128 bytes}}
  %p = shardx.all_reduce %a on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %q = shardx.all_reduce %b on @mesh axes = [0] reduction = sum : tensor<16xf32>
  %t = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %r) -> tensor<16xf32> {
    %u = arith.addf %acc, %p : tensor<16xf32>
    scf.yield %u : tensor<16xf32>
  }
  %v = arith.addf %t, %q : tensor<16xf32>
  return %v : tensor<16xf32>
}

// -----

// A bucket must pay as a whole: two sum members whose copies in and out take
// 0.8 us each (each below the 1 us latency alone) save one latency of 1 us,
// less than their 1.6 us of copies, so they stay apart; three max members at
// 0.4 us each pay (1.2 us of copies, 2 us saved).
shardx.mesh @slow(shape = 2, latency = [1.0])

// CHECK-LABEL: func.func @whole_bucket
func.func @whole_bucket(%a: tensor<1000xf32>, %b: tensor<1000xf32>,
                        %c: tensor<500xf32>, %d: tensor<500xf32>,
                        %e: tensor<500xf32>)
    -> (tensor<1000xf32>, tensor<1000xf32>, tensor<500xf32>, tensor<500xf32>, tensor<500xf32>) {
  // CHECK: shardx.all_reduce %arg0 on @slow axes = [0] reduction = sum : tensor<1000xf32>
  // CHECK: shardx.all_reduce %arg1 on @slow axes = [0] reduction = sum : tensor<1000xf32>
  // CHECK: shardx.all_reduce %{{.*}} on @slow axes = [0] reduction = max : tensor<1500xf32>
  // expected-remark @below {{bucket of 3 all-reduces, 6000 bytes}}
  %rc = shardx.all_reduce %c on @slow axes = [0] reduction = max : tensor<500xf32>
  %ra = shardx.all_reduce %a on @slow axes = [0] reduction = sum : tensor<1000xf32>
  %rb = shardx.all_reduce %b on @slow axes = [0] reduction = sum : tensor<1000xf32>
  %rd = shardx.all_reduce %d on @slow axes = [0] reduction = max : tensor<500xf32>
  %re = shardx.all_reduce %e on @slow axes = [0] reduction = max : tensor<500xf32>
  return %ra, %rb, %rc, %rd, %re : tensor<1000xf32>, tensor<1000xf32>, tensor<500xf32>, tensor<500xf32>, tensor<500xf32>
}


// The traced DP x TP MLP train step (examples/mlp_dp_tp_train.mlir): its five
// all-reduces over dp (the gradients of two weights and two biases, 16x16 and
// 16 each, and the loss; 2180 bytes) become one bucketed all-reduce in the
// shardx-spmd pipeline; the tensor-parallel all-reduce over tp stays.
// RUN: shardx-opt %shardx_src_root/examples/mlp_dp_tp_train.mlir --shardx-spmd \
// RUN:   | FileCheck %s --check-prefix=DP
// DP-DAG: shardx.all_reduce %{{.*}} on @mesh axes = [1] reduction = sum : tensor<4x16xf32>
// DP-DAG: shardx.all_reduce %{{.*}} on @mesh axes = [0] reduction = sum : tensor<545xf32>
// DP-NOT: shardx.all_reduce

// The pipeline option turns bucketing off: the six all-reduces stay.
// RUN: shardx-opt %shardx_src_root/examples/mlp_dp_tp_train.mlir \
// RUN:   --shardx-spmd="bucket-collectives=false" | FileCheck %s --check-prefix=OFF
// OFF-COUNT-6: shardx.all_reduce %{{.*}} reduction = sum
// OFF-NOT: shardx.all_reduce
