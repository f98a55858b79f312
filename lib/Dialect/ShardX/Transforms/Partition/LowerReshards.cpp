//===- LowerReshards.cpp - Replace reshards with their plans --------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_LOWERRESHARDSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Multiplies the local terms by `scale` (P(sum) <-> P(avg)): one
/// elementwise linalg.generic in place on the local tensor, so no op needs
/// the (possibly dynamic) local sizes.
FailureOr<Value> rescale(OpBuilder &b, Location loc, Value value,
                         double scale) {
  auto type = cast<RankedTensorType>(value.getType());
  auto floatType = dyn_cast<FloatType>(type.getElementType());
  if (!floatType)
    return failure();
  Value factor = arith::ConstantOp::create(b, loc, floatType,
                                           b.getFloatAttr(floatType, scale));
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{type}, ValueRange{value}, ValueRange{value},
      ArrayRef<AffineMap>{id, id}, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value scaled = arith::MulFOp::create(nb, nloc, args[0], factor);
        linalg::YieldOp::create(nb, nloc, scaled);
      });
  return generic.getResult(0);
}

/// The piece of each group member when the chunk `step` (R -> S, no
/// communication) keeps one contiguous run of the operand's dim whose size
/// differs between members: member `j` keeps the `j`-th run of the result.
/// Nullopt where the step is not such a chunk (a strided chunk, an operand
/// dim that differs between ranks, pieces that depend on other axes); an
/// exchange does it.
std::optional<SmallVector<int64_t>>
unevenChunkSizes(const Step &step, RankedTensorType global,
                 RankedTensorType operand, ArrayRef<int64_t> meshShapeRef) {
  if (step.kind != Step::Kind::Chunk || step.outer != 1 ||
      operand.isDynamicDim(step.dim))
    return std::nullopt;
  std::vector<int64_t> meshShape(meshShapeRef.begin(), meshShapeRef.end());
  std::vector<int64_t> shape(global.getShape().begin(),
                             global.getShape().end());
  int64_t n = 1;
  for (int64_t a : step.axes)
    n *= meshShape[a];
  int64_t dim = step.dim;
  SmallVector<int64_t> sizes(n, -1), offsets(n, -1);
  for (const std::vector<int64_t> &c : allMeshCoords(meshShape)) {
    LocalShard before = step.before.getLocalShard(meshShape, shape, c);
    LocalShard after = step.after.getLocalShard(meshShape, shape, c);
    if (before.runs[dim].size() != 1 || after.runs[dim].size() != 1 ||
        before.shape[dim] != operand.getDimSize(dim))
      return std::nullopt;
    int64_t j = linearizeCoords(meshShape, step.axes, c);
    int64_t size = after.runs[dim][0].size;
    int64_t offset = after.runs[dim][0].offset - before.runs[dim][0].offset;
    if ((sizes[j] >= 0 && sizes[j] != size) ||
        (offsets[j] >= 0 && offsets[j] != offset))
      return std::nullopt;
    sizes[j] = size;
    offsets[j] = offset;
  }
  int64_t next = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (offsets[j] != next)
      return std::nullopt;
    next += sizes[j];
  }
  if (next != operand.getDimSize(dim))
    return std::nullopt;
  return sizes;
}

/// Emits `plan` for `op` and replaces it.
LogicalResult lower(RedistributeOp op, const Plan &plan,
                    ArrayRef<int64_t> meshShape) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  RankedTensorType global = op.getType();
  FlatSymbolRefAttr mesh = op.getSource().getMesh();
  Value current =
      UnrealizedConversionCastOp::create(
          b, loc, op.getSource().getLocalType(global, meshShape),
          op.getInput())
          .getResult(0);
  for (const Step &step : plan.steps) {
    RankedTensorType type = getLocalType(global, step.after, meshShape);
    DenseI64ArrayAttr axes = b.getDenseI64ArrayAttr(step.axes);
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    auto reduction = [&] {
      return ReductionKindAttr::get(b.getContext(),
                                    toReductionKind(step.reduce));
    };
    // Where ranks hold shards of different sizes before or after a step that
    // moves data, the layouts say who holds what: one general exchange.
    // A chunk that keeps one run per member stays local: shardx.chunk with
    // the members' sizes.
    auto operand = cast<RankedTensorType>(current.getType());
    bool movesData = step.kind != Step::Kind::AllReduce &&
                     step.kind != Step::Kind::PartitionValue &&
                     step.kind != Step::Kind::Rescale;
    if (movesData && (!type.hasStaticShape() || !operand.hasStaticShape())) {
      if (std::optional<SmallVector<int64_t>> sizes =
              unevenChunkSizes(step, global, operand, meshShape)) {
        current =
            ChunkOp::create(b, loc, type, current, mesh, axes, i64(step.dim),
                            i64(1), b.getDenseI64ArrayAttr(*sizes));
        continue;
      }
      current = ExchangeOp::create(
          b, loc, type, current, mesh, axes,
          LayoutAttr::get(mesh, step.before), LayoutAttr::get(mesh, step.after),
          b.getDenseI64ArrayAttr(global.getShape()));
      continue;
    }
    switch (step.kind) {
    case Step::Kind::AllGather:
      current =
          AllGatherOp::create(b, loc, type, current, mesh, axes, i64(step.dim),
                              i64(step.outer), DenseI64ArrayAttr());
      break;
    case Step::Kind::ReduceScatter:
      current = ReduceScatterOp::create(b, loc, type, current, mesh, axes,
                                        i64(step.dim), reduction(),
                                        i64(step.outer), DenseI64ArrayAttr());
      break;
    case Step::Kind::AllReduce:
      current =
          AllReduceOp::create(b, loc, type, current, mesh, axes, reduction());
      break;
    case Step::Kind::AllToAll:
      current = AllToAllOp::create(
          b, loc, type, current, mesh, axes, i64(step.splitDim), i64(step.dim),
          i64(step.splitOuter), i64(step.outer), DenseI64ArrayAttr());
      break;
    case Step::Kind::Chunk:
      current =
          ChunkOp::create(b, loc, type, current, mesh, axes, i64(step.dim),
                          i64(step.outer), DenseI64ArrayAttr());
      break;
    case Step::Kind::PartitionValue:
      current = PartitionValueOp::create(b, loc, type, current, mesh, axes,
                                         reduction());
      break;
    case Step::Kind::Rescale: {
      FailureOr<Value> scaled = rescale(b, loc, current, step.scale);
      if (failed(scaled))
        return op.emitError("Cannot reshard: ")
               << op.getSource() << " -> " << op.getTarget()
               << ": turning P(sum) into P(avg) needs float elements";
      current = *scaled;
      break;
    }
    case Step::Kind::Permute: {
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
    // Nothing to lower: the IR is unchanged (and the pass manager skips
    // the verifier after this pass under --verify-each).
    if (ops.empty())
      return markAllAnalysesPreserved();
    for (RedistributeOp op : ops) {
      MeshOp mesh;
      const Plan *plan = planners.getPlan(op, symbolTable, &mesh);
      if (!plan || failed(lower(op, *plan, mesh.getShape())))
        return signalPassFailure();
    }
  }
};

} // namespace
