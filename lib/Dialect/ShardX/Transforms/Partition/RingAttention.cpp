//===- RingAttention.cpp - Context-parallel attention as a ring -----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-ring-attention: on the local program, an attention whose keys and
// values are all-gathered along their sequence runs as ring attention
// instead. Each rank starts from its own block of keys and values, passes
// it to the next member of the group with `shardx.permute` n - 1 times and
// computes the attention of its queries over each block it holds, combining
// the blocks' outputs by their log-sum-exp (flash attention's online
// softmax); the gathered keys and values are never built.
//
// The ops between a gather and the attention's operand (a repeat of the
// key/value heads, a transpose to [B, H, S, D]) act on each position alone:
// they are applied to each block (`Chain`). The backward ops take the same
// blocks in a second ring: `attention_dq` sums its blocks' terms (given the
// rows' out and lse, dq is a sum over key blocks), and `attention_dkv`'s
// block gradients, brought through the ops between it and the
// reduce-scatter that the gather's backward is, are summed into
// accumulators that travel with the blocks and reach their owners after
// one more permute.
//
// Bytes: each rank sends n - 1 blocks of K and V per ring, as the gather
// does, and n blocks of dK and dV, one more than the reduce-scatter. The
// ring holds two blocks of K and V at a time where the gather holds n.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_RINGATTENTIONPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// One op of a chain between a collective and an attention operand, with
/// the operand that carries the chain and the sequence dim at its operand
/// and at its result.
struct Link {
  Operation *op;
  unsigned operand;
  int64_t operandDim, resultDim;
};

/// Where `dim` of `op`'s result comes from in operand `operand`, for the
/// ops that act on each position of that dim alone: linalg ops on which
/// the dim is a parallel loop read by the operand's map as that loop
/// alone, and reshapes that keep the dim a group of its own. -1 otherwise.
int64_t operandDimOf(Operation *op, unsigned operand, int64_t dim) {
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op)) {
    ReassociationIndices group = collapse.getReassociationIndices()[dim];
    return group.size() == 1 ? group[0] : -1;
  }
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op)) {
    for (auto [i, group] : llvm::enumerate(expand.getReassociationIndices()))
      if (llvm::is_contained(group, dim))
        return group.size() == 1 ? static_cast<int64_t>(i) : -1;
    return -1;
  }
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || !linalgOp.hasPureTensorSemantics() ||
      linalgOp->getNumResults() != 1 || linalgOp.getNumDpsInits() != 1)
    return -1;
  AffineMap resultMap = linalgOp.getIndexingMapMatchingResult(
      cast<OpResult>(linalgOp->getResult(0)));
  auto loop = dyn_cast<AffineDimExpr>(resultMap.getResult(dim));
  if (!loop || linalgOp.getIteratorTypesArray()[loop.getPosition()] !=
                   utils::IteratorType::parallel)
    return -1;
  AffineMap map = linalgOp.getMatchingIndexingMap(&op->getOpOperand(operand));
  for (auto [i, expr] : llvm::enumerate(map.getResults()))
    if (auto d = dyn_cast<AffineDimExpr>(expr);
        d && d.getPosition() == loop.getPosition())
      return i;
  return -1;
}

/// Where operand `operand`'s `dim` goes in `op`'s result (the inverse of
/// `operandDimOf`), or -1.
int64_t resultDimOf(Operation *op, unsigned operand, int64_t dim) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (operandDimOf(op, operand, d) == dim)
      return d;
  return -1;
}

/// The ops from an all-gather along the sequence to `value` (whose
/// sequence dim is `dim`), last op first; fails where an op of the path
/// acts across positions or the gather is not an even one.
FailureOr<std::pair<AllGatherOp, SmallVector<Link>>>
findGatherChain(Value value, int64_t dim) {
  SmallVector<Link> chain;
  while (true) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return failure();
    if (auto gather = dyn_cast<AllGatherOp>(op)) {
      if (static_cast<int64_t>(gather.getDim()) != dim || gather.getStride() != 1 ||
          gather.getSizes() || !gather.getInput().getType().hasStaticShape() ||
          !gather.getType().hasStaticShape())
        return failure();
      return std::make_pair(gather, chain);
    }
    if (op->getNumResults() != 1)
      return failure();
    // The operand that carries the chain: the one whose producer chain
    // reaches a gather (the first that does).
    bool found = false;
    for (OpOperand &use : op->getOpOperands()) {
      auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
      if (linalgOp && linalgOp.isDpsInit(&use))
        continue;
      int64_t at = operandDimOf(op, use.getOperandNumber(), dim);
      if (at < 0)
        continue;
      if (failed(findGatherChain(use.get(), at)))
        continue;
      chain.push_back({op, use.getOperandNumber(), at, dim});
      value = use.get();
      dim = at;
      found = true;
      break;
    }
    if (!found)
      return failure();
  }
}

/// The ops from `value` (sequence dim `dim`) to the reduce-scatter along
/// the sequence that is its only reader's path, first op first.
FailureOr<std::pair<ReduceScatterOp, SmallVector<Link>>>
findScatterChain(Value value, int64_t dim) {
  SmallVector<Link> chain;
  while (true) {
    if (!value.hasOneUse())
      return failure();
    OpOperand &use = *value.getUses().begin();
    Operation *op = use.getOwner();
    if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
      if (static_cast<int64_t>(scatter.getDim()) != dim ||
          scatter.getStride() != 1 ||
          scatter.getSizes() || scatter.getReduction() != ReductionKind::Sum ||
          !scatter.getType().hasStaticShape())
        return failure();
      return std::make_pair(scatter, chain);
    }
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if ((linalgOp && linalgOp.isDpsInit(&use)) || op->getNumResults() != 1)
      return failure();
    int64_t at = resultDimOf(op, use.getOperandNumber(), dim);
    if (at < 0)
      return failure();
    chain.push_back({op, use.getOperandNumber(), dim, at});
    value = op->getResult(0);
    dim = at;
  }
}

/// `value`'s type with dim `dim` of size `size`.
RankedTensorType withDim(Value value, int64_t dim, int64_t size) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return type.clone(shape);
}

/// The slice [offset, offset + size) of `value` along `dim`.
Value sliceAlong(OpBuilder &b, Location loc, Value value, int64_t dim,
                 Value offset, int64_t size) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes, strides(type.getRank(), b.getIndexAttr(1));
  for (int64_t d = 0; d < type.getRank(); ++d)
    sizes.push_back(b.getIndexAttr(d == dim ? size : type.getDimSize(d)));
  offsets[dim] = offset;
  return tensor::ExtractSliceOp::create(b, loc, withDim(value, dim, size),
                                        value, offsets, sizes, strides);
}

/// `link`'s op applied to `block` (its chain operand's block of `size`
/// positions starting at `offset`): its other operands sliced alike, its
/// init made again (an empty tensor, or a fill of one) or sliced.
Value applyToBlock(OpBuilder &b, Location loc, const Link &link, Value block,
                   Value offset, int64_t size) {
  Operation *op = link.op;
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return tensor::CollapseShapeOp::create(
        b, loc, block, collapse.getReassociationIndices());
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return tensor::ExpandShapeOp::create(
        b, loc, withDim(expand.getResult(), link.resultDim, size), block,
        expand.getReassociationIndices());
  auto linalgOp = cast<linalg::LinalgOp>(op);
  IRMapping map;
  for (OpOperand &use : op->getOpOperands()) {
    if (use.getOperandNumber() == link.operand) {
      map.map(use.get(), block);
      continue;
    }
    // The other operands: sliced where they read the sequence's loop.
    AffineMap resultMap = linalgOp.getIndexingMapMatchingResult(
        cast<OpResult>(op->getResult(0)));
    unsigned loop =
        cast<AffineDimExpr>(resultMap.getResult(link.resultDim)).getPosition();
    AffineMap useMap = linalgOp.getMatchingIndexingMap(&use);
    std::optional<unsigned> at = useMap.getResultPosition(b.getAffineDimExpr(loop));
    if (!at)
      continue;
    Value whole = use.get();
    if (linalgOp.isDpsInit(&use)) {
      RankedTensorType type = withDim(whole, *at, size);
      Value empty = tensor::EmptyOp::create(b, loc, type.getShape(),
                                            type.getElementType());
      if (auto fill = whole.getDefiningOp<linalg::FillOp>()) {
        map.map(whole, linalg::FillOp::create(b, loc, fill.value(), empty)
                           .getResult(0));
        continue;
      }
      if (whole.getDefiningOp<tensor::EmptyOp>()) {
        map.map(whole, empty);
        continue;
      }
    }
    map.map(whole, sliceAlong(b, loc, whole, *at, offset, size));
  }
  Operation *clone = b.clone(*op, map);
  clone->getResult(0).setType(
      cast<linalg::LinalgOp>(clone).getDpsInits()[0].getType());
  return clone->getResult(0);
}

/// A gather's chain, applied to blocks: the keys' or values' path from
/// their gather to the attention operand.
struct Chain {
  AllGatherOp gather;
  SmallVector<Link> links; // last op first
  int64_t block;           // positions per rank
  int64_t ranks;

  Value apply(OpBuilder &b, Location loc, Value blockValue,
              Value offset) const {
    for (const Link &link : llvm::reverse(links))
      blockValue = applyToBlock(b, loc, link, blockValue, offset, block);
    return blockValue;
  }
};

FailureOr<Chain> findChain(Value operand) {
  // The attention operands' sequence dim is 2 ([B, H, S, D]).
  auto found = findGatherChain(operand, 2);
  if (failed(found))
    return failure();
  Chain chain;
  chain.gather = found->first;
  chain.links = std::move(found->second);
  int64_t dim = chain.gather.getDim();
  chain.block = chain.gather.getInput().getType().getDimSize(dim);
  chain.ranks = chain.gather.getType().getDimSize(dim) / chain.block;
  if (chain.ranks < 2)
    return failure();
  return chain;
}

int64_t bytesOf(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() *
         llvm::divideCeil(type.getElementTypeBitWidth(), 8);
}

/// An elementwise linalg.generic over `shape`-shaped `inputs` (each read
/// through `maps`, the result through the identity), its body `body`.
Value elementwise(OpBuilder &b, Location loc, RankedTensorType type,
                  ValueRange inputs, ArrayRef<AffineMap> maps,
                  function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  SmallVector<AffineMap> all(maps);
  all.push_back(b.getMultiDimIdentityMap(type.getRank()));
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, type, inputs, init, all, iterators,
             [&](OpBuilder &nb, Location nl, ValueRange args) {
               linalg::YieldOp::create(nb, nl, body(nb, nl, args));
             })
      .getResult(0);
}

Value add(OpBuilder &b, Location loc, Value x, Value y) {
  auto type = cast<RankedTensorType>(x.getType());
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  return elementwise(b, loc, type, {x, y}, {id, id},
                     [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                       return arith::AddFOp::create(nb, nl, a[0], a[1]);
                     });
}

/// `w * x`, 0 where `w` is 0 (a block no query of the row sees has
/// out 0 and weight 0; an infinite or NaN `x` never meets a zero weight).
Value weighted(OpBuilder &b, Location loc, Value w, Value x) {
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(x.getType()));
  Value isZero =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, w, zero);
  return arith::SelectOp::create(b, loc, isZero, zero,
                                 arith::MulFOp::create(b, loc, w, x));
}

/// The online softmax's combine of (out, lse) with a block's (o, l):
/// lse' = log(exp(lse) + exp(l)), out' = out exp(lse - lse') + o exp(l -
/// lse'); rows that see no key so far keep lse = -inf and out = 0.
std::pair<Value, Value> combine(OpBuilder &b, Location loc, Value out,
                                Value lse, Value o, Value l) {
  auto lseType = cast<RankedTensorType>(lse.getType());
  auto outType = cast<RankedTensorType>(out.getType());
  AffineMap rowId = b.getMultiDimIdentityMap(lseType.getRank());
  Value newLse = elementwise(
      b, loc, lseType, {lse, l}, {rowId, rowId},
      [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
        Type t = a[0].getType();
        Value negInf = arith::ConstantOp::create(
            nb, nl, nb.getFloatAttr(t, -std::numeric_limits<double>::infinity()));
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(t));
        Value m = arith::MaximumFOp::create(nb, nl, a[0], a[1]);
        Value none =
            arith::CmpFOp::create(nb, nl, arith::CmpFPredicate::OEQ, m, negInf);
        Value ref = arith::SelectOp::create(nb, nl, none, zero, m);
        Value sum = arith::AddFOp::create(
            nb, nl,
            math::ExpOp::create(nb, nl, arith::SubFOp::create(nb, nl, a[0], ref)),
            math::ExpOp::create(nb, nl, arith::SubFOp::create(nb, nl, a[1], ref)));
        return arith::AddFOp::create(nb, nl, ref,
                                     math::LogOp::create(nb, nl, sum));
      });
  // The rows' weights, read by every column of the outputs.
  AffineMap rows = AffineMap::get(
      outType.getRank(), 0,
      b.getMultiDimIdentityMap(outType.getRank()).getResults().drop_back(),
      b.getContext());
  AffineMap id = b.getMultiDimIdentityMap(outType.getRank());
  Value newOut = elementwise(
      b, loc, outType, {out, o, lse, l, newLse}, {id, id, rows, rows, rows},
      [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
        Type t = a[0].getType();
        Value negInf = arith::ConstantOp::create(
            nb, nl, nb.getFloatAttr(t, -std::numeric_limits<double>::infinity()));
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(t));
        Value none = arith::CmpFOp::create(nb, nl, arith::CmpFPredicate::OEQ,
                                           a[4], negInf);
        auto weight = [&](Value l) -> Value {
          Value w = math::ExpOp::create(nb, nl,
                                        arith::SubFOp::create(nb, nl, l, a[4]));
          return arith::SelectOp::create(nb, nl, none, zero, w);
        };
        return arith::AddFOp::create(nb, nl, weighted(nb, nl, weight(a[2]), a[0]),
                                     weighted(nb, nl, weight(a[3]), a[1]));
      });
  return {newOut, newLse};
}

/// The ring's state on one rank: the blocks it holds and whose they are.
struct Ring {
  Chain keys, values;
  Value rank;      // this rank's index in the group
  Value keyPos;    // every key's position, or null
  Value kBlock, vBlock;

  /// The members' pairs of a shift by one: j sends to j + 1.
  DenseI64ArrayAttr shiftPairs(OpBuilder &b) const {
    SmallVector<int64_t> pairs;
    for (int64_t j = 0; j < keys.ranks; ++j)
      pairs.append({j, (j + 1) % keys.ranks});
    return b.getDenseI64ArrayAttr(pairs);
  }

  Value shift(OpBuilder &b, Location loc, Value value) const {
    AllGatherOp gather = keys.gather;
    return PermuteOp::create(b, loc, value.getType(), value,
                             gather.getMeshAttr(), gather.getAxesAttr(),
                             shiftPairs(b));
  }

  /// The first position of the block held at step `step`: that of member
  /// (rank - step) mod n.
  Value offsetAt(OpBuilder &b, Location loc, int64_t step) const {
    Value n = arith::ConstantIndexOp::create(b, loc, keys.ranks);
    Value back = arith::ConstantIndexOp::create(b, loc, keys.ranks - step);
    Value owner = arith::RemUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, rank, back), n);
    return arith::MulIOp::create(
        b, loc, owner, arith::ConstantIndexOp::create(b, loc, keys.block));
  }

  /// The keys, values and key positions of step `step`'s block (after
  /// shifting the blocks held before, where `step` > 0).
  std::tuple<Value, Value, Value> step(OpBuilder &b, Location loc,
                                       int64_t step) {
    if (step > 0) {
      kBlock = shift(b, loc, kBlock);
      vBlock = shift(b, loc, vBlock);
    }
    Value offset = offsetAt(b, loc, step);
    Value k = keys.apply(b, loc, kBlock, offset);
    Value v = values.apply(b, loc, vBlock, offset);
    Value pos = keyPos ? sliceAlong(b, loc, keyPos, 0, offset, keys.block)
                       : Value();
    return {k, v, pos};
  }
};

/// Whether every reader of `value` (sequence dim `dim`) is an attention
/// op, or an op acting on each position alone whose readers are: a gather
/// that something else reads too stays (a ring would add its bytes to the
/// gather's).
bool onlyFeedsAttention(Value value, int64_t dim) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<AttentionOp, AttentionDqOp, AttentionDkvOp>(user))
      continue;
    auto linalgOp = dyn_cast<linalg::LinalgOp>(user);
    if ((linalgOp && linalgOp.isDpsInit(&use)) || user->getNumResults() != 1)
      return false;
    int64_t at = resultDimOf(user, use.getOperandNumber(), dim);
    if (at < 0 || !onlyFeedsAttention(user->getResult(0), at))
      return false;
  }
  return true;
}

/// The ring for an op reading keys `k`, values `v` and key positions
/// `kpos`: fails where they are not gathered evenly along the sequence
/// over one group, or where the gathered bytes stay below `minBytes`.
FailureOr<Ring> makeRing(OpBuilder &b, Location loc, Value k, Value v,
                         Value kpos, int64_t minBytes) {
  FailureOr<Chain> keys = findChain(k), values = findChain(v);
  if (failed(keys) || failed(values) ||
      keys->gather.getAxesAttr() != values->gather.getAxesAttr() ||
      keys->gather.getMeshAttr() != values->gather.getMeshAttr() ||
      keys->block != values->block || keys->ranks != values->ranks)
    return failure();
  if (bytesOf(keys->gather) + bytesOf(values->gather) < minBytes)
    return failure();
  int64_t dim = keys->gather.getDim();
  if (!onlyFeedsAttention(keys->gather, dim) ||
      !onlyFeedsAttention(values->gather, values->gather.getDim()))
    return failure();
  if (kpos && cast<RankedTensorType>(kpos.getType()).getDimSize(0) !=
                  keys->block * keys->ranks)
    return failure();
  Ring ring{*keys, *values};
  ring.rank = AxisIndexOp::create(b, loc, b.getIndexType(),
                                  keys->gather.getMeshAttr(),
                                  keys->gather.getAxesAttr());
  ring.keyPos = kpos;
  ring.kBlock = keys->gather.getInput();
  ring.vBlock = values->gather.getInput();
  return ring;
}

/// The forward attention as a ring.
LogicalResult ringForward(AttentionOp op, int64_t minBytes) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  FailureOr<Ring> ring =
      makeRing(b, loc, op.getK(), op.getV(), op.getKpos(), minBytes);
  if (failed(ring))
    return failure();
  Value out, lse;
  for (int64_t s = 0; s < ring->keys.ranks; ++s) {
    auto [k, v, pos] = ring->step(b, loc, s);
    auto block = AttentionOp::create(b, loc, op.getOut().getType(),
                                     op.getLse().getType(), op.getQ(), k, v,
                                     op.getQpos(), pos, op.getScaleAttr());
    if (s == 0) {
      out = block.getOut();
      lse = block.getLse();
      continue;
    }
    std::tie(out, lse) =
        combine(b, loc, out, lse, block.getOut(), block.getLse());
  }
  op.getOut().replaceAllUsesWith(out);
  op.getLse().replaceAllUsesWith(lse);
  op.erase();
  return success();
}

/// The backward ops of one attention as one ring: `dq` (may be null) sums
/// its blocks' terms; `dkv` (may be null) sends each block's gradients,
/// brought to the reduce-scatters' operands, around with the blocks.
LogicalResult ringBackward(AttentionDqOp dq, AttentionDkvOp dkv,
                           int64_t minBytes) {
  Operation *first = dq ? dq.getOperation() : dkv.getOperation();
  if (dq && dkv && dkv->isBeforeInBlock(dq))
    first = dkv;
  // Both read the same operands (checked by the caller).
  auto pick = [&](auto op) {
    return std::make_tuple(op.getQ(), op.getK(), op.getV(), op.getOut(),
                           op.getLse(), op.getDout(), op.getQpos(),
                           op.getKpos(), op.getScaleAttr());
  };
  auto [q, k, v, out, lse, dout, qpos, kpos, scale] =
      dq ? pick(dq) : pick(dkv);
  // The dK and dV paths to their reduce-scatters.
  std::optional<std::pair<ReduceScatterOp, SmallVector<Link>>> dkPath, dvPath;
  if (dkv) {
    auto dkFound = findScatterChain(dkv.getDk(), 2);
    auto dvFound = findScatterChain(dkv.getDv(), 2);
    if (failed(dkFound) || failed(dvFound))
      return failure();
    dkPath = std::move(*dkFound);
    dvPath = std::move(*dvFound);
  }
  OpBuilder b(first);
  Location loc = first->getLoc();
  FailureOr<Ring> ring = makeRing(b, loc, k, v, kpos, minBytes);
  if (failed(ring))
    return failure();
  // The reduce-scatters: over the ring's group, into its blocks.
  auto scattersBlocks = [&](ReduceScatterOp scatter) {
    return scatter.getAxesAttr() == ring->keys.gather.getAxesAttr() &&
           scatter.getMeshAttr() == ring->keys.gather.getMeshAttr() &&
           scatter.getType().getDimSize(scatter.getDim()) == ring->keys.block;
  };
  if (dkv && (!scattersBlocks(dkPath->first) || !scattersBlocks(dvPath->first))) {
    ring->rank.getDefiningOp()->erase();
    return failure();
  }
  // The reduce-scatters' operand, one block of it.
  auto toScatter = [&](const SmallVector<Link> &links, Value block,
                       Value offset) {
    for (const Link &link : links)
      block = applyToBlock(b, loc, link, block, offset, ring->keys.block);
    return block;
  };
  Value dqSum, dkAcc, dvAcc;
  for (int64_t s = 0; s < ring->keys.ranks; ++s) {
    auto [kb, vb, pos] = ring->step(b, loc, s);
    if (dq) {
      Value term = AttentionDqOp::create(b, loc, dq.getType(), q, kb, vb, out,
                                         lse, dout, qpos, pos, scale);
      dqSum = s == 0 ? term : add(b, loc, dqSum, term);
    }
    if (dkv) {
      auto block = AttentionDkvOp::create(
          b, loc, kb.getType(), vb.getType(), q, kb, vb, out, lse, dout, qpos,
          pos, scale);
      Value offset = ring->offsetAt(b, loc, s);
      Value dkTerm = toScatter(dkPath->second, block.getDk(), offset);
      Value dvTerm = toScatter(dvPath->second, block.getDv(), offset);
      if (s > 0) {
        dkTerm = add(b, loc, ring->shift(b, loc, dkAcc), dkTerm);
        dvTerm = add(b, loc, ring->shift(b, loc, dvAcc), dvTerm);
      }
      dkAcc = dkTerm;
      dvAcc = dvTerm;
    }
  }
  if (dkv) {
    // The accumulators of the last step belong to the next member.
    dkPath->first.getResult().replaceAllUsesWith(ring->shift(b, loc, dkAcc));
    dvPath->first.getResult().replaceAllUsesWith(ring->shift(b, loc, dvAcc));
    // The full gradients' paths, now unread.
    for (auto *path : {&*dkPath, &*dvPath}) {
      path->first.erase();
      for (const Link &link : llvm::reverse(path->second))
        link.op->erase();
    }
    dkv.erase();
  }
  if (dq) {
    dq.getDq().replaceAllUsesWith(dqSum);
    dq.erase();
  }
  return success();
}

/// Whether `dq` and `dkv` are the backward of one attention: the same
/// operands.
bool sameAttention(AttentionDqOp dq, AttentionDkvOp dkv) {
  return dq->getOperands() == dkv->getOperands() &&
         dq.getScaleAttr() == dkv.getScaleAttr();
}

/// Erases the ops of `block` that nothing reads and that have no effect,
/// and the gathers nothing reads any more (a gather is a collective every
/// rank of the group runs; each rank's program drops it alike).
void eraseUnread(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() &&
        (isa<AllGatherOp>(op) || wouldOpBeTriviallyDead(&op)))
      op.erase();
}

struct RingAttentionPass
    : mlir::shardx::impl::RingAttentionPassBase<RingAttentionPass> {
  using RingAttentionPassBase::RingAttentionPassBase;

  void runOnOperation() override {
    if (minBytes < 0)
      return;
    SmallVector<AttentionOp> forwards;
    SmallVector<AttentionDqOp> dqs;
    SmallVector<AttentionDkvOp> dkvs;
    getOperation().walk([&](Operation *op) {
      if (auto fwd = dyn_cast<AttentionOp>(op))
        forwards.push_back(fwd);
      else if (auto dq = dyn_cast<AttentionDqOp>(op))
        dqs.push_back(dq);
      else if (auto dkv = dyn_cast<AttentionDkvOp>(op))
        dkvs.push_back(dkv);
    });
    llvm::SetVector<Block *> changed;
    for (AttentionOp op : forwards) {
      Block *block = op->getBlock();
      if (succeeded(ringForward(op, minBytes)))
        changed.insert(block);
    }
    llvm::SmallPtrSet<Operation *, 8> paired;
    for (AttentionDqOp dq : dqs) {
      AttentionDkvOp partner;
      for (AttentionDkvOp dkv : dkvs)
        if (!paired.contains(dkv) && dq->getBlock() == dkv->getBlock() &&
            sameAttention(dq, dkv))
          partner = dkv;
      // Together where both can; else each alone (the keys' gradients may
      // not reach a reduce-scatter along the sequence).
      Block *block = dq->getBlock();
      if (partner && succeeded(ringBackward(dq, partner, minBytes))) {
        paired.insert(partner);
        changed.insert(block);
      } else if (succeeded(ringBackward(dq, nullptr, minBytes))) {
        changed.insert(block);
      }
    }
    for (AttentionDkvOp dkv : dkvs) {
      if (paired.contains(dkv))
        continue;
      Block *block = dkv->getBlock();
      if (succeeded(ringBackward(nullptr, dkv, minBytes)))
        changed.insert(block);
    }
    for (Block *block : changed)
      eraseUnread(*block);
  }
};

} // namespace
