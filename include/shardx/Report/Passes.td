//===- Passes.td - The sharding report pass ----------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_REPORT_PASSES_TD
#define SHARDX_REPORT_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Report
//===----------------------------------------------------------------------===//

def ReportPass : Pass<"shardx-report", "ModuleOp"> {
  let summary = "writes the HTML sharding report (layouts drawn as device "
                "blocks, every reshard's plan, bytes and modeled time)";
  let description = [{
    Writes one self-contained HTML page (docs/Report.md): the mesh, every
    argument's and result's layout drawn per rank, a sortable table of
    every reshard with its plan, bytes per rank and modeled time, totals
    per collective kind and mesh axis group, the modeled memory per rank,
    and the strategies propagation chose against their priced
    alternatives.

    Given a program whose ops carry no layouts yet, it runs inlining,
    `shardx-propagate` and `shardx-insert-reshards` itself (and once more
    without the whole-graph refinement, to show what the refinement
    changed); after `--shardx-propagate --shardx-insert-reshards` it
    reports the program as it is. The memory section lowers a copy through
    `shardx-spmd` and the cpu target's bufferization.

    A bare value is the output file:
    ```sh
    shardx-opt prog.mlir --shardx-report=report.html -o /dev/null
    shardx-opt prog.mlir --shardx-report="output=report.html title=MLP" -o /dev/null
    ```
    Without an output file the pass fails.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"",
           "the HTML file to write">,
    Option<"title", "title", "std::string", /*default=*/"",
           "the report's title (default: ShardX sharding report)">,
  ];
  let dependentDialects = [
    "arith::ArithDialect",
    "linalg::LinalgDialect",
    "shardx::ShardXDialect",
    "tensor::TensorDialect",
  ];
}

#endif // SHARDX_REPORT_PASSES_TD
