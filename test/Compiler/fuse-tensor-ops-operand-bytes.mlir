// RUN: shardx-opt --shardx-fuse-tensor-ops %s | FileCheck %s --check-prefix=ALL
// RUN: shardx-opt "--shardx-fuse-tensor-ops=max-operand-bytes=100" %s | FileCheck %s --check-prefix=CAP

// A chain of 0-d adds, as a gradient norm adds one sum per parameter. With
// no bound, it fuses into one op of 6 operands (5 inputs and the init). A
// 0-d buffer's descriptor takes 24 bytes (two pointers and an offset), so
// under 100 bytes an op keeps at most 4 distinct operands: the chain stops
// fusing there and continues in a second op.

// ALL-LABEL: func.func @norm
// ALL: linalg.generic
// ALL-SAME: ins(%arg0, %arg1, %arg2, %arg3, %arg4 :
// ALL-NOT: linalg.generic
// ALL: return

// CAP-LABEL: func.func @norm
// CAP: %[[A:.*]] = linalg.generic
// CAP-SAME: ins(%arg0, %arg1, %arg2 :
// CAP: %[[B:.*]] = linalg.generic
// CAP-SAME: ins(%[[A]], %arg3, %arg4 :
// CAP-NOT: linalg.generic
// CAP: return %[[B]]
#s = affine_map<() -> ()>
func.func @norm(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>,
                %d: tensor<f32>, %e: tensor<f32>) -> tensor<f32> {
  %0 = tensor.empty() : tensor<f32>
  %ab = linalg.generic {indexing_maps = [#s, #s, #s], iterator_types = []}
      ins(%a, %b : tensor<f32>, tensor<f32>) outs(%0 : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %1 = tensor.empty() : tensor<f32>
  %abc = linalg.generic {indexing_maps = [#s, #s, #s], iterator_types = []}
      ins(%ab, %c : tensor<f32>, tensor<f32>) outs(%1 : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %2 = tensor.empty() : tensor<f32>
  %abcd = linalg.generic {indexing_maps = [#s, #s, #s], iterator_types = []}
      ins(%abc, %d : tensor<f32>, tensor<f32>) outs(%2 : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %3 = tensor.empty() : tensor<f32>
  %all = linalg.generic {indexing_maps = [#s, #s, #s], iterator_types = []}
      ins(%abcd, %e : tensor<f32>, tensor<f32>) outs(%3 : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %all : tensor<f32>
}

// A body that reads a table captured from above (a gather's, as
// shardx-decompose-for-codegen writes one) passes the table to the kernel
// too: a 1-D buffer's descriptor takes 40 bytes. Fusing @gathers' first op
// into the second would take %a, the second's init and both tables, 128
// bytes: over 100, so the ops stay apart (counting operands alone, 48
// bytes, they fused). Without a bound all three fuse.

// ALL-LABEL: func.func @gathers
// ALL-COUNT-1: linalg.generic
// ALL-NOT: linalg.generic
// ALL: return

// CAP-LABEL: func.func @gathers
// CAP-COUNT-3: linalg.generic
// CAP-NOT: linalg.generic
// CAP: return
func.func @gathers(%a: tensor<f32>, %t1: tensor<8xf32>, %t2: tensor<8xf32>,
                   %t3: tensor<8xf32>) -> tensor<f32> {
  %c1 = arith.constant 1 : index
  %0 = tensor.empty() : tensor<f32>
  %g1 = linalg.generic {indexing_maps = [#s, #s], iterator_types = []}
      ins(%a : tensor<f32>) outs(%0 : tensor<f32>) {
  ^bb0(%x: f32, %o: f32):
    %v = tensor.extract %t1[%c1] : tensor<8xf32>
    %r = arith.addf %x, %v : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %1 = tensor.empty() : tensor<f32>
  %g2 = linalg.generic {indexing_maps = [#s, #s], iterator_types = []}
      ins(%g1 : tensor<f32>) outs(%1 : tensor<f32>) {
  ^bb0(%x: f32, %o: f32):
    %v = tensor.extract %t2[%c1] : tensor<8xf32>
    %r = arith.addf %x, %v : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %2 = tensor.empty() : tensor<f32>
  %g3 = linalg.generic {indexing_maps = [#s, #s], iterator_types = []}
      ins(%g2 : tensor<f32>) outs(%2 : tensor<f32>) {
  ^bb0(%x: f32, %o: f32):
    %v = tensor.extract %t3[%c1] : tensor<8xf32>
    %r = arith.addf %x, %v : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %g3 : tensor<f32>
}
