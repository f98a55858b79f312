//===- Schedule.h - Start/wait scheduling of collectives -------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The transformation behind shardx-schedule-collectives and the model that
// prices it, shared with shardx-print-plan.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_COLLECTIVES_SCHEDULE_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_COLLECTIVES_SCHEDULE_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::shardx {

/// Splits every all_reduce, all_gather and reduce_scatter under `root` into
/// its `*_start` and a shardx.wait and schedules the pairs in their blocks
/// (starts early, waits late, at most `maxBytesInFlight` in flight).
/// Returns whether anything changed.
bool scheduleCollectives(Operation *root, int64_t maxBytesInFlight);

/// The modeled times of a function's top-level block (microseconds);
/// collectives in nested regions are left out.
struct Timeline {
  double communication = 0;
  double exposed = 0;
  int64_t collectives = 0;
  int64_t asyncCollectives = 0;
};

/// One rank's modeled timeline of `fn`: compute at `computeRate` loop
/// iterations per second, collectives at the mesh's alpha-beta costs on one
/// channel in the order issued.
Timeline modelSchedule(func::FuncOp fn, SymbolTableCollection &symbolTable,
                       double computeRate);

/// Writes the schedule summary of `fn` (its collectives, modeled
/// communication, exposed time before and after, and its started
/// collectives with their bytes and bucket sizes) to `diag`.
void describeSchedule(func::FuncOp fn, const Timeline &before,
                      const Timeline &after, InFlightDiagnostic &diag);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_COLLECTIVES_SCHEDULE_H
