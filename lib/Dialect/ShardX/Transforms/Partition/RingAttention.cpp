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
// An uneven split (an exchange from a split over one mesh axis to the
// whole) rings too: the blocks are padded to the largest, the padding's
// key positions the greatest of their type, so that no query sees them
// (positions are made up for a non-causal attention), and each rank's
// gradients are its padded accumulators' first rows.
//
// A causal attention whose positions are a constant (the zig-zag order of
// shardx.context_parallel) computes only the quarters of each block that
// its mask shows (`Quarters`): where no rank shows all four at a step, the
// step is that many calls on every rank, each on one half of the queries
// and one half of the block's keys.
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
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/CheckedArithmetic.h"

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

/// The loop of `linalgOp` that its result's dim `dim` is (a dim expr of
/// its result map: the chains' ops are checked to have one).
AffineExpr sequenceLoop(linalg::LinalgOp linalgOp, int64_t dim) {
  return linalgOp
      .getIndexingMapMatchingResult(cast<OpResult>(linalgOp->getResult(0)))
      .getResult(dim);
}

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
  auto loop = dyn_cast<AffineDimExpr>(sequenceLoop(linalgOp, dim));
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

/// A collective that moves one dim's pieces within one group, as the ring
/// sees it: an even `all_gather` / `reduce_scatter`, or a
/// `shardx.exchange` between a split of the dim over one mesh axis and the
/// whole dim (uneven pieces), with the pieces' places in the whole.
struct Pieces {
  Operation *op = nullptr;
  int64_t dim = 0;
  FlatSymbolRefAttr mesh;
  DenseI64ArrayAttr axes;
  /// Per group member, the first index and size of its piece.
  SmallVector<int64_t> offsets, sizes;
  /// The largest piece: the ring's block.
  int64_t block = 0;

  int64_t members() const { return offsets.size(); }
  bool even() const {
    return llvm::all_of(sizes, [&](int64_t s) { return s == block; });
  }
  bool operator==(const Pieces &o) const {
    return mesh == o.mesh && axes == o.axes && offsets == o.offsets &&
           sizes == o.sizes;
  }
};

/// `pieces` of `n` even blocks of `block`.
Pieces evenPieces(Operation *op, int64_t dim, FlatSymbolRefAttr mesh,
                  DenseI64ArrayAttr axes, int64_t n, int64_t block) {
  Pieces pieces{op, dim, mesh, axes};
  for (int64_t j = 0; j < n; ++j) {
    pieces.offsets.push_back(j * block);
    pieces.sizes.push_back(block);
  }
  pieces.block = block;
  return pieces;
}

/// The pieces of an exchange on one mesh axis between `split` (dim `dim`
/// split over that axis, stride 1) and `whole` (the same but for that
/// split, and for a Partial of the axis on `whole`'s side where
/// `partialWhole`), else nullopt.
std::optional<Pieces> exchangePieces(ExchangeOp op,
                                     const ::shardx::Layout &split,
                                     const ::shardx::Layout &whole,
                                     bool partialWhole) {
  if (op.getAxes().size() != 1)
    return std::nullopt;
  int64_t axis = op.getAxes()[0];
  auto mesh =
      SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, op.getMeshAttr());
  if (!mesh)
    return std::nullopt;
  std::vector<int64_t> meshShape(mesh.getShape().begin(),
                                 mesh.getShape().end());
  int64_t dim = split.getShardedDim(axis);
  const ::shardx::DimSharding *sharding = dim < 0 ? nullptr : split.getDim(dim);
  if (!sharding || sharding->splits.size() != 1 ||
      sharding->splits[0].stride != 1 || whole.getDim(dim))
    return std::nullopt;
  // Everything else alike.
  for (const ::shardx::DimSharding &d : split.getDims())
    if (d.dim != dim && (!whole.getDim(d.dim) || *whole.getDim(d.dim) != d))
      return std::nullopt;
  if (whole.getDims().size() + 1 != split.getDims().size())
    return std::nullopt;
  for (int64_t a = 0; a < split.getMeshRank(); ++a) {
    std::optional<::shardx::ReduceOp> want = split.getPartials()[a];
    if (a == axis && partialWhole)
      want = ::shardx::ReduceOp::Sum;
    if (whole.getPartials()[a] != want)
      return std::nullopt;
  }
  ArrayRef<int64_t> shape = op.getShape();
  Pieces pieces{op, dim, op.getMeshAttr(), op.getAxesAttr()};
  for (int64_t j = 0; j < meshShape[axis]; ++j) {
    std::vector<int64_t> coords(meshShape.size(), 0);
    coords[axis] = j;
    std::vector<::shardx::Interval> runs;
    split.appendLocalRuns(meshShape, dim, shape[dim], coords, runs);
    if (runs.size() > 1)
      return std::nullopt;
    pieces.offsets.push_back(runs.empty() ? 0 : runs[0].offset);
    pieces.sizes.push_back(runs.empty() ? 0 : runs[0].size);
  }
  pieces.block = *llvm::max_element(pieces.sizes);
  return pieces;
}

/// The pieces `op` gathers along `dim` (its result whole and static).
std::optional<Pieces> gatherPieces(Operation *op, int64_t dim) {
  if (auto gather = dyn_cast<AllGatherOp>(op)) {
    if (static_cast<int64_t>(gather.getDim()) != dim ||
        gather.getStride() != 1 || gather.getSizes() ||
        !gather.getInput().getType().hasStaticShape() ||
        !gather.getType().hasStaticShape())
      return std::nullopt;
    int64_t block = gather.getInput().getType().getDimSize(dim);
    return evenPieces(op, dim, gather.getMeshAttr(), gather.getAxesAttr(),
                      gather.getType().getDimSize(dim) / block, block);
  }
  if (auto exchange = dyn_cast<ExchangeOp>(op)) {
    std::optional<Pieces> pieces =
        exchangePieces(exchange, exchange.getSource().getLayout(),
                       exchange.getTarget().getLayout(), false);
    if (!pieces || pieces->dim != dim || !exchange.getType().hasStaticShape())
      return std::nullopt;
    return pieces;
  }
  return std::nullopt;
}

/// The pieces `op` sum-scatters along `dim` (its operand whole and
/// static).
std::optional<Pieces> scatterPieces(Operation *op, int64_t dim) {
  if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
    if (static_cast<int64_t>(scatter.getDim()) != dim ||
        scatter.getStride() != 1 || scatter.getSizes() ||
        scatter.getReduction() != ReductionKind::Sum ||
        !scatter.getType().hasStaticShape())
      return std::nullopt;
    int64_t block = scatter.getType().getDimSize(dim);
    return evenPieces(op, dim, scatter.getMeshAttr(), scatter.getAxesAttr(),
                      scatter.getInput().getType().getDimSize(dim) / block,
                      block);
  }
  if (auto exchange = dyn_cast<ExchangeOp>(op)) {
    std::optional<Pieces> pieces =
        exchangePieces(exchange, exchange.getTarget().getLayout(),
                       exchange.getSource().getLayout(), true);
    if (!pieces || pieces->dim != dim ||
        !exchange.getInput().getType().hasStaticShape())
      return std::nullopt;
    return pieces;
  }
  return std::nullopt;
}

/// The ops from a gather along the sequence (`gatherPieces`) to `value`
/// (whose sequence dim is `dim`), last op first; fails where an op of the
/// path acts across positions.
FailureOr<std::pair<Pieces, SmallVector<Link>>> findGatherChain(Value value,
                                                                int64_t dim) {
  SmallVector<Link> chain;
  while (true) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return failure();
    if (std::optional<Pieces> pieces = gatherPieces(op, dim))
      return std::make_pair(*pieces, chain);
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

/// The ops from `value` (sequence dim `dim`) to the sum-scatter along the
/// sequence (`scatterPieces`) that is its only reader's path, first op
/// first.
FailureOr<std::pair<Pieces, SmallVector<Link>>> findScatterChain(Value value,
                                                                 int64_t dim) {
  SmallVector<Link> chain;
  while (true) {
    if (!value.hasOneUse())
      return failure();
    OpOperand &use = *value.getUses().begin();
    Operation *op = use.getOwner();
    if (std::optional<Pieces> pieces = scatterPieces(op, dim))
      return std::make_pair(*pieces, chain);
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

/// The offsets, sizes and strides of the rows [offset, offset + size) of
/// `type` along `dim`, the other dims (static) whole.
struct SliceBounds {
  SmallVector<OpFoldResult> offsets, sizes, strides;
};

SliceBounds boundsAlong(OpBuilder &b, RankedTensorType type, int64_t dim,
                        OpFoldResult offset, OpFoldResult size) {
  SliceBounds bounds;
  bounds.offsets.assign(type.getRank(), b.getIndexAttr(0));
  bounds.strides.assign(type.getRank(), b.getIndexAttr(1));
  for (int64_t d = 0; d < type.getRank(); ++d)
    bounds.sizes.push_back(d == dim ? size
                                    : b.getIndexAttr(type.getDimSize(d)));
  bounds.offsets[dim] = offset;
  return bounds;
}

/// The slice [offset, offset + size) of `value` along `dim` (the other
/// dims static and whole).
Value sliceAlong(OpBuilder &b, Location loc, Value value, int64_t dim,
                 OpFoldResult offset, OpFoldResult size) {
  SliceBounds at = boundsAlong(b, cast<RankedTensorType>(value.getType()), dim,
                               offset, size);
  std::optional<int64_t> known = getConstantIntValue(size);
  return tensor::ExtractSliceOp::create(
      b, loc, withDim(value, dim, known ? *known : ShapedType::kDynamic), value,
      at.offsets, at.sizes, at.strides);
}

/// `value` padded at the end of `dim` to `size` with `fill`.
Value padAlong(OpBuilder &b, Location loc, Value value, int64_t dim,
               int64_t size, Attribute fill) {
  RankedTensorType type = withDim(value, dim, size);
  if (type == value.getType())
    return value;
  Value pad = arith::ConstantOp::create(b, loc, cast<TypedAttr>(fill));
  return tensor::createPadHighOp(type, value, pad, /*nofold=*/false, loc, b);
}

/// `link`'s op applied to `block` (its chain operand's block of `size`
/// positions starting at `offset`): its other operands sliced alike, its
/// init made again (an empty tensor, or a fill of one) or sliced.
Value applyToBlock(OpBuilder &b, Location loc, const Link &link, Value block,
                   Value offset, int64_t size) {
  Operation *op = link.op;
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return tensor::CollapseShapeOp::create(b, loc, block,
                                           collapse.getReassociationIndices());
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return tensor::ExpandShapeOp::create(
        b, loc, withDim(expand.getResult(), link.resultDim, size), block,
        expand.getReassociationIndices());
  auto linalgOp = cast<linalg::LinalgOp>(op);
  AffineExpr loop = sequenceLoop(linalgOp, link.resultDim);
  IRMapping map;
  for (OpOperand &use : op->getOpOperands()) {
    if (use.getOperandNumber() == link.operand) {
      map.map(use.get(), block);
      continue;
    }
    // The other operands: sliced where they read the sequence's loop.
    std::optional<unsigned> at =
        linalgOp.getMatchingIndexingMap(&use).getResultPosition(loop);
    if (!at)
      continue;
    Value whole = use.get();
    if (linalgOp.isDpsInit(&use)) {
      RankedTensorType type = withDim(whole, *at, size);
      Value empty = tensor::EmptyOp::create(b, loc, type.getShape(),
                                            type.getElementType());
      if (auto fill = whole.getDefiningOp<linalg::FillOp>()) {
        map.map(
            whole,
            linalg::FillOp::create(b, loc, fill.value(), empty).getResult(0));
        continue;
      }
      if (whole.getDefiningOp<tensor::EmptyOp>()) {
        map.map(whole, empty);
        continue;
      }
    }
    map.map(whole,
            sliceAlong(b, loc, whole, *at, offset, b.getIndexAttr(size)));
  }
  Operation *clone = b.clone(*op, map);
  clone->getResult(0).setType(
      cast<linalg::LinalgOp>(clone).getDpsInits()[0].getType());
  return clone->getResult(0);
}

/// Whether `link`'s op reads the sequence through an operand other than
/// its chain operand and its init (a rotary table, say): sliced per
/// block, it would be read past its end by a padded block.
bool readsSequenceBesides(const Link &link) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(link.op);
  if (!linalgOp)
    return false;
  AffineExpr loop = sequenceLoop(linalgOp, link.resultDim);
  for (OpOperand &use : link.op->getOpOperands())
    if (use.getOperandNumber() != link.operand && !linalgOp.isDpsInit(&use) &&
        linalgOp.getMatchingIndexingMap(&use).getResultPosition(loop))
      return true;
  return false;
}

/// A gather's chain, applied to blocks: the keys' or values' path from
/// their gather to the attention operand.
struct Chain {
  Pieces pieces;
  SmallVector<Link> links; // last op first

  Value input() const { return pieces.op->getOperand(0); }
  Value gathered() const { return pieces.op->getResult(0); }
  int64_t ranks() const { return pieces.members(); }

  Value apply(OpBuilder &b, Location loc, Value blockValue,
              Value offset) const {
    for (const Link &link : llvm::reverse(links))
      blockValue = applyToBlock(b, loc, link, blockValue, offset, pieces.block);
    return blockValue;
  }
};

FailureOr<Chain> findChain(Value operand) {
  // The attention operands' sequence dim is 2 ([B, H, S, D]).
  auto found = findGatherChain(operand, 2);
  if (failed(found))
    return failure();
  Chain chain{found->first, std::move(found->second)};
  if (chain.ranks() < 2)
    return failure();
  if (!chain.pieces.even() && llvm::any_of(chain.links, readsSequenceBesides))
    return failure();
  return chain;
}

int64_t bytesOf(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() *
         llvm::divideCeil(type.getElementTypeBitWidth(), 8);
}

/// An elementwise linalg.generic of `inputs[0]`'s type and shape (dynamic
/// rows of an uneven split included) over `inputs` (each read through
/// `maps`, the result through the identity), its body `body`.
Value elementwise(OpBuilder &b, Location loc, ValueRange inputs,
                  ArrayRef<AffineMap> maps,
                  function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  auto type = cast<RankedTensorType>(inputs[0].getType());
  Value init = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, inputs[0]), type.getElementType());
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
  return elementwise(b, loc, {x, y}, {id, id},
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
      b, loc, {lse, l}, {rowId, rowId},
      [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
        Type t = a[0].getType();
        Value negInf = arith::ConstantOp::create(
            nb, nl,
            nb.getFloatAttr(t, -std::numeric_limits<double>::infinity()));
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(t));
        Value m = arith::MaximumFOp::create(nb, nl, a[0], a[1]);
        Value none =
            arith::CmpFOp::create(nb, nl, arith::CmpFPredicate::OEQ, m, negInf);
        Value ref = arith::SelectOp::create(nb, nl, none, zero, m);
        Value sum = arith::AddFOp::create(
            nb, nl,
            math::ExpOp::create(nb, nl,
                                arith::SubFOp::create(nb, nl, a[0], ref)),
            math::ExpOp::create(nb, nl,
                                arith::SubFOp::create(nb, nl, a[1], ref)));
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
      b, loc, {out, o, lse, l, newLse}, {id, id, rows, rows, rows},
      [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
        Type t = a[0].getType();
        Value negInf = arith::ConstantOp::create(
            nb, nl,
            nb.getFloatAttr(t, -std::numeric_limits<double>::infinity()));
        Value zero = arith::ConstantOp::create(nb, nl, nb.getZeroAttr(t));
        Value none = arith::CmpFOp::create(nb, nl, arith::CmpFPredicate::OEQ,
                                           a[4], negInf);
        auto weight = [&](Value l) -> Value {
          Value w = math::ExpOp::create(nb, nl,
                                        arith::SubFOp::create(nb, nl, l, a[4]));
          return arith::SelectOp::create(nb, nl, none, zero, w);
        };
        return arith::AddFOp::create(nb, nl,
                                     weighted(nb, nl, weight(a[2]), a[0]),
                                     weighted(nb, nl, weight(a[3]), a[1]));
      });
  return {newOut, newLse};
}

/// The ring's state on one rank: the blocks it holds and whose they are.
struct Ring {
  Chain keys, values;
  Value rank;   // this rank's index in the group
  Value keyPos; // every key's position, or null
  /// Where the attention has no positions but its blocks are padded: every
  /// query's made-up position, the greatest but one (each block's real
  /// keys at 0 see it, the padding at the greatest does not).
  Value queryPos;
  Value kBlock, vBlock;

  /// The members' pairs of a shift by one: j sends to j + 1.
  DenseI64ArrayAttr shiftPairs(OpBuilder &b) const {
    SmallVector<int64_t> pairs;
    for (int64_t j = 0; j < keys.ranks(); ++j)
      pairs.append({j, (j + 1) % keys.ranks()});
    return b.getDenseI64ArrayAttr(pairs);
  }

  Value shift(OpBuilder &b, Location loc, Value value) const {
    return PermuteOp::create(b, loc, value.getType(), value, keys.pieces.mesh,
                             keys.pieces.axes, shiftPairs(b));
  }

  /// The member whose block is held at step `step`: (rank - step) mod n.
  Value ownerAt(OpBuilder &b, Location loc, int64_t step) const {
    Value n = arith::ConstantIndexOp::create(b, loc, keys.ranks());
    Value back = arith::ConstantIndexOp::create(b, loc, keys.ranks() - step);
    return arith::RemUIOp::create(b, loc,
                                  arith::AddIOp::create(b, loc, rank, back), n);
  }

  /// `table[member]` for the index `member`.
  static Value lookup(OpBuilder &b, Location loc, Value member,
                      ArrayRef<int64_t> table) {
    Value value = arith::ConstantIndexOp::create(b, loc, table[0]);
    for (auto [j, entry] : llvm::enumerate(table))
      if (j > 0 && entry != table[0]) {
        Value is =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, member,
                                  arith::ConstantIndexOp::create(b, loc, j));
        value = arith::SelectOp::create(
            b, loc, is, arith::ConstantIndexOp::create(b, loc, entry), value);
      }
    return value;
  }

  /// The first position of the block held at step `step`.
  Value offsetAt(OpBuilder &b, Location loc, int64_t step) const {
    Value owner = ownerAt(b, loc, step);
    if (keys.pieces.even())
      return arith::MulIOp::create(
          b, loc, owner,
          arith::ConstantIndexOp::create(b, loc, keys.pieces.block));
    return lookup(b, loc, owner, keys.pieces.offsets);
  }

  /// The keys, values and key positions of step `step`'s block (after
  /// shifting the blocks held before, where `step` > 0). Uneven blocks are
  /// padded to the largest with keys at the greatest position, which no
  /// query sees.
  std::tuple<Value, Value, Value> step(OpBuilder &b, Location loc,
                                       int64_t step) {
    if (step > 0) {
      kBlock = shift(b, loc, kBlock);
      vBlock = shift(b, loc, vBlock);
    }
    Value offset = offsetAt(b, loc, step);
    Value k = keys.apply(b, loc, kBlock, offset);
    Value v = values.apply(b, loc, vBlock, offset);
    Value pos;
    if (queryPos) {
      // Not causal: the block's real keys at 0, the padding at the
      // greatest position.
      Value size = lookup(b, loc, ownerAt(b, loc, step), keys.pieces.sizes);
      Type i64 = b.getI64Type();
      Value zero = arith::ConstantOp::create(b, loc, b.getIntegerAttr(i64, 0));
      Value real =
          tensor::EmptyOp::create(b, loc, ArrayRef<OpFoldResult>{size}, i64);
      pos = padAlong(b, loc,
                     linalg::FillOp::create(b, loc, zero, real).getResult(0), 0,
                     keys.pieces.block,
                     b.getIntegerAttr(i64, APInt::getSignedMaxValue(64)));
    } else if (keyPos && keys.pieces.even()) {
      pos = sliceAlong(b, loc, keyPos, 0, offset,
                       b.getIndexAttr(keys.pieces.block));
    } else if (keyPos) {
      Value size = lookup(b, loc, ownerAt(b, loc, step), keys.pieces.sizes);
      auto intType = cast<IntegerType>(
          cast<RankedTensorType>(keyPos.getType()).getElementType());
      pos = padAlong(b, loc, sliceAlong(b, loc, keyPos, 0, offset, size), 0,
                     keys.pieces.block,
                     b.getIntegerAttr(intType, APInt::getSignedMaxValue(
                                                   intType.getWidth())));
    }
    return {k, v, pos};
  }

  /// This rank's piece of a gather's operand, padded to the block.
  static Value paddedInput(OpBuilder &b, Location loc, const Chain &chain) {
    Value input = chain.input();
    auto type = cast<RankedTensorType>(input.getType());
    return padAlong(b, loc, input, chain.pieces.dim, chain.pieces.block,
                    b.getZeroAttr(type.getElementType()));
  }
};

/// The calls that compute what a causal mask shows of an attention whose
/// positions are a constant: each rank's queries and the keys in pieces,
/// one call per (query piece, key piece) where some key of the key piece
/// is at or before some query of the query piece. The program is straight
/// line, so every rank makes as many calls as the rank that shows the
/// most; a rank that shows fewer fills its spare calls with a hidden pair,
/// whose rows see no key and add nothing.
struct Calls {
  int64_t piece = 0;
  /// Per call, per member: the call's first query row and first key row.
  SmallVector<SmallVector<std::pair<int64_t, int64_t>>> rows;
};

/// The integers of the constant `value`, or nullopt.
std::optional<SmallVector<int64_t>> constantInts(Value value) {
  DenseIntElementsAttr attr;
  if (!value || !matchPattern(value, m_Constant(&attr)))
    return std::nullopt;
  SmallVector<int64_t> ints;
  for (const APInt &i : attr.getValues<APInt>())
    ints.push_back(i.getSExtValue());
  return ints;
}

/// The value of `value`, an integer of the body of a linalg.generic with
/// one loop, at index `i`: where it is made of the loop's index, constants,
/// casts, sums, differences and products; else nullopt.
std::optional<int64_t> evaluateAt(Value value, int64_t i) {
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  APInt c;
  if (matchPattern(value, m_ConstantInt(&c)))
    return c.getSExtValue();
  if (auto index = dyn_cast<linalg::IndexOp>(op))
    return index.getDim() == 0 ? std::optional<int64_t>(i) : std::nullopt;
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp>(op))
    return evaluateAt(op->getOperand(0), i);
  if (!isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op))
    return std::nullopt;
  std::optional<int64_t> x = evaluateAt(op->getOperand(0), i);
  std::optional<int64_t> y = evaluateAt(op->getOperand(1), i);
  if (!x || !y)
    return std::nullopt;
  std::optional<int64_t> result =
      isa<arith::AddIOp>(op)   ? llvm::checkedAdd(*x, *y)
      : isa<arith::SubIOp>(op) ? llvm::checkedSub(*x, *y)
                               : llvm::checkedMul(*x, *y);
  // Where the op's type would wrap, the value is not this one.
  unsigned width =
      value.getType().isIndex() ? 64 : value.getType().getIntOrFloatBitWidth();
  if (result && width < 64 &&
      (*result < -(int64_t(1) << (width - 1)) ||
       *result >= (int64_t(1) << (width - 1))))
    return std::nullopt;
  return result;
}

/// The values of positions `value` where they are known at compile time:
/// a constant, or computed from the index alone by a linalg.generic (what
/// `torch.arange` traces to).
std::optional<SmallVector<int64_t>> knownPositions(Value value) {
  if (!value)
    return std::nullopt;
  if (std::optional<SmallVector<int64_t>> ints = constantInts(value))
    return ints;
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!generic || generic.getNumDpsInputs() != 0 ||
      generic->getNumResults() != 1 || !type || type.getRank() != 1 ||
      !type.hasStaticShape() || !generic.getIndexingMapsArray()[0].isIdentity())
    return std::nullopt;
  Value yielded =
      cast<linalg::YieldOp>(generic.getRegion().front().getTerminator())
          .getOperand(0);
  SmallVector<int64_t> values;
  for (int64_t i = 0; i < type.getDimSize(0); ++i) {
    std::optional<int64_t> v = evaluateAt(yielded, i);
    if (!v)
      return std::nullopt;
    values.push_back(*v);
  }
  return values;
}

/// Causal positions known at compile time (`knownPositions`), `block`
/// rows per member of a group in member order, whose queries are each
/// member's rows of them.
struct ChunkedPositions {
  SmallVector<int64_t> values;
  FlatSymbolRefAttr mesh;
  DenseI64ArrayAttr axes;
  int64_t members = 0, block = 0;
};

/// The positions of a causal attention whose key positions `kpos` are
/// known and whose query positions `qpos` are the same, or an even
/// `shardx.chunk` of the same over a group (of one member: the same
/// again), else nullopt.
std::optional<ChunkedPositions> chunkedPositions(Value qpos, Value kpos) {
  if (!qpos)
    return std::nullopt;
  std::optional<SmallVector<int64_t>> keys = knownPositions(kpos);
  if (!keys || keys->empty())
    return std::nullopt;
  int64_t whole = static_cast<int64_t>(keys->size());
  auto chunk = qpos.getDefiningOp<ChunkOp>();
  if (!chunk) {
    std::optional<SmallVector<int64_t>> queries = knownPositions(qpos);
    if (!queries || *queries != *keys)
      return std::nullopt;
    return ChunkedPositions{*keys, {}, {}, 1, whole};
  }
  if (chunk.getDim() != 0 || chunk.getStride() != 1 || chunk.getSizes() ||
      !chunk.getType().hasStaticShape())
    return std::nullopt;
  std::optional<SmallVector<int64_t>> queries =
      knownPositions(chunk.getInput());
  int64_t block = chunk.getType().getDimSize(0);
  if (!queries || *queries != *keys || block == 0 || whole % block)
    return std::nullopt;
  return ChunkedPositions{*keys, chunk.getMeshAttr(), chunk.getAxesAttr(),
                          whole / block, block};
}

/// The calls of each member's queries (rows [r * block, (r + 1) * block)
/// of `at`) against the keys at rows [keyStart(r), keyStart(r) + keys),
/// both in pieces of `piece` rows; nullopt where some member shows every
/// pair (the whole op is no more work).
std::optional<Calls> shownCalls(const ChunkedPositions &at, int64_t piece,
                                function_ref<int64_t(int64_t)> keyStart,
                                int64_t keys) {
  auto extreme = [&](int64_t first, bool greatest) {
    auto begin = at.values.begin() + first;
    return greatest ? *std::max_element(begin, begin + piece)
                    : *std::min_element(begin, begin + piece);
  };
  int64_t n = at.members;
  SmallVector<SmallVector<std::pair<int64_t, int64_t>>> shown(n), hidden(n);
  size_t most = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t a = 0; a < at.block; a += piece)
      for (int64_t k = 0; k < keys; k += piece)
        (extreme(keyStart(r) + k, false) <= extreme(r * at.block + a, true)
             ? shown
             : hidden)[r]
            .push_back({a, k});
    most = std::max(most, shown[r].size());
  }
  if (llvm::any_of(hidden, [](auto &h) { return h.empty(); }))
    return std::nullopt;
  Calls calls{piece};
  for (size_t i = 0; i < most; ++i) {
    auto &call = calls.rows.emplace_back();
    for (int64_t r = 0; r < n; ++r)
      call.push_back(i < shown[r].size() ? shown[r][i] : hidden[r].front());
  }
  return calls;
}

/// A tensor of `like`'s type filled with `value`.
Value filled(OpBuilder &b, Location loc, Value like, Attribute value) {
  auto type = cast<RankedTensorType>(like.getType());
  Value empty =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  Value scalar = arith::ConstantOp::create(b, loc, cast<TypedAttr>(value));
  return linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
}

Value zerosLike(OpBuilder &b, Location loc, Value like) {
  return filled(b, loc, like,
                b.getZeroAttr(getElementTypeOrSelf(like.getType())));
}

/// `dest` with `source` (static) written at `offset` along `dim`.
Value insertAlong(OpBuilder &b, Location loc, Value source, Value dest,
                  int64_t dim, OpFoldResult offset) {
  auto type = cast<RankedTensorType>(source.getType());
  SliceBounds at =
      boundsAlong(b, type, dim, offset, b.getIndexAttr(type.getDimSize(dim)));
  return tensor::InsertSliceOp::create(b, loc, source, dest, at.offsets,
                                       at.sizes, at.strides);
}

/// `acc` with `term` added to its rows [offset, offset + rows of `term`)
/// along `dim`.
Value addAlong(OpBuilder &b, Location loc, Value acc, Value term, int64_t dim,
               Value offset) {
  int64_t rows = cast<RankedTensorType>(term.getType()).getDimSize(dim);
  Value part = sliceAlong(b, loc, acc, dim, offset, b.getIndexAttr(rows));
  return insertAlong(b, loc, add(b, loc, part, term), acc, dim, offset);
}

/// The operands of one call: this rank's query and key rows, looked up by
/// `rank`, and the operands sliced to them (the queries' and the rows'
/// tensors along dim 2, positions along dim 0).
struct CallRows {
  Value queryRow, keyRow;
  OpBuilder &b;
  Location loc;
  IntegerAttr size;

  Value rows(Value x, int64_t dim) const {
    return sliceAlong(b, loc, x, dim, queryRow, size);
  }
  Value keys(Value x, int64_t dim) const {
    return sliceAlong(b, loc, x, dim, keyRow, size);
  }
};

CallRows callRows(OpBuilder &b, Location loc, const Calls &calls,
                  ArrayRef<std::pair<int64_t, int64_t>> call, Value rank) {
  SmallVector<int64_t> queryRows, keyRows;
  for (auto [q, k] : call) {
    queryRows.push_back(q);
    keyRows.push_back(k);
  }
  return {Ring::lookup(b, loc, rank, queryRows),
          Ring::lookup(b, loc, rank, keyRows), b, loc,
          b.getIndexAttr(calls.piece)};
}

/// `op`'s attention by `calls` over keys `k`, values `v` and key
/// positions `kpos`, each call's (out, lse) combined into its query rows
/// of `out` and `lse` (zeros and -inf where null).
void attendByCalls(OpBuilder &b, Location loc, AttentionOp op,
                   const Calls &calls, Value rank, Value k, Value v, Value qpos,
                   Value kpos, Value &out, Value &lse) {
  if (!out) {
    out = zerosLike(b, loc, op.getOut());
    lse = filled(b, loc, op.getLse(),
                 b.getFloatAttr(getElementTypeOrSelf(op.getLse().getType()),
                                -std::numeric_limits<double>::infinity()));
  }
  int64_t piece = calls.piece;
  for (const auto &call : calls.rows) {
    CallRows at = callRows(b, loc, calls, call, rank);
    auto block = AttentionOp::create(
        b, loc, withDim(op.getOut(), 2, piece), withDim(op.getLse(), 2, piece),
        at.rows(op.getQ(), 2), at.keys(k, 2), at.keys(v, 2), at.rows(qpos, 0),
        at.keys(kpos, 0), op.getScaleAttr(), op.getProductsAttr());
    auto [rowsOut, rowsLse] = combine(b, loc, at.rows(out, 2), at.rows(lse, 2),
                                      block.getOut(), block.getLse());
    out = insertAlong(b, loc, rowsOut, out, 2, at.queryRow);
    lse = insertAlong(b, loc, rowsLse, lse, 2, at.queryRow);
  }
}

/// The backward's operands.
struct BackwardOperands {
  Value q, k, v, out, lse, dout, qpos, kpos;
  FloatAttr scale;
  TypeAttr products;
};

/// The operands of `op`, an `attention_dq` or an `attention_dkv`.
template <typename OpTy> BackwardOperands backwardOperands(OpTy op) {
  return {op.getQ(),         op.getK(),           op.getV(),    op.getOut(),
          op.getLse(),       op.getDout(),        op.getQpos(), op.getKpos(),
          op.getScaleAttr(), op.getProductsAttr()};
}

/// The operands of a forward `attention` in the same form: no output,
/// log-sum-exp or output gradient.
BackwardOperands backwardOperands(AttentionOp op) {
  return {op.getQ(),
          op.getK(),
          op.getV(),
          {},
          {},
          {},
          op.getQpos(),
          op.getKpos(),
          op.getScaleAttr(),
          op.getProductsAttr()};
}

/// The backward of an attention by `calls`: each call's dq added into its
/// query rows of `dq`, its dK and dV into its key rows of `dk` and `dv`
/// (each null where not wanted; zeros first).
void backwardByCalls(OpBuilder &b, Location loc, const Calls &calls, Value rank,
                     const BackwardOperands &x, Value *dq, Value *dk,
                     Value *dv) {
  if (dq && !*dq)
    *dq = zerosLike(b, loc, x.q);
  if (dk && !*dk) {
    *dk = zerosLike(b, loc, x.k);
    *dv = zerosLike(b, loc, x.v);
  }
  int64_t piece = calls.piece;
  for (const auto &call : calls.rows) {
    CallRows at = callRows(b, loc, calls, call, rank);
    Value qs = at.rows(x.q, 2), os = at.rows(x.out, 2), ls = at.rows(x.lse, 2),
          dos = at.rows(x.dout, 2), qp = at.rows(x.qpos, 0);
    Value ks = at.keys(x.k, 2), vs = at.keys(x.v, 2), kp = at.keys(x.kpos, 0);
    if (dq) {
      Value term =
          AttentionDqOp::create(b, loc, withDim(x.q, 2, piece), qs, ks, vs, os,
                                ls, dos, qp, kp, x.scale, x.products);
      *dq = addAlong(b, loc, *dq, term, 2, at.queryRow);
    }
    if (dk) {
      auto block = AttentionDkvOp::create(
          b, loc, withDim(x.k, 2, piece), withDim(x.v, 2, piece), qs, ks, vs,
          os, ls, dos, qp, kp, x.scale, x.products);
      *dk = addAlong(b, loc, *dk, block.getDk(), 2, at.keyRow);
      *dv = addAlong(b, loc, *dv, block.getDv(), 2, at.keyRow);
    }
  }
}

/// A causal ring's calls per step (`shownCalls` of each rank's queries
/// against the block it holds, in halves), where its positions are known
/// at compile time and split with the ring's blocks; nullopt for a step
/// computed whole. With the zig-zag order of shardx.context_parallel: 3
/// quarters of the own block and 2 of every other.
SmallVector<std::optional<Calls>> ringCalls(const Pieces &pieces, Value qpos,
                                            Value kpos) {
  int64_t n = pieces.members();
  SmallVector<std::optional<Calls>> steps(n);
  std::optional<ChunkedPositions> at = chunkedPositions(qpos, kpos);
  if (!at || !pieces.even() || pieces.block % 2 || at->mesh != pieces.mesh ||
      at->axes != pieces.axes || at->block != pieces.block || at->members != n)
    return steps;
  for (int64_t s = 0; s < n; ++s)
    steps[s] = shownCalls(
        *at, pieces.block / 2,
        [&](int64_t r) { return (r - s + n) % n * pieces.block; },
        pieces.block);
  return steps;
}

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

/// The chains of keys `k` and values `v` a ring takes the blocks of:
/// fails where they are not gathered along the sequence over one group
/// alike (an uneven one only with key positions `kpos`, which mask the
/// padding), where something else reads the gathers, or where the
/// gathered bytes stay below `minBytes`.
FailureOr<std::pair<Chain, Chain>> planRing(Value k, Value v, Value kpos,
                                            int64_t minBytes) {
  FailureOr<Chain> keys = findChain(k), values = findChain(v);
  if (failed(keys) || failed(values) || !(keys->pieces == values->pieces))
    return failure();
  if (bytesOf(keys->gathered()) + bytesOf(values->gathered()) < minBytes)
    return failure();
  if (!onlyFeedsAttention(keys->gathered(), keys->pieces.dim) ||
      !onlyFeedsAttention(values->gathered(), values->pieces.dim))
    return failure();
  int64_t whole = keys->pieces.offsets.back() + keys->pieces.sizes.back();
  if (kpos && cast<RankedTensorType>(kpos.getType()).getDimSize(0) != whole)
    return failure();
  return std::make_pair(std::move(*keys), std::move(*values));
}

/// The ring for an op reading keys `k`, values `v` and key positions
/// `kpos` (`planRing`), its state made before the builder's point.
FailureOr<Ring> makeRing(OpBuilder &b, Location loc, Value q, Value k, Value v,
                         Value kpos, int64_t minBytes) {
  auto plan = planRing(k, v, kpos, minBytes);
  if (failed(plan))
    return failure();
  auto &[keys, values] = *plan;
  Ring ring{keys, values};
  ring.rank = AxisIndexOp::create(b, loc, b.getIndexType(), keys.pieces.mesh,
                                  keys.pieces.axes);
  ring.keyPos = kpos;
  if (!kpos && !keys.pieces.even()) {
    // Padded blocks of a non-causal attention: positions made up so that
    // the padding is masked (Ring::queryPos).
    Type i64 = b.getI64Type();
    Value rows = tensor::EmptyOp::create(
        b, loc, ArrayRef<OpFoldResult>{tensor::getMixedSize(b, loc, q, 2)},
        i64);
    Value late = arith::ConstantOp::create(
        b, loc, b.getIntegerAttr(i64, APInt::getSignedMaxValue(64) - 1));
    ring.queryPos = linalg::FillOp::create(b, loc, late, rows).getResult(0);
  }
  ring.kBlock = Ring::paddedInput(b, loc, keys);
  ring.vBlock = Ring::paddedInput(b, loc, values);
  return ring;
}

/// Whether the key and value gradients of `dkv` reach scatters into the
/// blocks of `pieces` (through ops a padded block may take, where uneven).
bool gradientsScatterInto(AttentionDkvOp dkv, const Pieces &pieces) {
  for (Value grad : {dkv.getDk(), dkv.getDv()}) {
    auto path = findScatterChain(grad, 2);
    if (failed(path) || !(path->first == pieces) ||
        (!pieces.even() && llvm::any_of(path->second, readsSequenceBesides)))
      return false;
  }
  return true;
}

/// The gathers a ring of attention op `op` would replace (those found),
/// and whether it can run as one.
std::pair<SmallVector<Operation *, 2>, bool> ringable(Operation *op,
                                                      int64_t minBytes) {
  Value k = op->getOperand(1), v = op->getOperand(2);
  Value kpos;
  if (auto fwd = dyn_cast<AttentionOp>(op))
    kpos = fwd.getKpos();
  else if (auto dq = dyn_cast<AttentionDqOp>(op))
    kpos = dq.getKpos();
  else
    kpos = cast<AttentionDkvOp>(op).getKpos();
  SmallVector<Operation *, 2> sources;
  for (Value operand : {k, v})
    if (auto chain = findChain(operand); succeeded(chain))
      sources.push_back(chain->pieces.op);
  auto plan = planRing(k, v, kpos, minBytes);
  bool ok = succeeded(plan);
  if (ok)
    if (auto dkv = dyn_cast<AttentionDkvOp>(op))
      ok = gradientsScatterInto(dkv, plan->first.pieces);
  return {sources, ok};
}

/// The forward attention as a ring.
LogicalResult ringForward(AttentionOp op, int64_t minBytes) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  FailureOr<Ring> ring =
      makeRing(b, loc, op.getQ(), op.getK(), op.getV(), op.getKpos(), minBytes);
  if (failed(ring))
    return failure();
  Value qpos = op.getQpos() ? op.getQpos() : ring->queryPos;
  SmallVector<std::optional<Calls>> steps =
      ringCalls(ring->keys.pieces, op.getQpos(), op.getKpos());
  Value out, lse;
  for (int64_t s = 0; s < ring->keys.ranks(); ++s) {
    auto [k, v, pos] = ring->step(b, loc, s);
    if (steps[s]) {
      // The quarters the mask shows, each combined into its query rows.
      attendByCalls(b, loc, op, *steps[s], ring->rank, k, v, qpos, pos, out,
                    lse);
      continue;
    }
    auto block = AttentionOp::create(
        b, loc, op.getOut().getType(), op.getLse().getType(), op.getQ(), k, v,
        qpos, pos, op.getScaleAttr(), op.getProductsAttr());
    if (!out) {
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
  auto [q, k, v, out, lse, dout, qpos, kpos, scale, products] =
      dq ? backwardOperands(dq) : backwardOperands(dkv);
  // The dK and dV paths to their reduce-scatters.
  std::optional<std::pair<Pieces, SmallVector<Link>>> dkPath, dvPath;
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
  FailureOr<Ring> ring = makeRing(b, loc, q, k, v, kpos, minBytes);
  if (failed(ring))
    return failure();
  Value rowPos = qpos ? Value(qpos) : ring->queryPos;
  // The scatters: over the ring's group, into its blocks.
  if (dkv && (!(dkPath->first == ring->keys.pieces) ||
              !(dvPath->first == ring->keys.pieces) ||
              (!ring->keys.pieces.even() &&
               (llvm::any_of(dkPath->second, readsSequenceBesides) ||
                llvm::any_of(dvPath->second, readsSequenceBesides))))) {
    for (Value made : {ring->kBlock, ring->vBlock, ring->queryPos, ring->rank})
      if (made && made.getDefiningOp() && made.use_empty())
        made.getDefiningOp()->erase();
    return failure();
  }
  // The scatters' operand, one block of it.
  auto toScatter = [&](const SmallVector<Link> &links, Value block,
                       Value offset) {
    for (const Link &link : links)
      block =
          applyToBlock(b, loc, link, block, offset, ring->keys.pieces.block);
    return block;
  };
  SmallVector<std::optional<Calls>> steps =
      ringCalls(ring->keys.pieces, qpos, kpos);
  Value dqSum, dkAcc, dvAcc;
  for (int64_t s = 0; s < ring->keys.ranks(); ++s) {
    auto [kb, vb, pos] = ring->step(b, loc, s);
    Value dkBlock, dvBlock;
    if (steps[s]) {
      // The quarters the mask shows, each added into its rows.
      backwardByCalls(b, loc, *steps[s], ring->rank,
                      {q, kb, vb, out, lse, dout, rowPos, pos, scale, products},
                      dq ? &dqSum : nullptr, dkv ? &dkBlock : nullptr,
                      dkv ? &dvBlock : nullptr);
    } else {
      if (dq) {
        Value term =
            AttentionDqOp::create(b, loc, dq.getType(), q, kb, vb, out, lse,
                                  dout, rowPos, pos, scale, products);
        dqSum = dqSum ? add(b, loc, dqSum, term) : term;
      }
      if (dkv) {
        auto block = AttentionDkvOp::create(b, loc, kb.getType(), vb.getType(),
                                            q, kb, vb, out, lse, dout, rowPos,
                                            pos, scale, products);
        dkBlock = block.getDk();
        dvBlock = block.getDv();
      }
    }
    if (dkv) {
      Value offset = ring->offsetAt(b, loc, s);
      Value dkTerm = toScatter(dkPath->second, dkBlock, offset);
      Value dvTerm = toScatter(dvPath->second, dvBlock, offset);
      if (s > 0) {
        dkTerm = add(b, loc, ring->shift(b, loc, dkAcc), dkTerm);
        dvTerm = add(b, loc, ring->shift(b, loc, dvAcc), dvTerm);
      }
      dkAcc = dkTerm;
      dvAcc = dvTerm;
    }
  }
  if (dkv) {
    // The accumulators of the last step belong to the next member; an
    // uneven piece is its padded block's first rows.
    for (auto [path, acc] :
         {std::make_pair(&*dkPath, dkAcc), std::make_pair(&*dvPath, dvAcc)}) {
      Value home = ring->shift(b, loc, acc);
      Value result = path->first.op->getResult(0);
      if (!ring->keys.pieces.even())
        home = sliceAlong(b, loc, home, path->first.dim, b.getIndexAttr(0),
                          tensor::getMixedSize(b, loc, ring->keys.input(),
                                               ring->keys.pieces.dim));
      result.replaceAllUsesWith(home);
    }
    // The full gradients' paths, now unread.
    for (auto *path : {&*dkPath, &*dvPath}) {
      path->first.op->erase();
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

/// An attention op (forward or backward) over every key, not a ring, by
/// the calls its mask shows (`shownCalls` of the rank's queries in halves
/// against the keys in pieces alike), where its positions are a constant
/// split with the queries and the calls are at most three quarters of the
/// op's work: the zig-zag order's `2n + 1` of `4n` pieces. Fails
/// otherwise.
LogicalResult callsOverKeys(Operation *op, int64_t pieceRows) {
  auto fwd = dyn_cast<AttentionOp>(op);
  auto dq = dyn_cast<AttentionDqOp>(op);
  auto dkv = dyn_cast<AttentionDkvOp>(op);
  BackwardOperands x = fwd  ? backwardOperands(fwd)
                       : dq ? backwardOperands(dq)
                            : backwardOperands(dkv);
  std::optional<ChunkedPositions> at = chunkedPositions(x.qpos, x.kpos);
  if (!at)
    return failure();
  int64_t piece = at->block;
  if (at->members > 1) {
    // A rank's queries in halves, the keys in pieces alike.
    if (at->block % 2)
      return failure();
    piece = at->block / 2;
  } else if (pieceRows > 0 && !op->hasAttr("products")) {
    // One rank's attention whose queries and keys are at the same known
    // positions: in pieces of at least `pieceRows`, at most 8 a side. Not
    // one with `products`, a fused kernel's (the cuda target's), which
    // skips the tiles its mask hides itself: pieces would only add calls
    // and the combination of their rows.
    while (piece % 2 == 0 && piece / 2 >= pieceRows && at->block / piece < 8)
      piece /= 2;
  }
  if (piece == at->block)
    return failure();
  auto qType = cast<RankedTensorType>(x.q.getType());
  auto kType = cast<RankedTensorType>(x.k.getType());
  int64_t keys = static_cast<int64_t>(at->values.size());
  if (qType.getDimSize(2) != at->block || kType.getDimSize(2) != keys)
    return failure();
  std::optional<Calls> calls = shownCalls(
      *at, piece, [](int64_t) { return 0; }, keys);
  int64_t pairs = (at->block / piece) * (keys / piece);
  if (!calls || 4 * static_cast<int64_t>(calls->rows.size()) > 3 * pairs)
    return failure();
  OpBuilder b(op);
  Location loc = op->getLoc();
  Value rank = at->members > 1
                   ? Value(AxisIndexOp::create(b, loc, b.getIndexType(),
                                               at->mesh, at->axes))
                   : Value();
  if (fwd) {
    Value out, lse;
    attendByCalls(b, loc, fwd, *calls, rank, x.k, x.v, x.qpos, x.kpos, out,
                  lse);
    fwd.getOut().replaceAllUsesWith(out);
    fwd.getLse().replaceAllUsesWith(lse);
  } else if (dq) {
    Value grad;
    backwardByCalls(b, loc, *calls, rank, x, &grad, nullptr, nullptr);
    dq.getDq().replaceAllUsesWith(grad);
  } else {
    Value dk, dv;
    backwardByCalls(b, loc, *calls, rank, x, nullptr, &dk, &dv);
    dkv.getDk().replaceAllUsesWith(dk);
    dkv.getDv().replaceAllUsesWith(dv);
  }
  op->erase();
  return success();
}

/// Whether `dq` and `dkv` are the backward of one attention: the same
/// operands.
bool sameAttention(AttentionDqOp dq, AttentionDkvOp dkv) {
  return dq->getOperands() == dkv->getOperands() &&
         dq.getScaleAttr() == dkv.getScaleAttr() &&
         dq.getProductsAttr() == dkv.getProductsAttr();
}

/// Erases the ops of `block` that nothing reads and that have no effect,
/// and the gathers nothing reads any more (a gather is a collective every
/// rank of the group runs; each rank's program drops it alike).
void eraseUnread(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() &&
        (isa<AllGatherOp, ExchangeOp>(op) || wouldOpBeTriviallyDead(&op)))
      op.erase();
}

struct RingAttentionPass
    : mlir::shardx::impl::RingAttentionPassBase<RingAttentionPass> {
  using RingAttentionPassBase::RingAttentionPassBase;

  void runOnOperation() override {
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
    // A gather that an op which cannot run as a ring reads stays, so the
    // others that read it stay too: their rings would send its bytes again.
    DenseMap<Operation *, std::pair<SmallVector<Operation *, 2>, bool>> plans;
    SmallVector<Operation *> all;
    for (AttentionOp op : forwards)
      all.push_back(op);
    all.append(dqs.begin(), dqs.end());
    all.append(dkvs.begin(), dkvs.end());
    for (Operation *op : all)
      plans[op] = ringable(op, minBytes);
    for (bool again = true; again;) {
      again = false;
      llvm::SmallPtrSet<Operation *, 8> kept;
      for (Operation *op : all)
        if (!plans[op].second)
          kept.insert(plans[op].first.begin(), plans[op].first.end());
      for (Operation *op : all)
        if (plans[op].second &&
            llvm::any_of(plans[op].first,
                         [&](Operation *g) { return kept.contains(g); })) {
          plans[op].second = false;
          again = true;
        }
    }
    // Never a ring (min-bytes -1): each op by the calls its mask shows.
    if (minBytes < 0)
      for (auto &[op, plan] : plans)
        plan.second = false;
    auto ok = [&](Operation *op) { return op && plans.lookup(op).second; };
    llvm::SetVector<Block *> changed;
    // The ops run as rings (erased).
    llvm::SmallPtrSet<Operation *, 8> ringed;
    for (AttentionOp op : forwards) {
      Block *block = op->getBlock();
      if (ok(op) && succeeded(ringForward(op, minBytes))) {
        changed.insert(block);
        ringed.insert(op);
      }
    }
    for (AttentionDqOp dq : dqs) {
      AttentionDkvOp partner;
      for (AttentionDkvOp dkv : dkvs)
        if (!ringed.contains(dkv) && dq->getBlock() == dkv->getBlock() &&
            sameAttention(dq, dkv))
          partner = dkv;
      // Together where both can; else each alone (the keys' gradients may
      // not reach a reduce-scatter along the sequence).
      Block *block = dq->getBlock();
      if (!ok(dq))
        continue;
      if (ok(partner) && succeeded(ringBackward(dq, partner, minBytes))) {
        ringed.insert(partner);
        ringed.insert(dq);
        changed.insert(block);
      } else if (succeeded(ringBackward(dq, nullptr, minBytes))) {
        ringed.insert(dq);
        changed.insert(block);
      }
    }
    for (AttentionDkvOp dkv : dkvs) {
      if (ringed.contains(dkv) || !ok(dkv))
        continue;
      Block *block = dkv->getBlock();
      if (succeeded(ringBackward(nullptr, dkv, minBytes))) {
        ringed.insert(dkv);
        changed.insert(block);
      }
    }
    // The others, over every key: by the calls their masks show.
    for (Operation *op : all)
      if (!ringed.contains(op))
        (void)callsOverKeys(op, pieceRows);
    for (Block *block : changed)
      eraseUnread(*block);
  }
};

} // namespace
