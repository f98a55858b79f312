// RUN: shardx-opt --shardx-check-no-host-access --verify-diagnostics %s \
// RUN:   -o /dev/null

// A host function that still touches a buffer is an error: on the cuda
// target every buffer is device memory.
func.func @host_store(%x: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  // expected-error @+1 {{the cuda target left 'memref.store' on the host}}
  memref.store %f, %x[%c0] : memref<4xf32>
  return
}
