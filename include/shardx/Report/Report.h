//===- Report.h - The HTML sharding report ----------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// `shardx-opt --shardx-report=out.html` and `shardx-run --report out.html`
// (docs/Report.md): one self-contained HTML file with the mesh, every
// argument's and result's layout drawn as device blocks (intermediates on
// demand), a sortable table of every reshard with its plan, bytes and
// modeled time, totals per collective kind and mesh axis, the propagation's
// refinement choices and, after a run, measured collective times.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_REPORT_REPORT_H
#define SHARDX_REPORT_REPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LLVM.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::shardx {

/// One op whose strategy the whole-graph refinement changed.
struct PropagationChoice {
  std::string op;                    // op name
  std::string location;              // source location
  std::string programOrder, refined; // result and operand layouts, as text
};

/// Measured time of the collectives of one kind over one group of mesh
/// axes on one rank (shardx-run --report).
struct MeasuredCollective {
  std::string kind; // "all_gather", ...
  std::string axes; // mesh axis names, "dp,tp"
  int64_t rank = 0;
  int64_t calls = 0;
  double bytes = 0; // bytes this rank received (as the model counts them)
  double seconds = 0;
};

/// What the report shows beyond the program itself.
/// One function's modeled per-rank memory (shardx/Analysis/MemoryModel.h),
/// as the report draws it.
struct MemorySummary {
  std::string function;
  std::vector<int64_t> timeline; // bytes alive at each op
  int64_t peakBytes = 0, argumentBytes = 0, allocatedPeakBytes = 0;
  int64_t peakIndex = -1;
  std::string peakOp, peakLocation;
  std::vector<std::pair<std::string, int64_t>> byRole; // at the peak
  /// The peak of the copy lowered to buffers (memory-level=buffers of
  /// shardx-print-plan; what the CPU runtime allocates), -1 if not modeled.
  int64_t bufferPeakBytes = -1;
};

struct ReportExtras {
  std::string title;
  /// Filled when the report ran propagation itself: the ops the refinement
  /// changed and the reshard cost (us) of each phase's result.
  bool haveChoices = false;
  double programOrderCost = 0, refinedCost = 0;
  int64_t programOrderReshards = 0, refinedReshards = 0;
  std::vector<PropagationChoice> choices;
  /// The modeled per-rank memory of each function of the local program
  /// (computeMemoryForReport), or why there is none.
  std::vector<MemorySummary> memory;
  std::string memoryNote;
  /// Filled by shardx-run --report.
  std::vector<MeasuredCollective> measured;
  std::string runSummary;
};

/// "file:line[:col]" of the source positions in `loc` (a name, a fused
/// list, a call site's callee), "" for an unknown location.
std::string locationText(Location loc);

/// Writes the report of `module`, a program after shardx-propagate and
/// shardx-insert-reshards (its redistributes are planned here, as
/// shardx-print-plan plans them). Fails with a diagnostic when a reshard
/// cannot be planned.
LogicalResult writeHtmlReport(ModuleOp module, const ReportExtras &extras,
                              llvm::raw_ostream &os);

/// Runs a pipeline that `build` fills on the module being prepared.
using PipelineRunner =
    function_ref<LogicalResult(function_ref<void(OpPassManager &)> build)>;

/// Runs what the report needs on `module` in place: when nothing is
/// propagated yet, inlining, shardx-propagate and shardx-insert-reshards,
/// after the same without the whole-graph refinement, to fill
/// `extras.choices` (the ops the refinement changed) and the two phases'
/// costs. A module that already has layouts on its ops is left as it is.
LogicalResult prepareForReport(ModuleOp module, ReportExtras &extras,
                               PipelineRunner run);
/// The same with a PassManager of the module's context.
LogicalResult prepareForReport(ModuleOp module, ReportExtras &extras);

/// Runs the pipeline `build` makes on `module` (a copy the report owns).
using ModulePipelineRunner = function_ref<LogicalResult(
    ModuleOp module, function_ref<void(OpPassManager &)> build)>;

/// Fills `extras.memory`: the memory model of each function of `module`'s
/// local program (the module itself when it is local, else a copy run
/// through shardx-spmd with collectives scheduled); on failure
/// `extras.memoryNote` says why.
void computeMemoryForReport(ModuleOp module, ReportExtras &extras,
                            ModulePipelineRunner run);
/// `s` with the HTML special characters escaped (&, <, >, ").
std::string escapeHtml(StringRef s);

/// The table of each op's chosen strategy and its priced alternatives
/// (`shardx.alternatives`); nothing when no op has them.
void writeAlternativesSection(llvm::raw_ostream &os, ModuleOp module);

/// The memory section of the page (nothing when `extras` has none).
void writeMemorySection(llvm::raw_ostream &os, const ReportExtras &extras);

} // namespace mlir::shardx

#endif // SHARDX_REPORT_REPORT_H
