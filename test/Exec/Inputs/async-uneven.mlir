// An FSDP-style local program with uneven shards (5, 5, 5, 1 rows of a
// 16x4 parameter over 4 ranks), written with the start forms directly
// (shardx-lower-reshards sends uneven gathers through shardx.exchange):
// each rank's rows are gathered by an uneven all_gather_start and checked
// against an independent reference (the rows placed at their offset in
// zeros, then a synchronous all_reduce); the reduce_scatter_start of twice
// the reference (a summed gradient) is checked against 8 times the rank's
// own rows. Both outputs are the largest absolute difference: 0.
shardx.mesh @mesh(shape = 4, axes = ["dp"])
#id = affine_map<(d0, d1) -> (d0, d1)>
#sc = affine_map<(d0, d1) -> ()>
func.func @uneven(%x: tensor<4xf32>) -> (tensor<f32>, tensor<f32>) {
  %i = shardx.axis_index on @mesh axes = [0] : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %last = arith.cmpi eq, %i, %c3 : index
  %n = arith.select %last, %c1, %c5 : index
  %off = arith.muli %i, %c5 : index
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %mine = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%e : tensor<?x4xf32>) {
  ^bb0(%o: f32):
    %r = linalg.index 0 : index
    %k = linalg.index 1 : index
    %a = arith.muli %i, %c5 : index
    %b = arith.addi %a, %r : index
    %c4 = arith.constant 4 : index
    %d = arith.muli %b, %c4 : index
    %v = arith.addi %d, %k : index
    %w = arith.index_cast %v : index to i64
    %f = arith.sitofp %w : i64 to f32
    linalg.yield %f : f32
  } -> tensor<?x4xf32>
  %p = shardx.all_gather_start %mine on @mesh axes = [0] dim = 0 sizes = [5, 5, 5, 1] : tensor<?x4xf32> -> tensor<16x4xf32>
  %zero = arith.constant 0.0 : f32
  %z0 = tensor.empty() : tensor<16x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%z0 : tensor<16x4xf32>) -> tensor<16x4xf32>
  %placed = tensor.insert_slice %mine into %z[%off, 0] [%n, 4] [1, 1] : tensor<?x4xf32> into tensor<16x4xf32>
  %ref = shardx.all_reduce %placed on @mesh axes = [0] reduction = sum : tensor<16x4xf32>
  %g = shardx.wait %p : tensor<16x4xf32>
  %twice = arith.addf %ref, %ref : tensor<16x4xf32>
  %q = shardx.reduce_scatter_start %twice on @mesh axes = [0] dim = 0 reduction = sum sizes = [5, 5, 5, 1] : tensor<16x4xf32> -> tensor<?x4xf32>
  %s = shardx.wait %q : tensor<?x4xf32>
  %eight = arith.constant 8.0 : f32
  %e2 = tensor.empty(%n) : tensor<?x4xf32>
  %scaled = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%mine : tensor<?x4xf32>) outs(%e2 : tensor<?x4xf32>) {
  ^bb0(%m: f32, %o: f32):
    %t = arith.mulf %m, %eight : f32
    linalg.yield %t : f32
  } -> tensor<?x4xf32>
  %m0 = tensor.empty() : tensor<f32>
  %m = linalg.fill ins(%zero : f32) outs(%m0 : tensor<f32>) -> tensor<f32>
  %d1 = linalg.generic {indexing_maps = [#id, #id, #sc], iterator_types = ["reduction", "reduction"]} ins(%g, %ref : tensor<16x4xf32>, tensor<16x4xf32>) outs(%m : tensor<f32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %t = arith.subf %a, %b : f32
      %u = math.absf %t : f32
      %w = arith.maximumf %u, %acc : f32
      linalg.yield %w : f32
    } -> tensor<f32>
  %d2 = linalg.generic {indexing_maps = [#id, #id, #sc], iterator_types = ["reduction", "reduction"]} ins(%s, %scaled : tensor<?x4xf32>, tensor<?x4xf32>) outs(%m : tensor<f32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %t = arith.subf %a, %b : f32
      %u = math.absf %t : f32
      %w = arith.maximumf %u, %acc : f32
      linalg.yield %w : f32
    } -> tensor<f32>
  return %d1, %d2 : tensor<f32>, tensor<f32>
}
