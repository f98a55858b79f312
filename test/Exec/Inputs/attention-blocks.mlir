// The attention ops' forward and backward on one program (causal, 4 query
// heads over 2 key/value heads, 40 keys), for attention-blocks.test.
func.func @attention(%q: tensor<2x4x24x8xf64>, %k: tensor<2x2x40x8xf64>, %v: tensor<2x2x40x4xf64>,
                     %dout: tensor<2x4x24x4xf64>)
    -> (tensor<2x4x24x4xf64>, tensor<2x4x24xf64>, tensor<2x4x24x8xf64>, tensor<2x2x40x8xf64>,
        tensor<2x2x40x4xf64>) {
  %e1 = tensor.empty() : tensor<24xi64>
  %qpos = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e1 : tensor<24xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    %c10 = arith.constant 10 : i64
    %p = arith.addi %c, %c10 : i64
    linalg.yield %p : i64
  } -> tensor<24xi64>
  %e2 = tensor.empty() : tensor<40xi64>
  %kpos = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e2 : tensor<40xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<40xi64>
  %out, %lse = shardx.attention %q, %k, %v causal(%qpos, %kpos) scale = 0.35
      : tensor<2x4x24x8xf64>, tensor<2x2x40x8xf64>, tensor<2x2x40x4xf64>, tensor<24xi64>, tensor<40xi64>
      -> tensor<2x4x24x4xf64>, tensor<2x4x24xf64>
  %dq = shardx.attention_dq %q, %k, %v, %out, %lse, %dout causal(%qpos, %kpos) scale = 0.35
      : tensor<2x4x24x8xf64>, tensor<2x2x40x8xf64>, tensor<2x2x40x4xf64>, tensor<2x4x24x4xf64>,
        tensor<2x4x24xf64>, tensor<2x4x24x4xf64>, tensor<24xi64>, tensor<40xi64> -> tensor<2x4x24x8xf64>
  %dk, %dv = shardx.attention_dkv %q, %k, %v, %out, %lse, %dout causal(%qpos, %kpos) scale = 0.35
      : tensor<2x4x24x8xf64>, tensor<2x2x40x8xf64>, tensor<2x2x40x4xf64>, tensor<2x4x24x4xf64>,
        tensor<2x4x24xf64>, tensor<2x4x24x4xf64>, tensor<24xi64>, tensor<40xi64>
      -> tensor<2x2x40x8xf64>, tensor<2x2x40x4xf64>
  return %out, %lse, %dq, %dk, %dv : tensor<2x4x24x4xf64>, tensor<2x4x24xf64>, tensor<2x4x24x8xf64>,
      tensor<2x2x40x8xf64>, tensor<2x2x40x4xf64>
}
