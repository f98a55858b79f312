// RUN: shardx-opt %s --split-input-file --shardx-auto-shard="memory-budget=1000" --verify-diagnostics

// Tests that a budget below every plan's peak is an error naming the
// smallest peak found.
shardx.mesh @mesh(shape = 4, axes = ["x"])

// expected-error @+1 {{no plan fits the memory budget of 1000 bytes per rank: the smallest modeled peak found is 10752 bytes (10.50 KiB)}}
func.func @step(%w: tensor<64x32xf32>,
                %m: tensor<64x32xf32> {torch.state = "momentum_buffer"},
                %x: tensor<16x64xf32>)
    -> (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  %m2 = arith.addf %m, %w : tensor<64x32xf32>
  %w2 = arith.subf %w, %m2 : tensor<64x32xf32>
  return %y, %w2, %m2 : tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Tests that a module without a mesh is an error.
// expected-error @+1 {{shardx-auto-shard needs one shardx.mesh in the module, found 0}}
module {
  func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
    return %a : tensor<4xf32>
  }
}

// -----

// Tests that a module with two meshes is an error.
// expected-error @+1 {{shardx-auto-shard needs one shardx.mesh in the module, found 2}}
module {
  shardx.mesh @a(shape = 2)
  shardx.mesh @b(shape = 4)
}

// -----

// Tests that a call shardx-inline-calls cannot inline (to an external
// function) is an error: the plan could not be priced.
shardx.mesh @mesh(shape = 2, axes = ["x"])

func.func private @external(tensor<8x8xf32>) -> tensor<8x8xf32>

// expected-error @+1 {{shardx-auto-shard cannot price a call to @external, which shardx-inline-calls does not inline}}
func.func @calls_external(%w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = func.call @external(%w) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
