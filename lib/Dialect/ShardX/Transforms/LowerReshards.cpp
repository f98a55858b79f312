//===- LowerReshards.cpp - Replace reshards with their plans --------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>

namespace mlir::shardx {
#define GEN_PASS_DEF_LOWERRESHARDSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Per-member sizes along `dim` of the pieces an all_gather over `axes`
/// concatenates, when every group has the same list and the pieces differ;
/// empty otherwise (even pieces, or sizes that vary between groups, which
/// stay dynamic).
SmallVector<int64_t> gatherSizes(const ::shardx::Layout &before,
                                 ArrayRef<int64_t> globalShape,
                                 ArrayRef<int64_t> meshShape,
                                 ArrayRef<int64_t> axes, int64_t dim) {
  std::vector<int64_t> mesh(meshShape.begin(), meshShape.end());
  std::vector<int64_t> shape(globalShape.begin(), globalShape.end());
  std::vector<int64_t> group(axes.begin(), axes.end());
  std::map<std::vector<int64_t>, std::map<int64_t, int64_t>> byGroup;
  for (const auto &coords : ::shardx::allMeshCoords(mesh)) {
    std::vector<int64_t> rest = coords;
    for (int64_t a : group)
      rest[a] = -1;
    byGroup[rest][::shardx::linearizeCoords(mesh, group, coords)] =
        before.getLocalShard(mesh, shape, coords).shape[dim];
  }
  std::optional<std::map<int64_t, int64_t>> common;
  for (auto &[rest, sizes] : byGroup) {
    if (common && *common != sizes)
      return {};
    common = sizes;
  }
  SmallVector<int64_t> result;
  for (auto &[index, size] : *common)
    result.push_back(size);
  if (llvm::all_equal(result))
    return {};
  return result;
}

/// Multiplies the local terms by `scale` (P(sum) <-> P(avg)).
FailureOr<Value> rescale(OpBuilder &b, Location loc, Value value,
                         double scale) {
  auto type = cast<RankedTensorType>(value.getType());
  auto floatType = dyn_cast<FloatType>(type.getElementType());
  if (!floatType)
    return failure();
  SmallVector<Value> dynamicSizes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      dynamicSizes.push_back(tensor::DimOp::create(b, loc, value, d));
  Value empty = tensor::EmptyOp::create(b, loc, type, dynamicSizes);
  Value factor = arith::ConstantOp::create(b, loc, floatType,
                                           b.getFloatAttr(floatType, scale));
  Value filled = linalg::FillOp::create(b, loc, factor, empty).getResult(0);
  return arith::MulFOp::create(b, loc, value, filled).getResult();
}

/// Emits `plan` for `op` and replaces it.
LogicalResult lower(RedistributeOp op, const ::shardx::Plan &plan,
                    ArrayRef<int64_t> meshShape) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  RankedTensorType global = op.getType();
  FlatSymbolRefAttr mesh = op.getSource().getMesh();
  Value current =
      UnrealizedConversionCastOp::create(
          b, loc, getLocalType(global, op.getSource().getLayout(), meshShape),
          op.getInput())
          .getResult(0);
  auto optionalSizes = [&](ArrayRef<int64_t> sizes) -> DenseI64ArrayAttr {
    return sizes.empty() ? DenseI64ArrayAttr() : b.getDenseI64ArrayAttr(sizes);
  };
  // torch.chunk pieces of `dim` of the current local tensor over the group
  // of `axes` when they are not all equal (and the split is not strided).
  auto chunkSizes = [&](const ::shardx::Step &step, int64_t dim,
                        int64_t stride) -> SmallVector<int64_t> {
    if (!step.sizes.empty())
      return SmallVector<int64_t>(step.sizes.begin(), step.sizes.end());
    auto type = cast<RankedTensorType>(current.getType());
    int64_t size = type.getDimSize(dim), n = 1;
    for (int64_t a : step.axes)
      n *= meshShape[a];
    if (stride != 1 || ShapedType::isDynamic(size) || size % n == 0)
      return {};
    SmallVector<int64_t> sizes;
    for (int64_t j = 0; j < n; ++j) {
      ::shardx::Interval piece = ::shardx::chunkInterval(size, n, j);
      sizes.push_back(piece.size);
    }
    return sizes;
  };
  for (const ::shardx::Step &step : plan.steps) {
    RankedTensorType type = getLocalType(global, step.after, meshShape);
    DenseI64ArrayAttr axes = b.getDenseI64ArrayAttr(step.axes);
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    auto reduction = [&] {
      return ReductionKindAttr::get(b.getContext(),
                                    toReductionKind(step.reduce));
    };
    switch (step.kind) {
    case ::shardx::Step::Kind::AllGather:
      current = AllGatherOp::create(
          b, loc, type, current, mesh, axes, i64(step.dim), i64(step.outer),
          optionalSizes(gatherSizes(step.before, global.getShape(), meshShape,
                                    step.axes, step.dim)));
      break;
    case ::shardx::Step::Kind::ReduceScatter:
      current = ReduceScatterOp::create(
          b, loc, type, current, mesh, axes, i64(step.dim), reduction(),
          i64(step.outer),
          optionalSizes(chunkSizes(step, step.dim, step.outer)));
      break;
    case ::shardx::Step::Kind::AllReduce:
      current =
          AllReduceOp::create(b, loc, type, current, mesh, axes, reduction());
      break;
    case ::shardx::Step::Kind::AllToAll:
      current = AllToAllOp::create(
          b, loc, type, current, mesh, axes, i64(step.splitDim), i64(step.dim),
          i64(step.splitOuter), i64(step.outer),
          optionalSizes(chunkSizes(step, step.splitDim, step.splitOuter)));
      break;
    case ::shardx::Step::Kind::Chunk:
      current = ChunkOp::create(
          b, loc, type, current, mesh, axes, i64(step.dim), i64(step.outer),
          optionalSizes(chunkSizes(step, step.dim, step.outer)));
      break;
    case ::shardx::Step::Kind::PartitionValue:
      current = PartitionValueOp::create(b, loc, type, current, mesh, axes,
                                         reduction());
      break;
    case ::shardx::Step::Kind::Rescale: {
      FailureOr<Value> scaled = rescale(b, loc, current, step.scale);
      if (failed(scaled))
        return op.emitError("Cannot reshard: ")
               << op.getSource() << " -> " << op.getTarget()
               << ": turning P(sum) into P(avg) needs float elements";
      current = *scaled;
      break;
    }
    case ::shardx::Step::Kind::Permute: {
      SmallVector<int64_t> pairs;
      for (auto [source, target] : step.pairs)
        pairs.append({source, target});
      current = PermuteOp::create(b, loc, type, current, mesh, axes,
                                  b.getDenseI64ArrayAttr(pairs));
      break;
    }
    }
  }
  Value result =
      UnrealizedConversionCastOp::create(b, loc, global, current).getResult(0);
  op.replaceAllUsesWith(result);
  op.erase();
  return success();
}

struct LowerReshardsPass
    : mlir::shardx::impl::LowerReshardsPassBase<LowerReshardsPass> {
  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    ReshardPlanners planners;
    SmallVector<RedistributeOp> ops;
    getOperation()->walk([&](RedistributeOp op) { ops.push_back(op); });
    for (RedistributeOp op : ops) {
      MeshOp mesh;
      const ::shardx::Plan *plan = planners.getPlan(op, symbolTable, &mesh);
      if (!plan || failed(lower(op, *plan, mesh.getShape())))
        return signalPassFailure();
    }
  }
};

} // namespace
