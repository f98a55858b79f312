//===- Passes.td - ShardX conversion passes ----------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_CONVERSION_PASSES_TD
#define SHARDX_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// ShardXToRuntime
//===----------------------------------------------------------------------===//

def ConvertShardXToRuntimePass
    : Pass<"shardx-convert-to-runtime", "ModuleOp"> {
  let summary = "lowers the ShardX collectives on local tensors to runtime "
                "C-ABI calls";
  let description = [{
    The first step of code generation (`bufferizeProgram`, both targets):
    every collective and local step of the local SPMD program becomes tensor
    reshapes and transposes around one call of a flat runtime collective
    (`shardx_rt_cg_<kind>_<f32|f64|i32|i64>`, lib/Runtime/CompiledCode.cpp),
    which moves contiguous buffers only; the dim, stride and group order of
    each op are layout changes done here. One conversion pattern per op
    (`populateShardXToRuntimePatterns`), reading the group, reduction and
    uneven sizes through `CollectiveOpInterface`. `shardx.mesh` stays (code
    generation drops it after this pass); any other ShardX op is an error.

    ```mlir
    %y = shardx.all_reduce %x on @mesh axes = [0] reduction = sum
        : tensor<4xf32>
    ```
    becomes
    ```mlir
    %b = bufferization.to_buffer %x read_only : ...
    %c = memref.alloc() : memref<4xf32>
    memref.copy %b, %c : ...
    %o = memref.alloc() : memref<4xf32>
    func.call @shardx_rt_cg_all_reduce_f32(%in, %out, %c0_i32, %axes)
        : (memref<?xf32, strided<[?], offset: ?>>, ..., i32,
           memref<?xi64, strided<[?], offset: ?>>) -> ()
    %y = bufferization.to_tensor %o restrict writable : memref<4xf32> to ...
    ```

    Booleans move as i32 (a reduction of booleans is an error); uneven
    shards use the runtime's variable-count collectives (`*_v`) or
    `shardx_rt_cg_exchange`, whose result sizes the runtime computes from the
    layouts.
  }];
  let dependentDialects = [
    "arith::ArithDialect",
    "bufferization::BufferizationDialect",
    "func::FuncDialect",
    "linalg::LinalgDialect",
    "memref::MemRefDialect",
    "tensor::TensorDialect",
  ];
}

#endif // SHARDX_CONVERSION_PASSES_TD
