//===- ReshardPlanning.h - Plans for shardx.redistribute ops ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_RESHARDPLANNING_H
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_RESHARDPLANNING_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Planner/Planner.h"

#include "llvm/ADT/DenseMap.h"

#include <memory>

namespace mlir::shardx {

/// The planner's view of a mesh: its shape and cost hints.
MeshSpec getMeshSpec(MeshOp mesh);

/// One planner per mesh, shared by the ops of a pass run.
class ReshardPlanners {
public:
  /// The plan of `op`, or null after emitting "Cannot reshard: ..." at it.
  /// Sets `mesh` (when given) to the op's mesh.
  const Plan *getPlan(RedistributeOp op, SymbolTableCollection &symbolTable,
                      MeshOp *mesh = nullptr);

private:
  llvm::DenseMap<Operation *, std::unique_ptr<Planner>> planners;
};

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_RESHARDPLANNING_H
