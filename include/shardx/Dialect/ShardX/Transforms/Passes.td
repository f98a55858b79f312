//===- Passes.td - ShardX passes ---------------------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Test and debugging passes
//===----------------------------------------------------------------------===//

def TestLocalShardsPass : Pass<"shardx-test-local-shards", "ModuleOp"> {
  let summary = "prints the DTensor placements and every rank's local shard";
  let description = [{
    A test-only pass. For every layout on a function argument or result and
    on every `shardx.annotate`, it emits a remark with the layout's DTensor
    placements and, for every rank of the mesh, the runs of global indices
    the rank holds along each dim and its local shape.

    ```mlir
    shardx.mesh @mesh(shape = 2x2)
    func.func @f(%x: tensor<5x4xf32>
        {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}) ...
    ```
    gives

    ```
    remark: layout [S(0), S(0)] placements [S(0), S(0)] on 5x4
      rank (0, 0): [0, 2) x [0, 4) -> 2x4
      rank (0, 1): [2, 3) x [0, 4) -> 1x4
      ...
    ```
  }];
}

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD
