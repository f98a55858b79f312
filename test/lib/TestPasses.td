//===- TestPasses.td - ShardX test-only passes -------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Passes that exist for the lit tests: they print what a library computes
// (a sharding rule, every rank's local shard) so that FileCheck can read
// it. They are built into ShardXTestPasses, which only shardx-opt and the
// fuzzers link (as upstream MLIR's test/lib and Shardy's test passes are);
// no library of lib/ and no wheel holds them.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TEST_LIB_TESTPASSES_TD
#define SHARDX_TEST_LIB_TESTPASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Layout (lib/Layout)
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

//===----------------------------------------------------------------------===//
// Sharding rules (lib/Rules)
//===----------------------------------------------------------------------===//

def TestPrintRulesPass : Pass<"shardx-test-print-rules", "ModuleOp"> {
  let summary = "prints the sharding rule of every op";
  let description = [{
    A test-only pass: for every op with tensor operands or results, emits a
    remark with its sharding rule in factors, or "no sharding rule".

    ```
    remark: ([i, k], [k, j], [i, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}
    ```

    With `semantics`, a second remark per op with a rule gives what the
    rule answers of the op's body: its reduction combiner, whether its
    init is that combiner's identity, the tensor operands (numbers) it is
    linear in one at a time, and whether its results are shape-only:

    ```
    remark: reduction=sum identity-init=1 linear-in=[0, 1] shape-only=0
    ```
  }];
  let options = [
    Option<"semantics", "semantics", "bool", "false",
           "Also print the reduction kind, identity init, linearity and "
           "shape-only answers of each rule">,
  ];
}

#endif // SHARDX_TEST_LIB_TESTPASSES_TD
