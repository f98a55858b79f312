// RUN: shardx-opt --shardx-fuse-tensor-ops --split-input-file %s | FileCheck %s

// A cross-entropy's widening of the bf16 logits, read by the row max and by
// the shifted logits: each reader widens the bf16 logits itself, so no f32
// logits are written and read back. The shifted logits (x - max) then read
// bf16 and are in turn computed again in their two readers (the row sum of
// their exponentials and the output), the exponential fused into the sum.
// CHECK-LABEL: func.func @widened_logits
// CHECK-NOT: tensor<8x16xf32>) outs
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.maximumf
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0, %[[MAX]] : tensor<8x16xbf16>, tensor<8xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.subf
// CHECK-NEXT: math.exp
// CHECK-NEXT: arith.addf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, %[[MAX]], %[[SUM]] : tensor<8x16xbf16>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.subf
// CHECK-NEXT: arith.divf
// CHECK-NOT: linalg.generic
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @widened_logits(%x: tensor<8x16xbf16>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8x16xbf16>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %v = arith.extf %a : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<8xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%w : tensor<8x16xf32>) outs(%fm : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.maximumf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %shifted = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%w, %max : tensor<8x16xf32>, tensor<8xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %v = arith.subf %a, %m : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%shifted : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = math.exp %a : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%exp : tensor<8x16xf32>) outs(%fs : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.addf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%shifted, %sum : tensor<8x16xf32>, tensor<8xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.divf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}

// -----

// A sum of two f32 tensors read twice is written once: computed again, each
// reader would read more bytes (two f32 inputs) than the result has.
// CHECK-LABEL: func.func @wider_inputs_stay
// CHECK: %[[ADD:.*]] = linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[ADD]] : tensor<8x16xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[ADD]] : tensor<8x16xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @wider_inputs_stay(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8x16xf32>
  %add = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %v = arith.addf %x, %y : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%add : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %v = arith.addf %x, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%add : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %v = arith.maximumf %x, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %s, %m : tensor<8xf32>, tensor<8xf32>
}

// -----

// A math function read twice is computed once (once per reader otherwise).
// CHECK-LABEL: func.func @math_stays
// CHECK: %[[EXP:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<8x16xbf16>)
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} ins(%[[EXP]] : tensor<8x16xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[EXP]] : tensor<8x16xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @math_stays(%a: tensor<8x16xbf16>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8x16xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xbf16>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %w = arith.extf %x : bf16 to f32
    %v = math.exp %w : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%exp : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %v = arith.addf %x, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%exp : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %v = arith.maximumf %x, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %s, %m : tensor<8xf32>, tensor<8xf32>
}

// -----

// The importer's reshapes around a GEMM: a widening between an expand and
// the collapse that undoes it runs on the unreshaped tensor, so the readers
// of the collapse read (and fuse) it.
// CHECK-LABEL: func.func @widening_between_reshapes
// CHECK-NOT: tensor.expand_shape
// CHECK-NOT: tensor.collapse_shape
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.addf
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @widening_between_reshapes(%x: tensor<8x16xbf16>) -> tensor<8xf32> {
  %x3 = tensor.expand_shape %x [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xbf16> into tensor<2x4x16xbf16>
  %e = tensor.empty() : tensor<2x4x16xf32>
  %w = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x3 : tensor<2x4x16xbf16>) outs(%e : tensor<2x4x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %v = arith.extf %a : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<2x4x16xf32>
  %w2 = tensor.collapse_shape %w [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%w2 : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.addf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// The same widening reshaped twice alike (read by the forward and by the
// backward): one widening on the unreshaped tensor, fused into both.
// CHECK-LABEL: func.func @widening_reshaped_twice
// CHECK-NOT: tensor.collapse_shape
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.addf
// CHECK: linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<8x16xbf16>, tensor<8x16xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.mulf
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @widening_reshaped_twice(%x: tensor<8x16xbf16>, %dy: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<8x16xf32>) {
  %x3 = tensor.expand_shape %x [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xbf16> into tensor<2x4x16xbf16>
  %e = tensor.empty() : tensor<2x4x16xf32>
  %w = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x3 : tensor<2x4x16xbf16>) outs(%e : tensor<2x4x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %v = arith.extf %a : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<2x4x16xf32>
  %w2 = tensor.collapse_shape %w [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%w2 : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.addf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %w3 = tensor.collapse_shape %w [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %dx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%w3, %dy : tensor<8x16xf32>, tensor<8x16xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%a: f32, %g: f32, %o: f32):
    %v = arith.mulf %a, %g : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  return %s, %dx : tensor<8xf32>, tensor<8x16xf32>
}

// -----

// The element a cross-entropy gathers from the log-softmax (x - lse) at each
// row's target is computed from x and lse at that element: the whole
// log-softmax is not computed for it.
// CHECK-LABEL: func.func @gathered_element
// CHECK-NOT: tensor<8x16xf32>) outs
// CHECK: linalg.generic {{.*}} ins(%arg2 : tensor<8xindex>)
// CHECK: ^bb0(%[[T:.*]]: index,
// CHECK: %[[I:.*]] = linalg.index 0
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[I]], %[[T]]] : tensor<8x16xf32>
// CHECK: %[[L:.*]] = tensor.extract %arg1[%[[I]]] : tensor<8xf32>
// CHECK: arith.subf %[[X]], %[[L]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#r1 = affine_map<(d0) -> (d0)>
func.func @gathered_element(%x: tensor<8x16xf32>, %lse: tensor<8xf32>, %t: tensor<8xindex>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %logsm = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %lse : tensor<8x16xf32>, tensor<8xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %l: f32, %o: f32):
    %v = arith.subf %a, %l : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %er = tensor.empty() : tensor<8xf32>
  %g = linalg.generic {indexing_maps = [#r1, #r1], iterator_types = ["parallel"]} ins(%t : tensor<8xindex>) outs(%er : tensor<8xf32>) {
  ^bb0(%j: index, %o: f32):
    %i = linalg.index 0 : index
    %v = tensor.extract %logsm[%i, %j] : tensor<8x16xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %g : tensor<8xf32>
}

// -----

// Edge cases of the element extraction and of the reshapes: a body that
// yields a value from outside it; an input read through a constant map
// (a size-1 broadcast: left alone, and the pass converges); a rank-0 op
// with a scalar input between reshapes (left alone).
// CHECK-LABEL: func.func @yields_from_outside
// CHECK-NOT: tensor.extract
// CHECK: return %arg1
#r1 = affine_map<(d0) -> (d0)>
func.func @yields_from_outside(%x: tensor<8xf32>, %s: f32, %i: index) -> f32 {
  %e = tensor.empty() : tensor<8xf32>
  %g = linalg.generic {indexing_maps = [#r1, #r1], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %r = tensor.extract %g[%i] : tensor<8xf32>
  return %r : f32
}
// CHECK-LABEL: func.func @constant_map
// CHECK: %[[G:.*]] = linalg.generic
// CHECK: tensor.extract %[[G]]
func.func @constant_map(%x: tensor<4x8xf32>, %b: tensor<1x8xf32>, %i: index, %j: index) -> f32 {
  %e = tensor.empty() : tensor<4x8xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %b : tensor<4x8xf32>, tensor<1x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %v = arith.addf %a, %c : f32
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  %r = tensor.extract %g[%i, %j] : tensor<4x8xf32>
  return %r : f32
}
// CHECK-LABEL: func.func @scalar_input
// CHECK: tensor.collapse_shape
// CHECK: linalg.generic
// CHECK: tensor.expand_shape
func.func @scalar_input(%x: tensor<1x1xf32>, %s: f32) -> tensor<1x1xf32> {
  %c = tensor.collapse_shape %x [] : tensor<1x1xf32> into tensor<f32>
  %e = tensor.empty() : tensor<f32>
  %g = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%c, %s : tensor<f32>, f32) outs(%e : tensor<f32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %v = arith.addf %a, %b : f32
    linalg.yield %v : f32
  } -> tensor<f32>
  %r = tensor.expand_shape %g [] output_shape [1, 1] : tensor<f32> into tensor<1x1xf32>
  return %r : tensor<1x1xf32>
}

// -----

// A one-hot row made from index-typed targets is cheap too (an index counts
// 8 bytes): each reader gets a copy. The subtraction fuses its copy; the row
// sum's copy is still written whole (upstream fusion wants an input that
// spans the reduced dim).
// CHECK-LABEL: func.func @one_hot_from_index
// CHECK: %[[OH:.*]] = linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<8xindex>, tensor<8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[OH]] : tensor<8x16xf32>)
// CHECK: linalg.generic {{.*}} ins(%arg0, %arg1, %arg2 :
// CHECK: linalg.index 1
// CHECK: arith.subf
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @one_hot_from_index(%t: tensor<8xindex>, %g: tensor<8xf32>, %p: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<8x16xf32>) {
  %e = tensor.empty() : tensor<8x16xf32>
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %oh = linalg.generic {indexing_maps = [#row, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%t, %g : tensor<8xindex>, tensor<8xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%ti: index, %gi: f32, %o: f32):
    %j = linalg.index 1 : index
    %eq = arith.cmpi eq, %j, %ti : index
    %v = arith.select %eq, %one, %zero : f32
    %w = arith.mulf %v, %gi : f32
    linalg.yield %w : f32
  } -> tensor<8x16xf32>
  %er = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%oh : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.addf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %d = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%oh, %p : tensor<8x16xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %v = arith.subf %a, %b : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  return %s, %d : tensor<8xf32>, tensor<8x16xf32>
}
