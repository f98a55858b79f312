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
  // CHECK-DAG: tensor.extract_slice %[[R]][0] [1] [1]
  // CHECK-DAG: tensor.extract_slice %[[R]][1] [16] [1]
  // CHECK-DAG: tensor.extract_slice %[[R]][17] [32] [1]
  // CHECK-NOT: shardx.all_reduce
  // CHECK: return
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

// The traced data-parallel train step (test/Programs/dp_train.mlir): its four
// per-parameter gradient all-reduces (two weights, two biases; 4288 bytes)
// become one bucketed all-reduce in the shardx-spmd pipeline, placed before
// the optimizer step reads the first gradient.
// RUN: shardx-opt %shardx_src_root/test/Programs/dp_train.mlir --shardx-spmd \
// RUN:   | FileCheck %s --check-prefix=DP
// DP-NOT: shardx.all_reduce
// DP: shardx.all_reduce %{{.*}} on @mesh axes = [0] reduction = sum : tensor<1072xf32>
// DP-NOT: shardx.all_reduce

// The pipeline option turns bucketing off: the four all-reduces stay.
// RUN: shardx-opt %shardx_src_root/test/Programs/dp_train.mlir \
// RUN:   --shardx-spmd="bucket-collectives=false" | FileCheck %s --check-prefix=OFF
// OFF-COUNT-4: shardx.all_reduce %{{.*}} reduction = sum
// OFF-NOT: shardx.all_reduce
