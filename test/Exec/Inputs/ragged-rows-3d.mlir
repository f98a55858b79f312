// A ragged all-to-all of rows with two trailing dims (2x3 elements a row)
// on 2 ranks: member s holds rows x[r, a, b] = 100 s + 10 r + 3 a + b + 1
// and sends 1 + j rows to member j (row 0 to member 0, rows 1 and 2 to
// member 1). Outputs: every rank's received rows and the way back (the
// same op with the received counts), gathered over the mesh.
shardx.mesh @mesh(shape = 2)
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#v = affine_map<(d0) -> (d0)>
func.func @rows3d(%unused: tensor<1xf32>) -> (tensor<12x2x3xf32>, tensor<12x2x3xf32>) {
  %me = shardx.axis_index on @mesh axes = [0] : index
  %ce = tensor.empty() : tensor<2xi64>
  %counts = linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%ce : tensor<2xi64>) {
  ^bb0(%o: i64):
    %j = linalg.index 0 : index
    %c1 = arith.constant 1 : index
    %s = arith.addi %j, %c1 : index
    %w = arith.index_cast %s : index to i64
    linalg.yield %w : i64
  } -> tensor<2xi64>
  %e = tensor.empty() : tensor<6x2x3xf32>
  %x = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel", "parallel"]} outs(%e : tensor<6x2x3xf32>) {
  ^bb0(%o: f32):
    %r = linalg.index 0 : index
    %a = linalg.index 1 : index
    %b = linalg.index 2 : index
    %c100 = arith.constant 100 : index
    %c10 = arith.constant 10 : index
    %c3 = arith.constant 3 : index
    %c1 = arith.constant 1 : index
    %t0 = arith.muli %me, %c100 : index
    %t1 = arith.muli %r, %c10 : index
    %t2 = arith.muli %a, %c3 : index
    %t3 = arith.addi %t0, %t1 : index
    %t4 = arith.addi %t3, %t2 : index
    %t5 = arith.addi %t4, %b : index
    %t6 = arith.addi %t5, %c1 : index
    %i = arith.index_cast %t6 : index to i64
    %f = arith.sitofp %i : i64 to f32
    linalg.yield %f : f32
  } -> tensor<6x2x3xf32>
  %y, %rc = shardx.ragged_all_to_all %x, %counts on @mesh axes = [0] : tensor<6x2x3xf32>, tensor<2xi64> -> tensor<6x2x3xf32>, tensor<2xi64>
  %back, %rc2 = shardx.ragged_all_to_all %y, %rc on @mesh axes = [0] : tensor<6x2x3xf32>, tensor<2xi64> -> tensor<6x2x3xf32>, tensor<2xi64>
  %ya = shardx.all_gather %y on @mesh axes = [0] dim = 0 : tensor<6x2x3xf32> -> tensor<12x2x3xf32>
  %ba = shardx.all_gather %back on @mesh axes = [0] dim = 0 : tensor<6x2x3xf32> -> tensor<12x2x3xf32>
  return %ya, %ba : tensor<12x2x3xf32>, tensor<12x2x3xf32>
}
