//===- DecomposeForCodegen.cpp - Ops without a code generation path -------===//
//
// Part of ShardX.
//
// The dialects a ShardX program may use have ops that one-shot
// bufferization or the lowering to LLVM has no path for: `tensor.gather`,
// `tensor.scatter` and `tensor.bitcast` have no bufferization model,
// `linalg.pack` / `linalg.unpack` none either, and `linalg.softmax` reaches
// the LLVM translation whole. The verifier accepts them and the planner
// replicates them (no sharding rule), so before this pass such a program
// failed in code generation ("op was not bufferized"). Each one becomes
// ops that compile, before the fusion and bufferization passes:
//
//   %r = tensor.gather %src[%idx] gather_dims([0]) :
//          (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x1x4xf32>
// becomes
//   %r = linalg.generic outs(tensor.empty() : tensor<3x1x4xf32>) {
//     %i = index_cast %idx[linalg.index 0, 0]
//     %ok = 0 <= %i < 8
//     %x = tensor.extract %src[select(%ok, %i, 0), linalg.index 2]
//     linalg.yield select(%ok, %x, 0.0) }
//
// An index outside the source (undefined behaviour for the op) reads 0, and
// a scatter coordinate outside the destination writes nothing: the code
// never touches memory outside a buffer, whatever the indices.
//
//===----------------------------------------------------------------------===//

#include "DecomposeAttention.h"

#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_DECOMPOSEFORCODEGENPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

/// Coordinate `d` of the index tuple at `batch` in `indices` (its last dim
/// holds the tuple) as an index, with whether it lies in [0, size) and the
/// coordinate itself where it does, 0 where not.
struct Coordinate {
  Value inRange;
  Value clamped;
};

Coordinate readCoordinate(OpBuilder &b, Location loc, Value indices,
                          ValueRange batch, int64_t d, int64_t size) {
  SmallVector<Value> at(batch);
  at.push_back(arith::ConstantIndexOp::create(b, loc, d));
  Value raw = tensor::ExtractOp::create(b, loc, indices, at);
  Value i = raw;
  if (!raw.getType().isIndex())
    i = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value bound = arith::ConstantIndexOp::create(b, loc, size);
  Value low = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, i, zero);
  Value high =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, bound);
  Value ok = arith::AndIOp::create(b, loc, low, high);
  return {ok, arith::SelectOp::create(b, loc, ok, i, zero)};
}

Value allOf(OpBuilder &b, Location loc, ArrayRef<Value> conditions) {
  Value all = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
  for (Value c : conditions)
    all = arith::AndIOp::create(b, loc, all, c);
  return all;
}

LogicalResult lowerGather(RewriterBase &rewriter, tensor::GatherOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType result = op.getResultType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  bool rankReduced = result.getRank() != batchRank + source.getRank();
  ArrayRef<int64_t> gatherDims = op.getGatherDims();
  Location loc = op.getLoc();
  Value init = tensor::EmptyOp::create(rewriter, loc, result.getShape(),
                                       result.getElementType());
  SmallVector<AffineMap> maps{
      rewriter.getMultiDimIdentityMap(result.getRank())};
  SmallVector<utils::IteratorType> iterators(result.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, result, ValueRange{}, ValueRange{init}, maps, iterators,
      [&](OpBuilder &b, Location loc, ValueRange) {
        SmallVector<Value> at;
        for (int64_t i = 0, e = result.getRank(); i < e; ++i)
          at.push_back(linalg::IndexOp::create(b, loc, i));
        ValueRange batch = ValueRange(at).take_front(batchRank);
        SmallVector<Value> coords, inRange;
        int64_t trailing = batchRank;
        for (int64_t d = 0, e = source.getRank(); d < e; ++d) {
          const auto *it = llvm::find(gatherDims, d);
          if (it == gatherDims.end()) {
            coords.push_back(at[trailing++]);
            continue;
          }
          Coordinate c =
              readCoordinate(b, loc, op.getIndices(), batch,
                             it - gatherDims.begin(), source.getDimSize(d));
          coords.push_back(c.clamped);
          inRange.push_back(c.inRange);
          if (!rankReduced)
            ++trailing;
        }
        Value x = tensor::ExtractOp::create(b, loc, op.getSource(), coords);
        Value zero = arith::ConstantOp::create(
            b, loc, b.getZeroAttr(result.getElementType()));
        Value y =
            arith::SelectOp::create(b, loc, allOf(b, loc, inRange), x, zero);
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

LogicalResult lowerScatter(RewriterBase &rewriter, tensor::ScatterOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType dest = op.getDestType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  ArrayRef<int64_t> scatterDims = op.getScatterDims();
  Location loc = op.getLoc();
  // One slice of the source per index tuple: its trailing dims.
  auto sliceType = RankedTensorType::get(
      source.getShape().drop_front(batchRank), source.getElementType());
  auto insert = [&](OpBuilder &b, Location loc, ValueRange batch,
                    Value into) -> Value {
    SmallVector<OpFoldResult> offsets(batch.begin(), batch.end());
    SmallVector<OpFoldResult> sizes(batchRank, b.getIndexAttr(1));
    for (int64_t s : sliceType.getShape()) {
      offsets.push_back(b.getIndexAttr(0));
      sizes.push_back(b.getIndexAttr(s));
    }
    SmallVector<OpFoldResult> strides(source.getRank(), b.getIndexAttr(1));
    Value slice = tensor::ExtractSliceOp::create(
        b, loc, sliceType, op.getSource(), offsets, sizes, strides);
    SmallVector<OpFoldResult> at, extent;
    SmallVector<Value> inRange;
    for (int64_t d = 0, e = dest.getRank(); d < e; ++d) {
      const auto *it = llvm::find(scatterDims, d);
      if (it == scatterDims.end()) {
        at.push_back(b.getIndexAttr(0));
        extent.push_back(b.getIndexAttr(dest.getDimSize(d)));
        continue;
      }
      Coordinate c =
          readCoordinate(b, loc, op.getIndices(), batch,
                         it - scatterDims.begin(), dest.getDimSize(d));
      at.push_back(c.clamped);
      extent.push_back(b.getIndexAttr(1));
      inRange.push_back(c.inRange);
    }
    SmallVector<OpFoldResult> ones(dest.getRank(), b.getIndexAttr(1));
    auto guarded = scf::IfOp::create(
        b, loc, allOf(b, loc, inRange),
        [&](OpBuilder &b, Location loc) {
          Value written = tensor::InsertSliceOp::create(b, loc, slice, into, at,
                                                        extent, ones);
          scf::YieldOp::create(b, loc, written);
        },
        [&](OpBuilder &b, Location loc) {
          scf::YieldOp::create(b, loc, into);
        });
    return guarded.getResult(0);
  };
  Value written;
  if (batchRank == 0) {
    written = insert(rewriter, loc, ValueRange{}, op.getDest());
  } else {
    SmallVector<Value> lbs, ubs, steps;
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    for (int64_t s : indicesType.getShape().drop_back()) {
      lbs.push_back(zero);
      ubs.push_back(arith::ConstantIndexOp::create(rewriter, loc, s));
      steps.push_back(one);
    }
    scf::LoopNest nest = scf::buildLoopNest(
        rewriter, loc, lbs, ubs, steps, ValueRange{op.getDest()},
        [&](OpBuilder &b, Location loc, ValueRange ivs,
            ValueRange args) -> scf::ValueVector {
          return {insert(b, loc, ivs, args.front())};
        });
    written = nest.results.front();
  }
  rewriter.replaceOp(op, written);
  return success();
}

/// `tensor.scatter` as a `linalg.generic` over the destination (parallel)
/// and the indices' batch dims (reduction): each element takes the source
/// element whose coordinates match it, or keeps its value. The op's
/// `unique` makes at most one match; a coordinate out of range matches
/// nothing.
LogicalResult lowerScatterMasked(RewriterBase &rewriter, tensor::ScatterOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType dest = op.getDestType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  int64_t destRank = dest.getRank();
  bool rankReduced = source.getRank() != batchRank + destRank;
  ArrayRef<int64_t> scatterDims = op.getScatterDims();
  Location loc = op.getLoc();
  MLIRContext *context = op.getContext();
  int64_t loops = destRank + batchRank;
  AffineMap toDest = AffineMap::getMultiDimIdentityMap(loops, context)
                         .getMajorSubMap(destRank);
  // The source element of an (element, batch) point: the batch coords,
  // then the element's coords but the scattered dims (0 where kept).
  SmallVector<AffineExpr> fromSource;
  for (int64_t i = 0; i < batchRank; ++i)
    fromSource.push_back(getAffineDimExpr(destRank + i, context));
  for (int64_t d = 0; d < destRank; ++d) {
    if (!llvm::is_contained(scatterDims, d))
      fromSource.push_back(getAffineDimExpr(d, context));
    else if (!rankReduced)
      fromSource.push_back(getAffineConstantExpr(0, context));
  }
  AffineMap toSource = AffineMap::get(loops, 0, fromSource, context);
  SmallVector<utils::IteratorType> iterators(destRank,
                                             utils::IteratorType::parallel);
  iterators.append(batchRank, utils::IteratorType::reduction);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, dest, ValueRange{op.getSource()}, ValueRange{op.getDest()},
      SmallVector<AffineMap>{toSource, toDest}, iterators,
      [&](OpBuilder &b, Location loc, ValueRange args) {
        SmallVector<Value> at;
        for (int64_t i = 0; i < loops; ++i)
          at.push_back(linalg::IndexOp::create(b, loc, i));
        ValueRange element = ValueRange(at).take_front(destRank);
        ValueRange batch = ValueRange(at).drop_front(destRank);
        SmallVector<Value> hits;
        for (auto [j, d] : llvm::enumerate(scatterDims)) {
          Coordinate c = readCoordinate(b, loc, op.getIndices(), batch, j,
                                        dest.getDimSize(d));
          hits.push_back(arith::AndIOp::create(
              b, loc, c.inRange,
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, c.clamped,
                                    element[d])));
        }
        Value y = arith::SelectOp::create(b, loc, allOf(b, loc, hits), args[0],
                                          args[1]);
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

LogicalResult lowerBitcast(RewriterBase &rewriter, tensor::BitcastOp op) {
  auto from = cast<RankedTensorType>(op.getSource().getType());
  auto to = cast<RankedTensorType>(op.getType());
  Location loc = op.getLoc();
  Value init = tensor::EmptyOp::create(rewriter, loc, to.getShape(),
                                       to.getElementType());
  AffineMap identity = rewriter.getMultiDimIdentityMap(from.getRank());
  SmallVector<utils::IteratorType> iterators(from.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, to, ValueRange{op.getSource()}, ValueRange{init},
      SmallVector<AffineMap>{identity, identity}, iterators,
      [&](OpBuilder &b, Location loc, ValueRange args) {
        Value y =
            arith::BitcastOp::create(b, loc, to.getElementType(), args.front());
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

LogicalResult decompose(RewriterBase &rewriter, Operation *op,
                        bool scatterLoops, int64_t attentionBlockBytes) {
  // The attention ops take the sizes of their tensors' dims, dynamic ones
  // included (a rank's piece of an uneven split).
  if (mlir::shardx::isShardXComputation(op))
    return mlir::shardx::decomposeAttention(rewriter, op,
                                            attentionBlockBytes);
  // The rewrites build static shapes (entry points have them, and so, after
  // the SPMD pipeline, does every value of a program).
  auto dynamic = [](Type t) {
    auto tensor = dyn_cast<TensorType>(t);
    return tensor && !tensor.hasStaticShape();
  };
  if (llvm::any_of(op->getOperandTypes(), dynamic) ||
      llvm::any_of(op->getResultTypes(), dynamic))
    return op->emitOpError("with a dynamic shape is not supported by code "
                           "generation");
  rewriter.setInsertionPoint(op);
  if (auto gather = dyn_cast<tensor::GatherOp>(op))
    return lowerGather(rewriter, gather);
  if (auto scatter = dyn_cast<tensor::ScatterOp>(op))
    return scatterLoops ? lowerScatter(rewriter, scatter)
                        : lowerScatterMasked(rewriter, scatter);
  if (auto bitcast = dyn_cast<tensor::BitcastOp>(op))
    return lowerBitcast(rewriter, bitcast);
  if (auto pack = dyn_cast<linalg::PackOp>(op)) {
    if (failed(linalg::lowerPack(rewriter, pack)))
      return op->emitOpError("could not be lowered for code generation");
    return success();
  }
  if (auto unpack = dyn_cast<linalg::UnPackOp>(op)) {
    if (failed(linalg::lowerUnPack(rewriter, unpack)))
      return op->emitOpError("could not be lowered for code generation");
    return success();
  }
  if (auto aggregated = dyn_cast<linalg::AggregatedOpInterface>(op)) {
    FailureOr<SmallVector<Value>> values =
        aggregated.decomposeOperation(rewriter);
    if (failed(values))
      return op->emitOpError("could not be decomposed for code generation");
    rewriter.replaceOp(op, *values);
    return success();
  }
  return success();
}

struct DecomposeForCodegenPass
    : mlir::shardx::impl::DecomposeForCodegenPassBase<DecomposeForCodegenPass> {
  using DecomposeForCodegenPassBase::DecomposeForCodegenPassBase;

  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isa<tensor::GatherOp, tensor::ScatterOp, tensor::BitcastOp,
              linalg::PackOp, linalg::UnPackOp, linalg::AggregatedOpInterface>(
              op) ||
          mlir::shardx::isShardXComputation(op))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    // A decomposition's ops are ones code generation handles, so one pass
    // over the program's ops is enough. The two backward ops of one
    // attention are written together, at the first (DecomposeAttention.h).
    llvm::DenseSet<Operation *> done;
    for (Operation *op : ops) {
      if (done.contains(op))
        continue;
      Operation *partner = mlir::shardx::findAttentionPartner(op);
      if (partner) {
        if (partner->isBeforeInBlock(op))
          std::swap(op, partner);
        done.insert(partner);
        if (failed(mlir::shardx::decomposeAttention(rewriter, op,
                                                    attentionBlockBytes,
                                                    partner)))
          return signalPassFailure();
        continue;
      }
      if (failed(decompose(rewriter, op, scatterLoops, attentionBlockBytes)))
        return signalPassFailure();
    }
  }
};

} // namespace
