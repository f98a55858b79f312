// RUN: shardx-opt %s --split-input-file --shardx-ring-attention | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention=min-bytes=1025 \
// RUN:   | FileCheck %s --check-prefix=BIG
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention | FileCheck %s --check-prefix=DQ
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention | FileCheck %s --check-prefix=DKV
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention | FileCheck %s --check-prefix=PERM
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention=min-bytes=-1 \
// RUN:   | FileCheck %s --check-prefix=NORING
// RUN: shardx-opt %s --split-input-file --shardx-ring-attention=piece-rows=2 \
// RUN:   | FileCheck %s --check-prefix=PIECES

// Tests that an attention reading keys and values all-gathered along the
// sequence (through a transpose to [B, H, S, D]) on 2 ranks runs as a ring:
// the rank's own block, then the other's by one permute, the key positions
// sliced to each block, the outputs combined by their log-sum-exp; and
// that the gathers are gone. Each gather is 2 x 512 B: min-bytes above that
// keeps them.
shardx.mesh @mesh(shape = 2, axes = ["cp"])
// CHECK-LABEL: func.func @forward
// BIG-LABEL: func.func @forward
func.func @forward(%q: tensor<1x2x4x8xf32>, %k: tensor<1x4x2x8xf32>,
                   %v: tensor<1x4x2x8xf32>, %qpos: tensor<4xi64>,
                   %kpos: tensor<8xi64>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) {
  // CHECK-NOT: shardx.all_gather
  // CHECK: %[[RANK:.*]] = shardx.axis_index on @mesh axes = [0]
  // CHECK: %[[K0:.*]] = linalg.transpose ins(%{{.*}} : tensor<1x4x2x8xf32>) outs(%{{.*}} : tensor<1x2x4x8xf32>)
  // CHECK: %[[V0:.*]] = linalg.transpose ins(%{{.*}} : tensor<1x4x2x8xf32>)
  // CHECK: %[[P0:.*]] = tensor.extract_slice %{{.*}}[%{{.*}}] [4] [1] : tensor<8xi64> to tensor<4xi64>
  // CHECK: %[[O0:.*]], %[[L0:.*]] = shardx.attention %{{.*}}, %[[K0]], %[[V0]] causal(%{{.*}}, %[[P0]])
  // CHECK: %[[K1:.*]] = shardx.permute %{{.*}} on @mesh axes = [0] pairs = {{\[}}[0, 1], [1, 0]] : tensor<1x4x2x8xf32>
  // CHECK: %[[V1:.*]] = shardx.permute
  // CHECK: linalg.transpose ins(%[[K1]]
  // CHECK: linalg.transpose ins(%[[V1]]
  // CHECK: %[[O1:.*]], %[[L1:.*]] = shardx.attention
  // CHECK: %[[LSE:.*]] = linalg.generic {{.*}} ins(%[[L0]], %[[L1]] :
  // CHECK: math.log
  // CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[O0]], %[[O1]], %[[L0]], %[[L1]], %[[LSE]] :
  // CHECK-NOT: shardx.all_gather
  // CHECK: return %[[OUT]], %[[LSE]]
  // BIG: shardx.all_gather
  // BIG-NOT: shardx.permute
  // BIG: return
  %kg = shardx.all_gather %k on @mesh axes = [0] dim = 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %vg = shardx.all_gather %v on @mesh axes = [0] dim = 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %e = tensor.empty() : tensor<1x2x8x8xf32>
  %kt = linalg.transpose ins(%kg : tensor<1x8x2x8xf32>) outs(%e : tensor<1x2x8x8xf32>) permutation = [0, 2, 1, 3]
  %vt = linalg.transpose ins(%vg : tensor<1x8x2x8xf32>) outs(%e : tensor<1x2x8x8xf32>) permutation = [0, 2, 1, 3]
  %o, %l = shardx.attention %q, %kt, %vt causal(%qpos, %kpos) scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return %o, %l : tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
}

// -----

// Tests the backward pair as one ring on 4 ranks: dq sums its four blocks'
// terms; dK (through its transpose back to [B, S, H, D]) and dV are summed
// into accumulators that travel with the blocks and take one more permute
// to their owners, replacing the reduce-scatters; K and V are permuted 3
// times, the accumulators 4 times each.
shardx.mesh @mesh(shape = 4, axes = ["cp"])
// CHECK-LABEL: func.func @backward
func.func @backward(%q: tensor<1x2x2x8xf64>, %k: tensor<1x2x2x8xf64>,
                    %v: tensor<1x2x2x8xf64>, %o: tensor<1x2x2x8xf64>,
                    %l: tensor<1x2x2xf64>, %do: tensor<1x2x2x8xf64>)
    -> (tensor<1x2x2x8xf64>, tensor<1x2x2x8xf64>, tensor<1x2x2x8xf64>) {
  // CHECK-NOT: shardx.all_gather
  // CHECK-NOT: shardx.reduce_scatter
  // CHECK: return
  // DQ-LABEL: func.func @backward
  // DQ-COUNT-4: shardx.attention_dq
  // DQ-NOT: shardx.attention_dq
  // DQ: return
  // DKV-LABEL: func.func @backward
  // DKV-COUNT-4: shardx.attention_dkv
  // DKV-NOT: shardx.attention_dkv
  // DKV: return
  // PERM-LABEL: func.func @backward
  // PERM-COUNT-14: shardx.permute {{.*}} pairs = {{\[}}[0, 1], [1, 2], [2, 3], [3, 0]] : tensor<1x2x2x8xf64>
  // PERM-NOT: shardx.permute
  // PERM: return
  %kg = shardx.all_gather %k on @mesh axes = [0] dim = 2 : tensor<1x2x2x8xf64> -> tensor<1x2x8x8xf64>
  %vg = shardx.all_gather %v on @mesh axes = [0] dim = 2 : tensor<1x2x2x8xf64> -> tensor<1x2x8x8xf64>
  %dq = shardx.attention_dq %q, %kg, %vg, %o, %l, %do scale = 0.35 : tensor<1x2x2x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x2x8xf64>, tensor<1x2x2xf64>, tensor<1x2x2x8xf64> -> tensor<1x2x2x8xf64>
  %dk, %dv = shardx.attention_dkv %q, %kg, %vg, %o, %l, %do scale = 0.35 : tensor<1x2x2x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x2x8xf64>, tensor<1x2x2xf64>, tensor<1x2x2x8xf64> -> tensor<1x2x8x8xf64>, tensor<1x2x8x8xf64>
  %e = tensor.empty() : tensor<1x8x2x8xf64>
  %dkt = linalg.transpose ins(%dk : tensor<1x2x8x8xf64>) outs(%e : tensor<1x8x2x8xf64>) permutation = [0, 2, 1, 3]
  %dks = shardx.reduce_scatter %dkt on @mesh axes = [0] dim = 1 reduction = sum : tensor<1x8x2x8xf64> -> tensor<1x2x2x8xf64>
  %dvs = shardx.reduce_scatter %dv on @mesh axes = [0] dim = 2 reduction = sum : tensor<1x2x8x8xf64> -> tensor<1x2x2x8xf64>
  %dkb = tensor.empty() : tensor<1x2x2x8xf64>
  %dkr = linalg.transpose ins(%dks : tensor<1x2x2x8xf64>) outs(%dkb : tensor<1x2x2x8xf64>) permutation = [0, 2, 1, 3]
  return %dq, %dkr, %dvs : tensor<1x2x2x8xf64>, tensor<1x2x2x8xf64>, tensor<1x2x2x8xf64>
}

// -----

// Tests what stays as it is: a gather with sizes (uneven), a gather along
// another dim than the keys' sequence, an op across positions between the
// gather and the attention (a cumulative sum along the sequence is not
// one), a gather of stride 2, and a gather that another op reads too (the
// ring would add its bytes).
shardx.mesh @mesh(shape = 2, axes = ["cp"])
// CHECK-LABEL: func.func @kept
func.func @kept(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x?x8xf32>,
                %k2: tensor<1x1x8x8xf32>, %k3: tensor<1x2x4x8xf32>,
                %v: tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  // CHECK-NOT: shardx.permute
  // CHECK-COUNT-5: shardx.attention %
  // CHECK-NOT: shardx.permute
  %ku = shardx.all_gather %k on @mesh axes = [0] dim = 2 sizes = [5, 3] : tensor<1x2x?x8xf32> -> tensor<1x2x8x8xf32>
  %o1, %l1 = shardx.attention %q, %ku, %v scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  %kh = shardx.all_gather %k2 on @mesh axes = [0] dim = 1 : tensor<1x1x8x8xf32> -> tensor<1x2x8x8xf32>
  %o2, %l2 = shardx.attention %q, %kh, %v scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  %kg = shardx.all_gather %k3 on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x2x8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %cs = linalg.generic {indexing_maps = [affine_map<(a, b, c, d, e) -> (a, b, e, d)>, affine_map<(a, b, c, d, e) -> (a, b, c, d)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%kg : tensor<1x2x8x8xf32>) outs(%f : tensor<1x2x8x8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8x8xf32>
  %o3, %l3 = shardx.attention %q, %cs, %v scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  %ks = shardx.all_gather %k3 on @mesh axes = [0] dim = 2 stride = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %o4, %l4 = shardx.attention %q, %ks, %v scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  %kr = shardx.all_gather %k3 on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %vr = shardx.all_gather %k3 on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %o5, %l5 = shardx.attention %q, %kr, %vr scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return %kr : tensor<1x2x8x8xf32>
}

// -----

// Tests an uneven split (10 keys over 4 ranks: 3, 3, 3, 1, as exchanges
// from [S(2)] to [R]): each rank's block is padded to 3 keys with zeros
// and each block's key positions with the greatest i64, which no query
// position reaches, so the padding is masked; non-causal, positions are
// made up: every query at the greatest i64 but one, each block's real
// keys at 0 and its padding at the greatest.
shardx.mesh @mesh(shape = 4, axes = ["cp"])
// CHECK-LABEL: func.func @uneven
func.func @uneven(%q: tensor<1x2x?x8xf32>, %k: tensor<1x2x?x8xf32>,
                  %v: tensor<1x2x?x8xf32>, %qpos: tensor<?xi64>,
                  %kpos: tensor<10xi64>) -> (tensor<1x2x?x8xf32>, tensor<1x2x?xf32>) {
  // CHECK-NOT: shardx.exchange
  // CHECK: tensor.pad %{{.*}} low[0, 0, 0, 0] high[0, 0, %{{.*}}, 0]
  // CHECK: tensor.pad %{{.*}} low[0, 0, 0, 0] high[0, 0, %{{.*}}, 0]
  // CHECK: %[[POS:.*]] = tensor.extract_slice %{{.*}}[%{{.*}}] [%{{.*}}] [1] : tensor<10xi64> to tensor<?xi64>
  // CHECK: %[[MAX:.*]] = arith.constant 9223372036854775807 : i64
  // CHECK: tensor.pad %[[POS]] low[0] high[%{{.*}}]
  // CHECK: tensor.yield %[[MAX]] : i64
  // CHECK: } : tensor<?xi64> to tensor<3xi64>
  // CHECK-COUNT-3: shardx.permute {{.*}} : tensor<1x2x3x8xf32>
  // CHECK-NOT: shardx.exchange
  // CHECK: return
  %kg = shardx.exchange %k on @mesh axes = [0] from #shardx.layout<@mesh, [S(2)]> to #shardx.layout<@mesh, [R]> shape = [1, 2, 10, 8] : tensor<1x2x?x8xf32> -> tensor<1x2x10x8xf32>
  %vg = shardx.exchange %v on @mesh axes = [0] from #shardx.layout<@mesh, [S(2)]> to #shardx.layout<@mesh, [R]> shape = [1, 2, 10, 8] : tensor<1x2x?x8xf32> -> tensor<1x2x10x8xf32>
  %o, %l = shardx.attention %q, %kg, %vg causal(%qpos, %kpos) scale = 0.35 : tensor<1x2x?x8xf32>, tensor<1x2x10x8xf32>, tensor<1x2x10x8xf32>, tensor<?xi64>, tensor<10xi64> -> tensor<1x2x?x8xf32>, tensor<1x2x?xf32>
  return %o, %l : tensor<1x2x?x8xf32>, tensor<1x2x?xf32>
}

// CHECK-LABEL: func.func @uneven_full
func.func @uneven_full(%q: tensor<1x2x?x8xf32>, %k: tensor<1x2x?x8xf32>,
                       %v: tensor<1x2x?x8xf32>) -> tensor<1x2x?x8xf32> {
  // CHECK-NOT: shardx.exchange
  // CHECK: %[[LATE:.*]] = arith.constant 9223372036854775806 : i64
  // CHECK: %[[QPOS:.*]] = linalg.fill ins(%[[LATE]] : i64) outs(%{{.*}} : tensor<?xi64>)
  // CHECK: %[[REAL:.*]] = linalg.fill ins(%{{.*}} : i64) outs(%{{.*}} : tensor<?xi64>)
  // CHECK: tensor.pad %[[REAL]] low[0] high[%{{.*}}]
  // CHECK: shardx.attention %{{.*}} causal(%[[QPOS]], %{{.*}})
  // CHECK-COUNT-3: shardx.permute {{.*}} : tensor<1x2x3x8xf32>
  // CHECK-NOT: shardx.exchange
  %kg = shardx.exchange %k on @mesh axes = [0] from #shardx.layout<@mesh, [S(2)]> to #shardx.layout<@mesh, [R]> shape = [1, 2, 10, 8] : tensor<1x2x?x8xf32> -> tensor<1x2x10x8xf32>
  %vg = shardx.exchange %v on @mesh axes = [0] from #shardx.layout<@mesh, [S(2)]> to #shardx.layout<@mesh, [R]> shape = [1, 2, 10, 8] : tensor<1x2x?x8xf32> -> tensor<1x2x10x8xf32>
  %o, %l = shardx.attention %q, %kg, %vg scale = 0.35 : tensor<1x2x?x8xf32>, tensor<1x2x10x8xf32>, tensor<1x2x10x8xf32> -> tensor<1x2x?x8xf32>, tensor<1x2x?xf32>
  return %o : tensor<1x2x?x8xf32>
}

// -----

// Tests the quarters of a zig-zag order (8 positions on 2 ranks in chunks
// of 2: rank 0 holds positions 0-1 and 6-7, rank 1 2-5): the queries are
// the rank's chunk of the constant key positions, so the pass knows what
// each rank's mask shows. The own block shows 3 quarters (query half 0 sees
// key half 0, half 1 both); the other's 2 (rank 0: its later half sees
// both of rank 1's; rank 1: both its halves see rank 0's first half). Each
// call reads 2 rows of queries and keys, at offsets looked up by rank
// (rank 1's step-1 calls read key rows 0 where rank 0's read 0 and 2), and
// is combined into its query rows. Positions in the rows' order: the own
// block in 3 quarters, the other's whole (rank 1 sees all of rank 0's).
// Without a ring (NORING), the attention over the gathered keys runs by
// the pieces its mask shows: each rank's query halves against the 4
// chunks of 2 keys, 5 of 8 on either rank (rank 0: half 0 sees chunk 0,
// half 1 all four); in the rows' order rank 1 shows 7 of 8, more than
// three quarters: one whole op.
shardx.mesh @mesh(shape = 2, axes = ["cp"])
// CHECK-LABEL: func.func @zigzag
// NORING-LABEL: func.func @zigzag
// NORING-COUNT-2: shardx.all_gather
// NORING-COUNT-5: shardx.attention {{.*}} : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>, tensor<2xi64>, tensor<2xi64> ->
// NORING-NOT: shardx.attention
// NORING-NOT: shardx.permute
// NORING: return
func.func @zigzag(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                  %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) {
  // CHECK: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
  // CHECK: linalg.fill ins(%[[NEGINF]] : f32) outs(%{{.*}} : tensor<1x2x4xf32>)
  // CHECK-COUNT-3: shardx.attention {{.*}} : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<1x2x2x8xf32>, tensor<1x2x2xf32>
  // CHECK: shardx.permute
  // CHECK: shardx.permute
  // CHECK: %[[RANK1:.*]] = arith.cmpi eq, %{{.*}}, %c1{{.*}} : index
  // CHECK: arith.select %[[RANK1]], %c0{{.*}}, %c2{{.*}} : index
  // CHECK-COUNT-2: shardx.attention {{.*}} -> tensor<1x2x2x8xf32>, tensor<1x2x2xf32>
  // CHECK-NOT: shardx.attention
  // CHECK: tensor.insert_slice
  // CHECK: return
  %pos = arith.constant dense<[0, 1, 6, 7, 2, 3, 4, 5]> : tensor<8xi64>
  %qpos = shardx.chunk %pos on @mesh axes = [0] dim = 0 : tensor<8xi64> -> tensor<4xi64>
  %kg = shardx.all_gather %k on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %vg = shardx.all_gather %v on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %o, %l = shardx.attention %q, %kg, %vg causal(%qpos, %pos) scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return %o, %l : tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
}

// CHECK-LABEL: func.func @in_order
// NORING-LABEL: func.func @in_order
// NORING: shardx.attention {{.*}} -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
// NORING-NOT: shardx.attention
// NORING: return
func.func @in_order(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK-COUNT-3: shardx.attention {{.*}} -> tensor<1x2x2x8xf32>, tensor<1x2x2xf32>
  // CHECK: shardx.permute
  // CHECK: shardx.attention {{.*}} -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  // CHECK-NOT: shardx.attention
  // CHECK: return
  %pos = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
  %qpos = shardx.chunk %pos on @mesh axes = [0] dim = 0 : tensor<8xi64> -> tensor<4xi64>
  %kg = shardx.all_gather %k on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %vg = shardx.all_gather %v on @mesh axes = [0] dim = 2 : tensor<1x2x4x8xf32> -> tensor<1x2x8x8xf32>
  %o, %l = shardx.attention %q, %kg, %vg causal(%qpos, %pos) scale = 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Tests an attention on one rank at torch.arange's positions (the iota
// generic the importer writes, its multiply by 1 and add of 0 not folded)
// in pieces of piece-rows=2: 8 queries and keys in 4 pieces each, the 10
// pairs of the causal mask's lower triangle, each combined into its query
// rows; dq and dK, dV alike. By default (128 rows) it stays whole, and so
// do positions that are not an iota of the index.
// CHECK-LABEL: func.func @pieces
// CHECK-COUNT-1: shardx.attention %
// CHECK-NOT: shardx.attention %
// CHECK: return
// PIECES-LABEL: func.func @pieces
// PIECES-COUNT-10: shardx.attention {{.*}} : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<2xi64>, tensor<2xi64> ->
// PIECES-COUNT-10: shardx.attention_dq {{.*}} -> tensor<1x2x2x4xf32>
// PIECES-COUNT-10: shardx.attention_dkv {{.*}} -> tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>
// PIECES: return
func.func @pieces(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>,
                  %do: tensor<1x2x8x4xf32>)
    -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    %zero = arith.constant 0 : i64
    %one = arith.constant 1 : i64
    %m = arith.muli %c, %one : i64
    %a = arith.addi %zero, %m : i64
    linalg.yield %a : i64
  } -> tensor<8xi64>
  %o, %l = shardx.attention %q, %k, %v causal(%pos, %pos) scale = 0.5 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<8xi64>, tensor<8xi64> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  %dq = shardx.attention_dq %q, %k, %v, %o, %l, %do causal(%pos, %pos) scale = 0.5 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8xf32>, tensor<1x2x8x4xf32>, tensor<8xi64>, tensor<8xi64> -> tensor<1x2x8x4xf32>
  %dk, %dv = shardx.attention_dkv %q, %k, %v, %o, %l, %do causal(%pos, %pos) scale = 0.5 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8xf32>, tensor<1x2x8x4xf32>, tensor<8xi64>, tensor<8xi64> -> tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
  return %o, %dq, %dk, %dv : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// An op with `products` (a fused kernel's, which skips the hidden tiles
// itself) stays whole.
// PIECES-LABEL: func.func @products_whole
// PIECES-COUNT-1: shardx.attention %
// PIECES-NOT: shardx.attention %
func.func @products_whole(%q: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  %e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %o, %l = shardx.attention %q, %q, %q causal(%pos, %pos) scale = 0.5 products = bf16 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<8xi64>, tensor<8xi64> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %o : tensor<1x2x8x4xf32>
}

// PIECES-LABEL: func.func @not_an_iota
// PIECES-COUNT-1: shardx.attention %
// PIECES-NOT: shardx.attention %
func.func @not_an_iota(%q: tensor<1x2x8x4xf32>, %pos: tensor<8xi64>) -> tensor<1x2x8x4xf32> {
  %o, %l = shardx.attention %q, %q, %q causal(%pos, %pos) scale = 0.5 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<8xi64>, tensor<8xi64> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %o : tensor<1x2x8x4xf32>
}
