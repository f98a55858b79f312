//===- PrintPlan.cpp - Print the plan of every reshard --------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ReshardPlanning.h"
#include "Schedule.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "llvm/Support/FormatVariadic.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_PRINTPLANPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

struct PrintPlanPass : mlir::shardx::impl::PrintPlanPassBase<PrintPlanPass> {
  using PrintPlanPassBase::PrintPlanPassBase;

  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    ReshardPlanners planners;
    WalkResult result = getOperation()->walk([&](RedistributeOp op) {
      const ::shardx::Plan *plan = planners.getPlan(op, symbolTable);
      if (!plan)
        return WalkResult::interrupt();
      InFlightDiagnostic diag = op.emitRemark();
      diag << "plan " << op.getSource().getLayout().str() << " -> "
           << op.getTarget().getLayout().str() << " for ";
      std::string type;
      llvm::raw_string_ostream(type) << op.getType();
      diag << type << ": " << plan->steps.size()
           << (plan->steps.size() == 1 ? " step, " : " steps, ")
           << plan->numCollectives()
           << (plan->numCollectives() == 1 ? " collective, " : " collectives, ")
           << llvm::formatv("{0:F0}", plan->bytesPerRank) << " bytes/rank, "
           << llvm::formatv("{0:F3}", plan->cost) << " us";
      for (const ::shardx::Step &step : plan->steps)
        diag << "\n  " << step.str() << " -> " << step.after.str() << ": "
             << llvm::formatv("{0:F0}", step.bytesPerRank) << " bytes/rank, "
             << llvm::formatv("{0:F3}", step.cost) << " us";
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    printSchedules();
  }

  /// Per function with all-reduces, all-gathers or reduce-scatters (a local
  /// program, e.g. after shardx-spmd): the schedule summary of
  /// shardx-schedule-collectives' print-schedule, priced on a scheduled
  /// copy when the function is not scheduled yet.
  void printSchedules() {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> fns;
    for (auto fn : module.getOps<func::FuncOp>()) {
      bool hasCollectives =
          fn.walk([](Operation *op) {
              return isa<AllReduceOp, AllGatherOp, ReduceScatterOp,
                         AllReduceStartOp, AllGatherStartOp,
                         ReduceScatterStartOp>(op)
                         ? WalkResult::interrupt()
                         : WalkResult::advance();
            }).wasInterrupted();
      if (hasCollectives)
        fns.push_back(fn);
    }
    if (fns.empty())
      return;
    OwningOpRef<ModuleOp> scheduled = module.clone();
    scheduleCollectives(*scheduled, maxBytesInFlight);
    SymbolTableCollection symbolTable, scheduledTable;
    for (func::FuncOp fn : fns) {
      auto after = (*scheduled).lookupSymbol<func::FuncOp>(fn.getSymName());
      InFlightDiagnostic diag = fn.emitRemark();
      describeSchedule(after, modelSchedule(fn, symbolTable, computeRate),
                       modelSchedule(after, scheduledTable, computeRate), diag);
    }
  }
};

} // namespace
