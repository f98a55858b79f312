// A kernel's index arithmetic divides by constants: the launch bounds and
// the collapsed loops' trip counts are folded and sunk into each launch
// before outlining, so the delinearization of a collapsed 4-d loop is
// multiplications and shifts, not a division by a kernel parameter per dim
// and element (three 64-bit divisions in software per element before: a
// GPT-2-small step's elementwise kernels ran at about a fifth of the
// H200's memory bandwidth).

// REQUIRES: cuda-toolkit
// RUN: shardx-compile --target=cuda --emit=ptx %s -o %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin

// The elementwise kernel: 256 threads a block, the dims' indices by
// multiply-high and shifts.
// PTX-LABEL: .entry heads_to_rows_kernel(
// PTX: .maxntid 256, 1, 1
// PTX-NOT: div.
// PTX-NOT: rem.
// PTX: mul.hi.u32
// PTX: cvt.rn.bf16.f32
// PTX: ret;
// The row max (after its fill kernel): a warp per row.
// PTX-LABEL: .entry row_max_kernel_0(
// PTX-NOT: div.
// PTX-NOT: rem.
// PTX: shfl.sync.bfly.b32
// PTX: ret;

// [batch, heads, seq, width] f32 -> [batch, seq, heads, width] bf16.
func.func @heads_to_rows(%x: tensor<8x12x1024x64xf32>) -> tensor<8x1024x12x64xbf16> {
  %e = tensor.empty() : tensor<8x1024x12x64xbf16>
  %r = linalg.generic {
      indexing_maps = [affine_map<(b, s, h, d) -> (b, h, s, d)>,
                       affine_map<(b, s, h, d) -> (b, s, h, d)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<8x12x1024x64xf32>) outs(%e : tensor<8x1024x12x64xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x1024x12x64xbf16>
  return %r : tensor<8x1024x12x64xbf16>
}

// A row max of a [batch, seq, heads] view: a warp per row.
func.func @row_max(%x: tensor<8x96x768xf32>) -> tensor<8x96xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<8x96xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<8x96xf32>) -> tensor<8x96xf32>
  %r = linalg.generic {
      indexing_maps = [affine_map<(b, s, k) -> (b, s, k)>,
                       affine_map<(b, s, k) -> (b, s)>],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<8x96x768xf32>) outs(%f : tensor<8x96xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %o, %a : f32
    linalg.yield %m : f32
  } -> tensor<8x96xf32>
  return %r : tensor<8x96xf32>
}
