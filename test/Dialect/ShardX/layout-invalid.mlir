// RUN: shardx-opt %s --split-input-file --verify-diagnostics

// Tests that an unknown placement is rejected at the attribute.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{unknown placement 'X'; expected S(d), SS(d, sf), R or P(op)}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [X(0), R]>})

// -----

// Tests that a placement that is not a keyword is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{expected a placement: S(d), SS(d, sf), R or P(op)}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [0, R]>})

// -----

// Tests that an unknown Partial reduction is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{unknown Partial reduction 'mean'; expected sum, avg, max, min or prod}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [P(mean), R]>})

// -----

// Tests that a layout needs a mesh symbol.
// expected-error @+1 {{expected a mesh symbol such as @mesh}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<mesh, [R]>})

// -----

// Tests that a negative shard dim is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: placement S(-1) on mesh axis 0 shards a negative dim}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(-1), R]>})

// -----

// Tests that a StridedShard split factor below 1 is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: placement SS(0, 0) on mesh axis 0 has a split factor below 1}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 0), R]>})

// -----

// Tests that a split factor that does not fall on the blocks of the later
// splits is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: mesh axis 1 (size 2) cannot split a block of 3 left by the split factors before it}}
func.func @f(%a: tensor<12xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 3), S(0)]>})

// -----

// Tests that StridedShard needs its mesh declared first (its canonical form
// depends on the axis sizes).
// expected-error @+1 {{cannot resolve SS placements: mesh @later has not been declared before this layout}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@later, [SS(0, 2), S(0)]>})
shardx.mesh @later(shape = 2x2)

// -----

// Tests that StridedShard on a mesh with an axis of size 0 is rejected while
// parsing, before the mesh verifier runs (found by fuzzing: SIGFPE).
shardx.mesh @mesh(shape = 2x0)
// expected-error @+1 {{cannot resolve SS placements: axis 1 of mesh @mesh has size 0; mesh axis sizes must be positive}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(0)]>})

// -----

// Tests that StridedShard with the wrong number of placements for its mesh
// is rejected while parsing.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: layout has 1 placements but the mesh has 2 axes}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2)]>})

// -----

// Tests that an order listing an axis twice is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: order for dim 0 lists mesh axis 1 twice}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 1]}>})

// -----

// Tests that an order must list exactly the axes that shard the dim.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: order for dim 0 is [1] but the placements shard it over [0, 1]}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1]}>})

// -----

// Tests that an order for a dim no axis shards is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: order given for dim 1, which no mesh axis shards}}
func.func @f(%a: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], order = {1 = [0]}>})

// -----

// Tests that one dim cannot be spelled both with SS and with an order.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: dim 0 is spelled both with SS and with an explicit order or strides; use one spelling}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 2), S(0)], order = {0 = [1, 0]}>})

// -----

// Tests that strides need one entry per split.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: strides for dim 0 has 1 entries but the dim has 2 splits}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], strides = {0 = [2]}>})

// -----

// Tests that each stride must be a multiple of the one before it.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: dim 0 has stride 3 that is not a multiple of the stride 2 of the split before it}}
func.func @f(%a: tensor<24xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], strides = {0 = [2, 3]}>})

// -----

// Tests that a stride below 1 is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: dim 0 has a stride below 1}}
func.func @f(%a: tensor<24xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], strides = {0 = [0]}>})

// -----

// Tests that explicit sizes cannot be combined with strides.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: dim 0 has both strides and explicit sizes}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], strides = {0 = [2]}, sizes = {0 = [4, 4]}>})

// -----

// Tests that negative explicit sizes are rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{invalid layout: dim 0 has a negative shard size}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [9, -1]}>})

// -----

// Tests that an unknown clause is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{unknown layout clause 'offsets'; expected order, strides or sizes}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], offsets = {0 = [0]}>})

// -----

// Tests that a clause given twice is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{layout clause 'sizes' given twice}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [4, 4]}, sizes = {0 = [4, 4]}>})

// -----

// Tests that a clause listing a dim twice is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{'sizes' lists dim 0 twice}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [4, 4], 0 = [4, 4]}>})

// -----

//===----------------------------------------------------------------------===//
// Constraints that need the mesh and the tensor
//===----------------------------------------------------------------------===//

// -----

// Tests that a layout on an unknown mesh is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{argument #0 layout #shardx.layout<@nope, [S(0), R]> refers to unknown mesh @nope}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@nope, [S(0), R]>}) {
  return
}

// -----

// Tests that a layout needs one placement per mesh axis.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{layout has 1 placements but the mesh has 2 axes}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  return
}

// -----

// Tests that a shard dim beyond the tensor rank is rejected.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{shard dim 2 is out of range for a tensor of rank 2}}
func.func @f(%a: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(2), R]>}) {
  return
}

// -----

// Tests that a shard dim out of range is also caught on results.
shardx.mesh @mesh(shape = 4)
// expected-error @+1 {{result #0 layout #shardx.layout<@mesh, [S(1)]> is invalid for 'tensor<8xf32>' on mesh @mesh: shard dim 1 is out of range for a tensor of rank 1}}
func.func @f(%a: tensor<8xf32>) -> (tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) {
  return %a : tensor<8xf32>
}

// -----

// Tests that explicit sizes need one entry per shard.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{sizes for dim 0 has 3 entries but the dim has 2 shards}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [4, 2, 2]}>}) {
  return
}

// -----

// Tests that explicit sizes must sum to the dim.
shardx.mesh @mesh(shape = 2x2)
// expected-error @+1 {{sizes for dim 0 sum to 7 but the dim has size 8}}
func.func @f(%a: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [4, 3]}>}) {
  return
}

// -----

// Tests that a strided dim must divide into its blocks.
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{dim 0 of size 25 is not a multiple of the 12 blocks its strided splits need}}
func.func @f(%a: tensor<25xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 6)]>}) {
  return
}

// -----

// Tests that a layout on a non-tensor argument is rejected.
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{a layout needs a ranked tensor}}
func.func @f(%a: f32 {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  return
}

// -----

// Tests that 'shardx.layout' on an argument must be a layout.
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{'shardx.layout' on argument #0 must be a #shardx.layout, got "S(0)"}}
func.func @f(%a: tensor<8xf32> {shardx.layout = "S(0)"}) {
  return
}

// -----

// Tests that unknown ShardX argument attributes are rejected.
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{unknown ShardX attribute 'shardx.placement' on argument #0}}
func.func @f(%a: tensor<8xf32> {shardx.placement = #shardx.layout<@mesh, [R]>}) {
  return
}

// -----

// Tests that an op's 'shardx.layouts' needs one layout per tensor result.
shardx.mesh @mesh(shape = 2)
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shardx.layouts' must be an array of one #shardx.layout per tensor result (1)}}
  %0 = math.exp %a {shardx.layouts = []} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that each 'shardx.layouts' entry must be a layout.
shardx.mesh @mesh(shape = 2)
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shardx.layouts' entry #0 is not a #shardx.layout: "R"}}
  %0 = math.exp %a {shardx.layouts = ["R"]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that each 'shardx.layouts' entry is checked against its result.
shardx.mesh @mesh(shape = 2)
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{result #0 layout #shardx.layout<@mesh, [S(3)]> is invalid for 'tensor<8xf32>'}}
  %0 = math.exp %a {shardx.layouts = [#shardx.layout<@mesh, [S(3)]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that ops carry 'shardx.layouts', not 'shardx.layout'.
shardx.mesh @mesh(shape = 2)
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{unknown ShardX attribute 'shardx.layout' on an op (ops carry 'shardx.layouts', one layout per tensor result)}}
  %0 = math.exp %a {shardx.layout = #shardx.layout<@mesh, [R]>} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that 'shardx.alternatives' (shardx-propagate{record-alternatives})
// must be a list of {cost, operands, results}.
shardx.mesh @mesh(shape = 2)
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shardx.alternatives' must be an array of {cost = <float>, operands = [layouts], results = [layouts]} dictionaries}}
  %0 = math.exp %a {shardx.alternatives = [{cost = 1.0 : f64, operands = ["R"], results = []}]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a layout on an argument of a function whose body lacks the
// argument is a diagnostic, not a crash (found by shardx-fuzz-spmd).
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{entry block must have 1 arguments to match function signature}}
func.func @un (tensor<7xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
}

// -----

// Tests that shardx.index_checks lists checks as {exception, message}
// dictionaries.
// expected-error @+1 {{'shardx.index_checks' on result #0 must be an array of one or more {exception = "...", message = "..."} dictionaries, got ["IndexError"]}}
func.func @f(%a: tensor<i64>) -> (tensor<i64> {shardx.index_checks = ["IndexError"]}) {
  return %a : tensor<i64>
}

// -----

// Tests that shardx.index_checks marks a 0-d i64 result (the check code).
// expected-error @+1 {{'shardx.index_checks' on result #0 must mark a 0-d i64 result, not 'tensor<2xi64>'}}
func.func @f(%a: tensor<2xi64>) -> (tensor<2xi64> {shardx.index_checks = [{exception = "IndexError", message = "index out of range in self"}]}) {
  return %a : tensor<2xi64>
}

// -----

// Tests that shardx.index_checks is a result attribute only.
// expected-error @+1 {{unknown ShardX attribute 'shardx.index_checks' on argument #0}}
func.func @f(%a: tensor<i64> {shardx.index_checks = [{exception = "IndexError", message = "index out of range in self"}]}) {
  return
}

// -----

// Tests that 'shardx.ragged_rows' (shardx-ragged-experts' mark) is a unit
// attribute.
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shardx.ragged_rows' must be a unit attribute}}
  %0 = math.exp %a {shardx.ragged_rows = 1 : i64} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a call's shardx.rank_value (shardx-convert-to-runtime) says
// its mesh's shape and one of axes (a group index) or values (per rank).
func.func private @shardx_rt_cg_axis_index(memref<?xi64, strided<[?], offset: ?>>) -> i64
func.func @f(%axes: memref<?xi64, strided<[?], offset: ?>>) -> i64 {
  // expected-error @+1 {{'shardx.rank_value' must be {mesh_shape = array<i64: ...>, and axes or values = array<i64: ...>}}}
  %0 = func.call @shardx_rt_cg_axis_index(%axes) {shardx.rank_value = {axes = array<i64: 0>}} : (memref<?xi64, strided<[?], offset: ?>>) -> i64
  return %0 : i64
}
