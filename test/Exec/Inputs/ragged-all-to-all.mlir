// A dropless token exchange written as a local program (the lit test
// substitutes the mesh @MESH@, the group axes @AXES@, their size @N@ and
// all the mesh's axes @ALL@). Member s of a group sends c(s, j) = s + j
// rows to member j (uneven, member 0 sends none to itself); the counts are
// a tensor the program computes. The rows are grouped by destination in a
// 20-row buffer whose unsent rows hold -1. Row k for member j is
// 1000 s + 100 j + 10 k + column, so a receiver knows every row it must get:
// member j receives from s in group order at offsets F(s) = sum over
// t < s of c(t, j) = s j + s (s - 1) / 2, the sender's offsets with the
// roles swapped. The program checks the received rows (and the zero rows
// after them) against that reference, the received counts against c(s, j),
// and the way back (the same op with the received counts, and the op
// given the counts it receives) against the sent rows. Outputs: the largest difference over every rank (0), and the
// rows received by all ranks together.
shardx.mesh @mesh(shape = @MESH@)
#id = affine_map<(d0, d1) -> (d0, d1)>
#sc = affine_map<(d0, d1) -> ()>
#v = affine_map<(d0) -> (d0)>
#vs = affine_map<(d0) -> ()>
func.func @ragged(%unused: tensor<1xf32>) -> (tensor<f32>, tensor<f32>) {
  %me = shardx.axis_index on @mesh axes = @AXES@ : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %n = arith.constant @N@ : index
  %zero = arith.constant 0.0 : f32
  %neg = arith.constant -1.0 : f32
  %f1000 = arith.constant 1000.0 : f32
  %f100 = arith.constant 100.0 : f32
  %f10 = arith.constant 10.0 : f32
  // send_counts[j] = me + j
  %ce = tensor.empty() : tensor<@N@xi64>
  %counts = linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%ce : tensor<@N@xi64>) {
  ^bb0(%o: i64):
    %j = linalg.index 0 : index
    %s = arith.addi %me, %j : index
    %w = arith.index_cast %s : index to i64
    linalg.yield %w : i64
  } -> tensor<@N@xi64>
  // x: the rows to send, grouped by destination, -1 after them; ref: the
  // rows to receive, 0 after them. Both from F(t) = t me + t (t - 1) / 2.
  %e0 = tensor.empty() : tensor<20x3xf32>
  %e1 = tensor.empty() : tensor<20x3xf32>
  %x, %ref = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} outs(%e0, %e1 : tensor<20x3xf32>, tensor<20x3xf32>) {
  ^bb0(%o0: f32, %o1: f32):
    %r = linalg.index 0 : index
    %col = linalg.index 1 : index
    // F(1) = me, F(2) = 2 me + 1, F(3) = 3 me + 3, counted while t < n.
    %f2a = arith.muli %me, %c2 : index
    %f2 = arith.addi %f2a, %c1 : index
    %f3a = arith.muli %me, %c3 : index
    %f3 = arith.addi %f3a, %c3 : index
    %in1 = arith.cmpi ult, %c1, %n : index
    %in2 = arith.cmpi ult, %c2, %n : index
    %in3 = arith.cmpi ult, %c3, %n : index
    %le1 = arith.cmpi ule, %me, %r : index
    %le2 = arith.cmpi ule, %f2, %r : index
    %le3 = arith.cmpi ule, %f3, %r : index
    %b1 = arith.andi %in1, %le1 : i1
    %b2 = arith.andi %in2, %le2 : i1
    %b3 = arith.andi %in3, %le3 : i1
    %i1 = arith.select %b1, %c1, %c0 : index
    %i2 = arith.select %b2, %c1, %c0 : index
    %i3 = arith.select %b3, %c1, %c0 : index
    %i12 = arith.addi %i1, %i2 : index
    %peer = arith.addi %i12, %i3 : index
    // k = r - F(peer)
    %pm = arith.muli %peer, %me : index
    %pm1 = arith.subi %peer, %c1 : index
    %pp = arith.muli %peer, %pm1 : index
    %ph = arith.divui %pp, %c2 : index
    %fp = arith.addi %pm, %ph : index
    %k = arith.subi %r, %fp : index
    // rows in use: r < F(n)
    %nm = arith.muli %n, %me : index
    %nm1 = arith.subi %n, %c1 : index
    %nn = arith.muli %n, %nm1 : index
    %nh = arith.divui %nn, %c2 : index
    %total = arith.addi %nm, %nh : index
    %used = arith.cmpi ult, %r, %total : index
    %mef = arith.index_cast %me : index to i64
    %mf = arith.sitofp %mef : i64 to f32
    %pi = arith.index_cast %peer : index to i64
    %pf = arith.sitofp %pi : i64 to f32
    %ki = arith.index_cast %k : index to i64
    %kf = arith.sitofp %ki : i64 to f32
    %ci = arith.index_cast %col : index to i64
    %cf = arith.sitofp %ci : i64 to f32
    %k10 = arith.mulf %kf, %f10 : f32
    %kc = arith.addf %k10, %cf : f32
    // sent: 1000 me + 100 peer + 10 k + col
    %sa = arith.mulf %mf, %f1000 : f32
    %sb = arith.mulf %pf, %f100 : f32
    %sab = arith.addf %sa, %sb : f32
    %sv = arith.addf %sab, %kc : f32
    %xs = arith.select %used, %sv, %neg : f32
    // received: 1000 peer + 100 me + 10 k + col
    %ra = arith.mulf %pf, %f1000 : f32
    %rb = arith.mulf %mf, %f100 : f32
    %rab = arith.addf %ra, %rb : f32
    %rv = arith.addf %rab, %kc : f32
    %rs = arith.select %used, %rv, %zero : f32
    linalg.yield %xs, %rs : f32, f32
  } -> (tensor<20x3xf32>, tensor<20x3xf32>)
  %y, %rc = shardx.ragged_all_to_all %x, %counts on @mesh axes = @AXES@ : tensor<20x3xf32>, tensor<@N@xi64> -> tensor<20x3xf32>, tensor<@N@xi64>
  // The way back: every row returns to its sender.
  %back, %rc2 = shardx.ragged_all_to_all %y, %rc on @mesh axes = @AXES@ : tensor<20x3xf32>, tensor<@N@xi64> -> tensor<20x3xf32>, tensor<@N@xi64>
  // And with the counts it receives given (the send counts): only the rows
  // move.
  %back2 = shardx.ragged_all_to_all %y, %rc recv_counts = %counts on @mesh axes = @AXES@ : tensor<20x3xf32>, tensor<@N@xi64>, tensor<@N@xi64> -> tensor<20x3xf32>
  %m0 = tensor.empty() : tensor<f32>
  %m = linalg.fill ins(%zero : f32) outs(%m0 : tensor<f32>) -> tensor<f32>
  // |y - ref|, |back - max(x, 0)| and |back2 - max(x, 0)|
  %d1 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id, #sc], iterator_types = ["reduction", "reduction"]} ins(%y, %ref, %back, %x, %back2 : tensor<20x3xf32>, tensor<20x3xf32>, tensor<20x3xf32>, tensor<20x3xf32>, tensor<20x3xf32>) outs(%m : tensor<f32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %d: f32, %e: f32, %acc: f32):
    %t = arith.subf %a, %b : f32
    %u = math.absf %t : f32
    %dz = arith.maximumf %d, %zero : f32
    %t2 = arith.subf %c, %dz : f32
    %u2 = math.absf %t2 : f32
    %t3 = arith.subf %e, %dz : f32
    %u3 = math.absf %t3 : f32
    %w1 = arith.maximumf %u, %u2 : f32
    %w = arith.maximumf %w1, %u3 : f32
    %w2 = arith.maximumf %w, %acc : f32
    linalg.yield %w2 : f32
  } -> tensor<f32>
  // The received counts are c(s, me) = s + me, the send counts again; the
  // way back receives the send counts. Also the rows received.
  %d2, %rows = linalg.generic {indexing_maps = [#v, #v, #v, #vs, #vs], iterator_types = ["reduction"]} ins(%rc, %rc2, %counts : tensor<@N@xi64>, tensor<@N@xi64>, tensor<@N@xi64>) outs(%d1, %m : tensor<f32>, tensor<f32>) {
  ^bb0(%a: i64, %b: i64, %c: i64, %acc: f32, %sum: f32):
    %t = arith.subi %a, %c : i64
    %t2 = arith.subi %b, %c : i64
    %tf = arith.sitofp %t : i64 to f32
    %t2f = arith.sitofp %t2 : i64 to f32
    %u = math.absf %tf : f32
    %u2 = math.absf %t2f : f32
    %w = arith.maximumf %u, %u2 : f32
    %w2 = arith.maximumf %w, %acc : f32
    %af = arith.sitofp %a : i64 to f32
    %s2 = arith.addf %sum, %af : f32
    linalg.yield %w2, %s2 : f32, f32
  } -> (tensor<f32>, tensor<f32>)
  %dmax = shardx.all_reduce %d2 on @mesh axes = @ALL@ reduction = max : tensor<f32>
  %rsum = shardx.all_reduce %rows on @mesh axes = @ALL@ reduction = sum : tensor<f32>
  return %dmax, %rsum : tensor<f32>, tensor<f32>
}
