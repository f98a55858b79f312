// Ops that bufferization and the LLVM lowering have no path for, which
// shardx-decompose-for-codegen rewrites (decomposed-ops.test).
shardx.mesh @mesh(shape = 2)

// Rows of a table by i32 indices, one of them out of range (reads 0).
func.func @gather_rows(%t: tensor<8x4xf32>, %i: tensor<3x1xi32>) -> tensor<3x1x4xf32> {
  %0 = tensor.gather %t[%i] gather_dims([0]) : (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x1x4xf32>
  return %0 : tensor<3x1x4xf32>
}

// Elements by (row, column) pairs of i64, rank-reduced.
func.func @gather_points(%t: tensor<5x6xf32>, %i: tensor<2x3x2xi64>) -> tensor<2x3xf32> {
  %0 = tensor.gather %t[%i] gather_dims([0, 1]) : (tensor<5x6xf32>, tensor<2x3x2xi64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// Column slices of a table split over the mesh (gathered first: no rule).
func.func @gather_sharded(%t: tensor<6x5xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %i: tensor<4x1xi32>) -> tensor<6x4xf32> {
  %0 = tensor.gather %t[%i] gather_dims([1]) : (tensor<6x5xf32>, tensor<4x1xi32>) -> tensor<4x6x1xf32>
  %e = tensor.empty() : tensor<6x4xf32>
  %c = tensor.collapse_shape %0 [[0], [1, 2]] : tensor<4x6x1xf32> into tensor<4x6xf32>
  %1 = linalg.transpose ins(%c : tensor<4x6xf32>) outs(%e : tensor<6x4xf32>) permutation = [1, 0]
  return %1 : tensor<6x4xf32>
}

// Rows into a table; the last index is out of range (writes nothing).
func.func @scatter_rows(%s: tensor<3x4xf32>, %d: tensor<8x4xf32>, %i: tensor<3x1xi32>) -> tensor<8x4xf32> {
  %0 = tensor.scatter %s into %d[%i] scatter_dims([0]) unique : (tensor<3x4xf32>, tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

func.func @bitcast(%a: tensor<3x4xf32>) -> tensor<3x4xi32> {
  %0 = tensor.bitcast %a : tensor<3x4xf32> to tensor<3x4xi32>
  return %0 : tensor<3x4xi32>
}

// Packed into 2x3 tiles with padding, and back.
func.func @pack_unpack(%a: tensor<5x7xf32>) -> (tensor<3x3x2x3xf32>, tensor<5x7xf32>) {
  %pad = arith.constant -1.0 : f32
  %e = tensor.empty() : tensor<3x3x2x3xf32>
  %p = linalg.pack %a padding_value(%pad : f32) inner_dims_pos = [0, 1] inner_tiles = [2, 3] into %e : tensor<5x7xf32> -> tensor<3x3x2x3xf32>
  %f = tensor.empty() : tensor<5x7xf32>
  %u = linalg.unpack %p inner_dims_pos = [0, 1] inner_tiles = [2, 3] into %f : tensor<3x3x2x3xf32> -> tensor<5x7xf32>
  return %p, %u : tensor<3x3x2x3xf32>, tensor<5x7xf32>
}

func.func @softmax(%a: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %e = tensor.empty() : tensor<3x5xf32>
  %0 = linalg.softmax dimension(1) ins(%a : tensor<3x5xf32>) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// Integer division and remainder with zero divisors and MIN / -1 (undefined
// for arith, SIGFPE on x86 without shardx-guard-integer-division).
func.func @int_division(%a: tensor<6xi32>, %b: tensor<6xi32>) -> (tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>) {
  %q = arith.divsi %a, %b : tensor<6xi32>
  %r = arith.remsi %a, %b : tensor<6xi32>
  %u = arith.divui %a, %b : tensor<6xi32>
  %v = arith.remui %a, %b : tensor<6xi32>
  %f = arith.floordivsi %a, %b : tensor<6xi32>
  %c = arith.ceildivsi %a, %b : tensor<6xi32>
  return %q, %r, %u, %v, %f, %c : tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>
}

// Rows of a table by i64 indices read in a kernel (tensor.extract):
// out-of-range ones (10**9, -5) read 0 (shardx-guard-tensor-indices;
// before, the process died of SIGSEGV).
func.func @extract_oob(%t: tensor<8x4xf32>, %i: tensor<3xi64>) -> tensor<3x4xf32> {
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
