// RUN: shardx-opt --shardx-guard-tensor-indices %s | FileCheck %s
// A second run finds every access already checked:
// RUN: shardx-opt --shardx-guard-tensor-indices %s > %t.once.mlir
// RUN: shardx-opt --shardx-guard-tensor-indices %t.once.mlir > %t.twice.mlir
// RUN: diff %t.once.mlir %t.twice.mlir

// An index from data is checked (unsigned, so negatives are out of range):
// the read is clamped to 0 and yields 0 out of range; the loop's own index
// (linalg.index 1 over 4 columns of a 4-column table) is left alone.
// CHECK-LABEL: func.func @rows
// CHECK: %[[IX:.*]] = arith.index_cast
// CHECK: %[[COL:.*]] = linalg.index 1
// CHECK: %[[OK:.*]] = arith.cmpi ult, %[[IX]], %c8
// CHECK: %[[ROW:.*]] = arith.select %[[OK]], %[[IX]], %c0
// CHECK: %[[X:.*]] = tensor.extract %{{.*}}[%[[ROW]], %[[COL]]]
// CHECK: arith.select %[[OK]], %[[X]], %cst
func.func @rows(%t: tensor<8x4xf32>, %i: tensor<3xi64>) -> tensor<3x4xf32> {
  %e = tensor.empty() : tensor<3x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(a, b) -> (a)>, affine_map<(a, b) -> (a, b)>], iterator_types = ["parallel", "parallel"]} ins(%i : tensor<3xi64>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%x: i64, %o: f32):
    %ix = arith.index_cast %x : i64 to index
    %b = linalg.index 1 : index
    %v = tensor.extract %t[%ix, %b] : tensor<8x4xf32>
    linalg.yield %v : f32
  } -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}

// A loop index whose range exceeds the dim is checked.
// CHECK-LABEL: func.func @wider_loop
// CHECK: arith.cmpi ult
// CHECK: tensor.extract
func.func @wider_loop(%t: tensor<4xf32>) -> tensor<6xf32> {
  %e = tensor.empty() : tensor<6xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(a) -> (a)>], iterator_types = ["parallel"]} outs(%e : tensor<6xf32>) {
  ^bb0(%o: f32):
    %a = linalg.index 0 : index
    %v = tensor.extract %t[%a] : tensor<4xf32>
    linalg.yield %v : f32
  } -> tensor<6xf32>
  return %r : tensor<6xf32>
}

// Constants in range are left alone; a constant out of range is checked.
// CHECK-LABEL: func.func @constants
// CHECK-NOT: arith.cmpi
// CHECK: tensor.extract %{{.*}}[%c3]
// CHECK: arith.cmpi ult, %c9
func.func @constants(%t: tensor<4xf32>) -> (f32, f32) {
  %c3 = arith.constant 3 : index
  %c9 = arith.constant 9 : index
  %a = tensor.extract %t[%c3] : tensor<4xf32>
  %b = tensor.extract %t[%c9] : tensor<4xf32>
  return %a, %b : f32, f32
}

// A dynamic dim may be empty: the read itself is under scf.if.
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[N:.*]] = tensor.dim
// CHECK: %[[OK:.*]] = arith.cmpi ult, %{{.*}}, %[[N]]
// CHECK: scf.if %[[OK]] -> (f32)
// CHECK-NEXT: tensor.extract
// CHECK: } else {
// CHECK-NEXT: scf.yield %cst
func.func @dynamic(%t: tensor<?xf32>, %i: index) -> f32 {
  %a = tensor.extract %t[%i] : tensor<?xf32>
  return %a : f32
}

// A static dim of 0: never read.
// CHECK-LABEL: func.func @empty
// CHECK-NOT: tensor.extract
// CHECK: return %cst
func.func @empty(%t: tensor<0x3xf32>, %i: index) -> f32 {
  %c0 = arith.constant 0 : index
  %a = tensor.extract %t[%i, %c0] : tensor<0x3xf32>
  return %a : f32
}

// An insert out of range writes nothing.
// CHECK-LABEL: func.func @insert
// CHECK: %[[OK:.*]] = arith.cmpi ult, %{{.*}}, %c8
// CHECK: %[[R:.*]] = scf.if %[[OK]] -> (tensor<8xf32>)
// CHECK-NEXT: %[[W:.*]] = tensor.insert
// CHECK-NEXT: scf.yield %[[W]]
// CHECK: } else {
// CHECK-NEXT: scf.yield %arg0
// CHECK: return %[[R]]
func.func @insert(%d: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  %r = tensor.insert %v into %d[%i] : tensor<8xf32>
  return %r : tensor<8xf32>
}

// An index clamped by its own range check is not checked again: the
// decomposed gather's form (sge 0 and slt 8, select to 0) and this pass's
// (ult), so a second run changes nothing. A check on another value, or a
// bound past the dim, is not a proof.
// CHECK-LABEL: func.func @clamped
// CHECK: %[[A:.*]] = arith.select %{{.*}}, %[[I:.*]], %c0
// CHECK-NEXT: tensor.extract %{{.*}}[%[[A]]]
// CHECK: %[[B:.*]] = arith.select %[[U:.*]], %[[I]], %c0
// CHECK-NEXT: tensor.extract %{{.*}}[%[[B]]]
// CHECK: %[[WRONG:.*]] = arith.select %[[U]], %{{.*}}, %c0
// CHECK: %[[OK:.*]] = arith.cmpi ult, %[[WRONG]],
// CHECK: %[[C:.*]] = arith.select %[[OK]], %[[WRONG]],
// CHECK: tensor.extract %{{.*}}[%[[C]]]
// CHECK: %[[WIDE:.*]] = arith.select %{{.*}}, %[[I]], %c0
// CHECK: %[[OK2:.*]] = arith.cmpi ult, %[[WIDE]],
// CHECK: %[[D:.*]] = arith.select %[[OK2]], %[[WIDE]],
// CHECK: tensor.extract %{{.*}}[%[[D]]]
func.func @clamped(%t: tensor<8xf32>, %i: index, %j: index) -> (f32, f32, f32, f32) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c9 = arith.constant 9 : index
  %low = arith.cmpi sge, %i, %c0 : index
  %high = arith.cmpi slt, %i, %c8 : index
  %ok = arith.andi %low, %high : i1
  %a = arith.select %ok, %i, %c0 : index
  %x = tensor.extract %t[%a] : tensor<8xf32>
  %u = arith.cmpi ult, %i, %c8 : index
  %b = arith.select %u, %i, %c0 : index
  %y = tensor.extract %t[%b] : tensor<8xf32>
  %wrong = arith.select %u, %j, %c0 : index
  %z = tensor.extract %t[%wrong] : tensor<8xf32>
  %u9 = arith.cmpi ult, %i, %c9 : index
  %wide = arith.select %u9, %i, %c0 : index
  %w = tensor.extract %t[%wide] : tensor<8xf32>
  return %x, %y, %z, %w : f32, f32, f32, f32
}
