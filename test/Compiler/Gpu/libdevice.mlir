// Tests that the cuda target needs libdevice for math functions and says
// where it looked when it is missing (the path comes from configure time or
// $SHARDX_LIBDEVICE).

// REQUIRES: cuda-toolkit
// RUN: env SHARDX_LIBDEVICE=%t.missing.bc not shardx-compile --target=cuda --emit=ptx %s -o %t.ptx 2>&1 | FileCheck %s
// RUN: env SHARDX_LIBDEVICE=%cuda_root/nvvm/libdevice/libdevice.10.bc shardx-compile --target=cuda --emit=ptx %s -o %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// CHECK: error: libdevice not found at '{{.*}}.missing.bc'
// PTX: .entry erf_kernel(
// PTX-NOT: .extern
func.func @erf(%x: tensor<1000xf32>) -> tensor<1000xf32> {
  %y = math.erf %x : tensor<1000xf32>
  return %y : tensor<1000xf32>
}
