//===- LibraryNames.h - ShardX's MLIR-free names in mlir::shardx -*- C++ -*-===//
//
// The one namespace scheme. MLIR-free libraries live in ::shardx (the layout
// algebra, the planner) and ::shardx::<library> (rt, exec, report, tools);
// the dialect and its passes live in mlir::shardx, as MLIR dialects do. Code in
// mlir::shardx, or with `using namespace mlir::shardx`, names the MLIR-free
// types unqualified through the declarations below instead of writing
// `::shardx::` (the outer name is hidden by mlir::shardx). A new MLIR-free type
// that the dialect side uses is added here, once.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_LIBRARYNAMES_H
#define SHARDX_DIALECT_SHARDX_IR_LIBRARYNAMES_H

#include "shardx/Layout/Layout.h"
#include "shardx/Planner/Planner.h"

namespace shardx::exec {}
namespace shardx::report {}
namespace shardx::rt {}
namespace shardx::tools {}

namespace mlir::shardx {
// The layout algebra (shardx/Layout/Layout.h).
using ::shardx::allMeshCoords;
using ::shardx::axisMask;
using ::shardx::chunkInterval;
using ::shardx::countMeshDevices;
using ::shardx::DimSharding;
using ::shardx::Interval;
using ::shardx::kMaxMeshDevices;
using ::shardx::Layout;
using ::shardx::LayoutSpelling;
using ::shardx::linearizeCoords;
using ::shardx::LocalShard;
using ::shardx::parseReduceOp;
using ::shardx::Placement;
using ::shardx::ReduceOp;
using ::shardx::Split;
using ::shardx::stringifyReduceOp;
// The reshard planner (shardx/Planner/Planner.h).
using ::shardx::AxisCost;
using ::shardx::lowerBoundBytes;
using ::shardx::MeshSpec;
using ::shardx::Plan;
using ::shardx::Planner;
using ::shardx::kMaxPlannerDevices;
using ::shardx::Step;
using ::shardx::stringifyStepKind;
// The MLIR-free libraries, by their short names.
namespace exec = ::shardx::exec;
namespace report = ::shardx::report;
namespace rt = ::shardx::rt;
namespace tools = ::shardx::tools;
} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_IR_LIBRARYNAMES_H
