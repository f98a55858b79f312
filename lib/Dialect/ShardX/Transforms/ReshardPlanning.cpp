//===- ReshardPlanning.cpp - Plans for shardx.redistribute ops ------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

using namespace mlir;
using namespace mlir::shardx;

MeshSpec mlir::shardx::getMeshSpec(MeshOp mesh) {
  MeshSpec spec;
  spec.shape.assign(mesh.getShape().begin(), mesh.getShape().end());
  std::optional<ArrayRef<double>> bandwidth = mesh.getBandwidth();
  std::optional<ArrayRef<double>> latency = mesh.getLatency();
  if (bandwidth || latency) {
    spec.costs.resize(spec.shape.size());
    for (size_t a = 0; a < spec.shape.size(); ++a) {
      if (bandwidth)
        spec.costs[a].bandwidthGBps = (*bandwidth)[a];
      if (latency)
        spec.costs[a].latencyUs = (*latency)[a];
    }
  }
  return spec;
}

const Plan *ReshardPlanners::getPlan(RedistributeOp op,
                                     SymbolTableCollection &symbolTable,
                                     MeshOp *meshOut) {
  MeshOp mesh = lookupMesh(op, op.getSource().getMesh(), &symbolTable);
  if (!mesh)
    return nullptr;
  if (meshOut)
    *meshOut = mesh;
  auto type = op.getType();
  if (!type.hasStaticShape()) {
    op.emitError("Cannot reshard a tensor of dynamic shape ")
        << type << ": the planner needs the global shape";
    return nullptr;
  }
  if (!type.getElementType().isIntOrFloat()) {
    op.emitError("Cannot reshard a tensor of ")
        << type.getElementType() << ": only integer and float elements";
    return nullptr;
  }
  std::unique_ptr<Planner> &planner = planners[mesh];
  if (!planner)
    planner = std::make_unique<Planner>(getMeshSpec(mesh));
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
  std::string error;
  const Plan *plan =
      planner->plan(op.getSource().getLayout(), op.getTarget().getLayout(),
                    shape, std::max<int64_t>(1, bits / 8), error);
  if (!plan)
    op.emitError(error);
  return plan;
}
