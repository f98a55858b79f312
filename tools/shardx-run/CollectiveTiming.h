//===- CollectiveTiming.h - Measured collectives for the report -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-run --report on the threads backend runs the sharded program once
// more with every rank's communicator wrapped in one that times each
// collective call, and reports the time per collective kind, axis group and
// rank next to the model's estimate (docs/Report.md).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TOOLS_SHARDX_RUN_COLLECTIVETIMING_H
#define SHARDX_TOOLS_SHARDX_RUN_COLLECTIVETIMING_H

#include "shardx/Exec/Executor.h"
#include "shardx/Report/Report.h"

#include <string>
#include <vector>

namespace shardx::tools {

/// Runs `entry` of `artifact` on the threads backend with timed
/// communicators; appends one record per (collective kind, axis group,
/// rank) to `measured` (axis names from `axisNames`).
rt::Status
measureCollectives(const exec::Artifact &artifact,
                   const exec::EntryPoint &entry,
                   const std::vector<exec::HostTensor> &globalInputs,
                   const std::vector<std::string> &axisNames, double timeout,
                   std::vector<mlir::shardx::MeasuredCollective> &measured);

} // namespace shardx::tools

#endif // SHARDX_TOOLS_SHARDX_RUN_COLLECTIVETIMING_H
