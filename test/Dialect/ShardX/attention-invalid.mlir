// RUN: shardx-opt %s --split-input-file --verify-diagnostics

// Tests that q, k and v must be [batch, heads, sequence, width].
func.func @rank(%q: tensor<4x8x16xf32>, %k: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'q' must be [batch, heads, sequence, width], got 'tensor<4x8x16xf32>'}}
  %o, %l = shardx.attention %q, %k, %k scale = 0.25 : tensor<4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>, tensor<4x8xf32>
  return
}

// -----

// Tests that the query heads are a multiple of the key/value heads.
func.func @heads(%q: tensor<2x3x8x16xf32>, %k: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'q' has 3 heads, not a multiple of the 2 heads of 'k' and 'v'}}
  %o, %l = shardx.attention %q, %k, %k scale = 0.25 : tensor<2x3x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x3x8x16xf32>, tensor<2x3x8xf32>
  return
}

// -----

// Tests that q and k have one width.
func.func @width(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x8x8xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'k' dim 3 is 8 but must be 16 ('tensor<2x2x8x8xf32>')}}
  %o, %l = shardx.attention %q, %k, %k scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32> -> tensor<2x2x8x8xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Tests that v has k's keys.
func.func @keys(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x6x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'v' dim 2 is 6 but must be 8 ('tensor<2x2x6x16xf32>')}}
  %o, %l = shardx.attention %q, %k, %v scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x6x16xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Tests that the element type is f32 or f64.
func.func @bf16(%q: tensor<2x2x8x16xbf16>) {
  // expected-error @+1 {{'shardx.attention' op computes in f32 or f64, got 'bf16'}}
  %o, %l = shardx.attention %q, %q, %q scale = 0.25 : tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16> -> tensor<2x2x8x16xbf16>, tensor<2x2x8xbf16>
  return
}

// -----

// Tests that all tensors have q's element type.
func.func @mixed(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x8x16xf64>) {
  // expected-error @+1 {{'shardx.attention' op 'k' has element type 'f64' but 'q' has 'f32'}}
  %o, %l = shardx.attention %q, %k, %k scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf64>, tensor<2x2x8x16xf64> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Tests the result shapes: lse is [batch, heads, queries].
func.func @lse(%q: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'lse' must have rank 3, got 'tensor<2x2x8x1xf32>'}}
  %o, %l = shardx.attention %q, %q, %q scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8x1xf32>
  return
}

// -----

// Tests that the positions are integers, one per query / key.
func.func @positions(%q: tensor<2x2x8x16xf32>, %qp: tensor<8xi64>, %kp: tensor<6xi64>) {
  // expected-error @+1 {{'shardx.attention' op 'kpos' has 6 positions for 8}}
  %o, %l = shardx.attention %q, %q, %q causal(%qp, %kp) scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<8xi64>, tensor<6xi64> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

func.func @float_positions(%q: tensor<2x2x8x16xf32>, %qp: tensor<8xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'qpos' must be a rank-1 tensor of integers, got 'tensor<8xf32>'}}
  %o, %l = shardx.attention %q, %q, %q causal(%qp, %qp) scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Tests that the scale is finite.
func.func @scale(%q: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'scale' must be finite, got INF}}
  %o, %l = shardx.attention %q, %q, %q scale = 0x7FF0000000000000 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Tests that the gradients have their inputs' shapes.
func.func @dq(%q: tensor<2x2x8x16xf32>, %l: tensor<2x2x8xf32>) {
  // expected-error @+1 {{'shardx.attention_dq' op 'dq' dim 2 is 4 but must be 8 ('tensor<2x2x4x16xf32>')}}
  %dq = shardx.attention_dq %q, %q, %q, %q, %l, %q scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x4x16xf32>
  return
}

// -----

func.func @dout(%q: tensor<2x2x8x16xf32>, %l: tensor<2x2x8xf32>, %d: tensor<2x2x8x8xf32>) {
  // expected-error @+1 {{'shardx.attention_dkv' op 'dout' dim 3 is 8 but must be 16 ('tensor<2x2x8x8xf32>')}}
  %dk, %dv = shardx.attention_dkv %q, %q, %q, %q, %l, %d scale = 0.25 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8xf32>, tensor<2x2x8x8xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
  return
}

// -----

// Tests that `products` is a 16-bit float type, with f32 tensors.
func.func @products(%q: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'shardx.attention' op 'products' must be bf16 or f16, got 'f32'}}
  %o, %l = shardx.attention %q, %q, %q scale = 0.25 products = f32 : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
  return
}

// -----

func.func @products_f64(%q: tensor<2x2x8x16xf64>) {
  // expected-error @+1 {{'shardx.attention' op with 'products' computes in f32, got 'f64'}}
  %o, %l = shardx.attention %q, %q, %q scale = 0.25 products = bf16 : tensor<2x2x8x16xf64>, tensor<2x2x8x16xf64>, tensor<2x2x8x16xf64> -> tensor<2x2x8x16xf64>, tensor<2x2x8xf64>
  return
}
