//===- LowerHalos.cpp - shardx.halo -> neighbour permutes -----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-lower-halos expands each halo exchange into collectives every
// backend already runs: the operand's edge rows are sliced, sent to the
// neighbour with one `shardx.permute` per side (non-cyclic pairs), and
// concatenated around the operand; the members at the ends of the group
// take none of the rows they receive (a permute leaves a member that is no
// target its own tensor). A group of two exchanges both sides with one
// permute (each member has one neighbour): max(low, high) rows each way.
// Propagation prices exactly these steps (addHalos, OpShardingSpace.cpp).
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "LayoutUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"


namespace mlir::shardx {
#define GEN_PASS_DEF_LOWERHALOSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// The halo of one side: `width` rows of `in` along `dim` starting at
/// `offset` (index), sent by each member to its neighbour at `step` (+1 or
/// -1) in the group; the receiving member keeps them unless it is the edge
/// member `edge` (0 or n - 1), which keeps none.
static Value receiveSide(OpBuilder &b, Location loc, HaloOp op, Value in,
                         Value offset, int64_t width, int64_t n, int64_t step,
                         Value index, int64_t edge) {
  auto type = cast<RankedTensorType>(in.getType());
  int64_t dim = op.getDim();
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes, strides(type.getRank(), b.getIndexAttr(1));
  for (int64_t d = 0; d < type.getRank(); ++d)
    sizes.push_back(tensor::getMixedSize(b, loc, in, d));
  offsets[dim] = offset;
  sizes[dim] = b.getIndexAttr(width);
  Value edgeRows = tensor::ExtractSliceOp::create(b, loc, in, offsets, sizes,
                                                  strides);
  SmallVector<int64_t> pairs;
  for (int64_t j = 0; j + 1 < n; ++j)
    if (step > 0)
      pairs.append({j, j + 1});
    else
      pairs.append({j + 1, j});
  Value received = PermuteOp::create(b, loc, edgeRows.getType(), edgeRows,
                                     op.getMeshAttr(), op.getAxesAttr(),
                                     b.getDenseI64ArrayAttr(pairs));
  Value keep = selectAtMember(b, loc, index, edge, 0, width);
  offsets[dim] = b.getIndexAttr(0);
  sizes[dim] = keep;
  return tensor::ExtractSliceOp::create(b, loc, received, offsets, sizes,
                                        strides);
}

/// Both sides of a halo in a group of two, one permute of `width` =
/// max(low, high) rows each way: member 0 sends its last `width` rows to
/// member 1 and keeps the first `high` it receives; member 1 sends its first
/// `width` rows and keeps the last `low` (shards are at least `width` rows:
/// the verifier's bound). Returns the (low, high) pieces.
static std::pair<Value, Value>
receiveBothOfTwo(OpBuilder &b, Location loc, HaloOp op, Value in, Value index) {
  auto type = cast<RankedTensorType>(in.getType());
  int64_t dim = op.getDim(), low = op.getLow(), high = op.getHigh();
  int64_t width = std::max(low, high);
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes, strides(type.getRank(), b.getIndexAttr(1));
  for (int64_t d = 0; d < type.getRank(); ++d)
    sizes.push_back(tensor::getMixedSize(b, loc, in, d));
  Value size = tensor::DimOp::create(b, loc, in, dim);
  Value tail = arith::SubIOp::create(
      b, loc, size, arith::ConstantIndexOp::create(b, loc, width));
  Value first =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, index,
                            arith::ConstantIndexOp::create(b, loc, 0));
  offsets[dim] =
      arith::SelectOp::create(b, loc, first, tail,
                              arith::ConstantIndexOp::create(b, loc, 0))
          .getResult();
  sizes[dim] = b.getIndexAttr(width);
  Value edgeRows =
      tensor::ExtractSliceOp::create(b, loc, in, offsets, sizes, strides);
  Value received =
      PermuteOp::create(b, loc, edgeRows.getType(), edgeRows, op.getMeshAttr(),
                        op.getAxesAttr(), b.getDenseI64ArrayAttr({0, 1, 1, 0}));
  auto piece = [&](int64_t offset, Value keep) {
    offsets[dim] = b.getIndexAttr(offset);
    sizes[dim] = keep;
    return tensor::ExtractSliceOp::create(b, loc, received, offsets, sizes,
                                          strides)
        .getResult();
  };
  Value lowPiece = piece(width - low, selectAtMember(b, loc, index, 0, 0, low));
  Value highPiece = piece(0, selectAtMember(b, loc, index, 1, 0, high));
  return {lowPiece, highPiece};
}

/// Replaces `op` with its expansion; fails when its mesh is unknown.
static LogicalResult lowerHalo(HaloOp op, RewriterBase &rewriter) {
  FailureOr<int64_t> n =
      cast<CollectiveOpInterface>(op.getOperation()).getGroupSize();
  if (failed(n))
    return failure();
  Location loc = op.getLoc();
  Value in = op.getInput();
  RankedTensorType resultType = op.getResult().getType();
  int64_t dim = op.getDim(), low = op.getLow(), high = op.getHigh();
  if (*n == 1 || (low == 0 && high == 0)) {
    rewriter.replaceOpWithNewOp<tensor::CastOp>(op, resultType, in);
    return success();
  }
  Value index = AxisIndexOp::create(rewriter, loc, rewriter.getIndexType(),
                                    op.getMeshAttr(), op.getAxesAttr());
  SmallVector<Value> pieces;
  if (*n == 2 && low > 0 && high > 0) {
    auto [lowPiece, highPiece] = receiveBothOfTwo(rewriter, loc, op, in, index);
    pieces = {lowPiece, in, highPiece};
  } else {
    if (low > 0) {
      Value size = tensor::DimOp::create(rewriter, loc, in, dim);
      Value offset = arith::SubIOp::create(
          rewriter, loc, size,
          arith::ConstantIndexOp::create(rewriter, loc, low));
      pieces.push_back(
          receiveSide(rewriter, loc, op, in, offset, low, *n, +1, index, 0));
    }
    pieces.push_back(in);
    if (high > 0)
      pieces.push_back(
          receiveSide(rewriter, loc, op, in,
                      arith::ConstantIndexOp::create(rewriter, loc, 0), high,
                      *n, -1, index, *n - 1));
  }
  Value joined = tensor::ConcatOp::create(rewriter, loc, dim, pieces);
  if (joined.getType() == resultType)
    rewriter.replaceOp(op, joined);
  else
    rewriter.replaceOpWithNewOp<tensor::CastOp>(op, resultType, joined);
  return success();
}

struct LowerHalosPass : mlir::shardx::impl::LowerHalosPassBase<LowerHalosPass> {
  void runOnOperation() override {
    // One rewrite per halo, no folding.
    SmallVector<HaloOp> halos;
    getOperation().walk([&](HaloOp op) { halos.push_back(op); });
    IRRewriter rewriter(&getContext());
    for (HaloOp op : halos) {
      rewriter.setInsertionPoint(op);
      if (failed(lowerHalo(op, rewriter))) {
        op.emitError("cannot lower the halo: unknown mesh");
        return signalPassFailure();
      }
    }
  }
};

} // namespace
