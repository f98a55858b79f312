//===- ShardXToRuntime.cpp - ShardX collectives to runtime calls ----------===//
//
// Part of ShardX.
//
// Before bufferization, every ShardX collective on local tensors becomes
// tensor reshapes and transposes around one call of a flat runtime
// collective (`shardx_rt_cg_*`, lib/Runtime/CompiledCode.cpp): the runtime
// only moves contiguous buffers; the dim, stride and group order of each op
// are layout changes done here. One OpConversionPattern per op; a new
// collective adds its pattern to populateShardXToRuntimePatterns.
//
//===----------------------------------------------------------------------===//

#include "shardx/Conversion/ShardXToRuntime/ShardXToRuntime.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "RuntimeCalls.h"
#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/Exchange.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_CONVERTSHARDXTORUNTIMEPASS
#include "shardx/Conversion/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

//===----------------------------------------------------------------------===//
// Shared steps
//===----------------------------------------------------------------------===//

/// The common frame of the patterns: build with RuntimeCalls in front of the
/// op, replace its result with the value `lower` returns. `lower` emits its
/// own error at the op on failure.
template <typename OpT>
class CollectivePattern : public OpConversionPattern<OpT> {
public:
  using OpConversionPattern<OpT>::OpConversionPattern;
  using OpAdaptor = typename OpT::Adaptor;

  LogicalResult
  matchAndRewrite(OpT op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    RuntimeCalls rt(rewriter, cast<CollectiveOpInterface>(op.getOperation()));
    FailureOr<Value> result = lower(op, adaptor, rt);
    if (failed(result))
      return failure();
    rewriter.replaceOp(op, *result);
    return success();
  }

protected:
  virtual FailureOr<Value> lower(OpT op, OpAdaptor adaptor,
                                 RuntimeCalls &rt) const = 0;
};

/// The checks in front of the even (static) lowering of a dim-moving
/// collective; returns the group size.
FailureOr<int64_t> checkEven(CollectiveOpInterface op, Value in) {
  auto inType = cast<RankedTensorType>(in.getType());
  auto outType = cast<RankedTensorType>(op->getResult(0).getType());
  if (!inType.hasStaticShape() || !outType.hasStaticShape())
    return op->emitError("dynamic shapes in collectives are not supported by "
                         "the CPU back end yet");
  FailureOr<int64_t> n = op.getGroupSize();
  if (failed(n) || *n < 1)
    return op->emitError("unknown mesh");
  return n;
}

/// `shape` with dim `dim` viewed as `[stride, n, rest]` blocks.
SmallVector<int64_t> splitView(ArrayRef<int64_t> shape, int64_t dim,
                               int64_t stride, int64_t n) {
  SmallVector<int64_t> view(shape.begin(), shape.begin() + dim);
  view.push_back(stride);
  view.push_back(n);
  view.push_back(shape[dim] / (stride * n));
  view.append(shape.begin() + dim + 1, shape.end());
  return view;
}

/// The permutation bringing dim `from` of a rank-`rank` view to the front.
SmallVector<int64_t> toFront(int64_t from, int64_t rank) {
  SmallVector<int64_t> perm = {from};
  for (int64_t i = 0; i < rank; ++i)
    if (i != from)
      perm.push_back(i);
  return perm;
}

/// `[n, pre, s, b, post] -> [pre, s, n, b, post]`, then reshaped to
/// `outShape`: what the members sent, in group order per stride block.
Value interleaveReceived(RuntimeCalls &rt, Value received,
                         ArrayRef<int64_t> piece, int64_t dim, int64_t stride,
                         int64_t n, ArrayRef<int64_t> outShape) {
  SmallVector<int64_t> view = {n};
  view.append(piece.begin(), piece.begin() + dim);
  view.push_back(stride);
  view.push_back(piece[dim] / stride);
  view.append(piece.begin() + dim + 1, piece.end());
  SmallVector<int64_t> perm;
  for (int64_t i = 1; i <= dim + 1; ++i)
    perm.push_back(i);
  perm.push_back(0);
  for (int64_t i = dim + 2; i < static_cast<int64_t>(view.size()); ++i)
    perm.push_back(i);
  Value t = rt.transpose(rt.reshape(received, view), perm);
  return rt.reshape(t, outShape);
}

/// The elements per member of an uneven collective moving whole rows of
/// `dim`: `sizes[i]` rows of the other (static) dims each.
FailureOr<SmallVector<int64_t>> unevenCounts(Operation *op,
                                             RankedTensorType inType,
                                             int64_t dim, int64_t stride,
                                             ArrayRef<int64_t> sizes) {
  if (stride != 1)
    return op->emitError("uneven strided collectives are not supported by "
                         "the CPU back end");
  int64_t row = 1;
  for (int64_t d = 0; d < inType.getRank(); ++d) {
    if (d == dim)
      continue;
    if (inType.isDynamicDim(d))
      return op->emitError("uneven collective with another dynamic dim");
    row *= inType.getDimSize(d);
  }
  SmallVector<int64_t> counts;
  for (int64_t s : sizes)
    counts.push_back(s * row);
  return counts;
}

//===----------------------------------------------------------------------===//
// Shape-preserving collectives: one flat call
//===----------------------------------------------------------------------===//

// [P(op)] -> [R]: all_reduce_<T>(in, out, reduction, axes)
struct AllReduceLowering : CollectivePattern<AllReduceOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(AllReduceOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    return rt.flatCall(
        "all_reduce", in, cast<RankedTensorType>(in.getType()).getShape(),
        {rt.i32(getRuntimeReductionCode(op.getReduction()))}, rt.dynSizes(in));
  }
};

//===----------------------------------------------------------------------===//
// Asynchronous collectives: a start call, a wait call at the shardx.wait
//===----------------------------------------------------------------------===//

// all_reduce_start_<T>(in, out, reduction, axes) -> request, then at the
// wait: wait_<T>(request, in, out). The start's result becomes the output
// tensor made at the wait (its only user).
struct AllReduceStartLowering : CollectivePattern<AllReduceStartOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(AllReduceStartOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    return rt.flatCallAsync(
        "all_reduce", in, cast<RankedTensorType>(in.getType()).getShape(),
        {rt.i32(getRuntimeReductionCode(op.getReduction()))},
        *op->getUsers().begin(), rt.dynSizes(in));
  }
};

// The wait's work is done where its start was lowered: it is its operand.
struct WaitLowering : OpConversionPattern<WaitOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(WaitOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, adaptor.getPending());
    return success();
  }
};

// broadcast_<T>(in, out, root, axes)
struct BroadcastLowering : CollectivePattern<BroadcastOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(BroadcastOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    return rt.flatCall("broadcast", in,
                       cast<RankedTensorType>(in.getType()).getShape(),
                       {rt.i64(op.getRoot())}, rt.dynSizes(in));
  }
};

// [R] -> [P(op)]: partition_value_<T>(in, out, reduction, axes)
struct PartitionValueLowering : CollectivePattern<PartitionValueOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(PartitionValueOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    return rt.flatCall(
        "partition_value", in, cast<RankedTensorType>(in.getType()).getShape(),
        {rt.i32(getRuntimeReductionCode(op.getReduction()))}, rt.dynSizes(in));
  }
};

// permute_<T>(in, out, pairs, axes)
struct PermuteLowering : CollectivePattern<PermuteOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(PermuteOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    return rt.flatCall("permute", in,
                       cast<RankedTensorType>(in.getType()).getShape(),
                       {rt.int64Array(op.getPairs())}, rt.dynSizes(in));
  }
};

// The rank's index in the group: shardx_rt_cg_axis_index(axes).
struct AxisIndexLowering : CollectivePattern<AxisIndexOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(AxisIndexOp, OpAdaptor,
                         RuntimeCalls &rt) const override {
    return rt.groupIndex();
  }
};

//===----------------------------------------------------------------------===//
// Dim-moving collectives
//===----------------------------------------------------------------------===//

/// The wait of a `*_start` op (its only user), where its result is ready;
/// null for a synchronous collective.
Operation *waitPointOf(Operation *op) {
  if (isa<AllGatherStartOp, ReduceScatterStartOp>(op))
    return *op->getUsers().begin();
  return nullptr;
}

/// The flat runtime call of `op`: synchronous, or (with a `waitPoint`)
/// started here and waited for there. Leaves the builder where the output
/// is ready, for the steps that unpack it.
FailureOr<Value> callCollective(RuntimeCalls &rt, StringRef kind, Value in,
                                ArrayRef<int64_t> outShape,
                                ArrayRef<Value> extra, Operation *waitPoint,
                                ValueRange outDynSizes = {}) {
  if (!waitPoint)
    return rt.flatCall(kind, in, outShape, extra, outDynSizes);
  FailureOr<Value> out =
      rt.flatCallAsync(kind, in, outShape, extra, waitPoint, outDynSizes);
  rt.b.setInsertionPoint(waitPoint);
  return out;
}

// [S(d), R] -> [R, R]: all_gather_<T> into [n, local...], then each stride
// block's pieces in group order. Uneven (`sizes`): the dim moves to the
// front and all_gather_v_<T> runs on whole rows. all_gather_start: the
// same with the call started here and the unpacking at its wait.
template <typename OpT> struct AllGatherLowering : CollectivePattern<OpT> {
  using CollectivePattern<OpT>::CollectivePattern;
  using OpAdaptor = typename OpT::Adaptor;
  FailureOr<Value> lower(OpT op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    Operation *waitPoint = waitPointOf(op);
    if (std::optional<ArrayRef<int64_t>> sizes = op.getSizes())
      return lowerUneven(op, in, *sizes, rt, waitPoint);
    FailureOr<int64_t> n = checkEven(op, in);
    if (failed(n))
      return failure();
    ArrayRef<int64_t> local = cast<RankedTensorType>(in.getType()).getShape();
    SmallVector<int64_t> gathered = {*n};
    gathered.append(local.begin(), local.end());
    FailureOr<Value> g =
        callCollective(rt, "all_gather", in, gathered, {}, waitPoint);
    if (failed(g))
      return failure();
    return interleaveReceived(rt, *g, local, op.getDim(), op.getStride(), *n,
                              op.getType().getShape());
  }

  FailureOr<Value> lowerUneven(OpT op, Value in, ArrayRef<int64_t> sizes,
                               RuntimeCalls &rt, Operation *waitPoint) const {
    auto inType = cast<RankedTensorType>(in.getType());
    int64_t dim = op.getDim();
    FailureOr<SmallVector<int64_t>> counts =
        unevenCounts(op, inType, dim, op.getStride(), sizes);
    if (failed(counts))
      return failure();
    Value front = rt.moveDim(in, dim, false);
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(front.getType()).getShape());
    shape[0] = op.getType().getDimSize(dim);
    FailureOr<Value> g = callCollective(rt, "all_gather_v", front, shape,
                                        {rt.int64Array(*counts)}, waitPoint);
    if (failed(g))
      return failure();
    return rt.moveDim(*g, dim, true);
  }
};

// [P(op), R] -> [S(d), R]: [pre, s, n, b, post] -> [n, pre, s, b, post],
// then reduce_scatter_<T>. Uneven: reduce_scatter_v_<T> on whole rows.
// reduce_scatter_start: the same with the call started here and the
// unpacking at its wait.
template <typename OpT> struct ReduceScatterLowering : CollectivePattern<OpT> {
  using CollectivePattern<OpT>::CollectivePattern;
  using OpAdaptor = typename OpT::Adaptor;
  FailureOr<Value> lower(OpT op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    Operation *waitPoint = waitPointOf(op);
    if (std::optional<ArrayRef<int64_t>> sizes = op.getSizes())
      return lowerUneven(op, in, *sizes, rt, waitPoint);
    FailureOr<int64_t> n = checkEven(op, in);
    if (failed(n))
      return failure();
    int64_t dim = op.getDim();
    SmallVector<int64_t> view =
        splitView(cast<RankedTensorType>(in.getType()).getShape(), dim,
                  op.getStride(), *n);
    Value t = rt.transpose(rt.reshape(in, view),
                           toFront(dim + 1, static_cast<int64_t>(view.size())));
    return callCollective(rt, "reduce_scatter", t, op.getType().getShape(),
                          {rt.i32(getRuntimeReductionCode(op.getReduction()))},
                          waitPoint);
  }

  FailureOr<Value> lowerUneven(OpT op, Value in, ArrayRef<int64_t> sizes,
                               RuntimeCalls &rt, Operation *waitPoint) const {
    auto inType = cast<RankedTensorType>(in.getType());
    int64_t dim = op.getDim();
    FailureOr<SmallVector<int64_t>> counts =
        unevenCounts(op, inType, dim, op.getStride(), sizes);
    if (failed(counts))
      return failure();
    Value front = rt.moveDim(in, dim, false);
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(front.getType()).getShape());
    shape[0] = ShapedType::kDynamic;
    Value mine = rt.lookup(rt.groupIndex(), sizes);
    FailureOr<Value> r =
        callCollective(rt, "reduce_scatter_v", front, shape,
                       {rt.i32(getRuntimeReductionCode(op.getReduction())),
                        rt.int64Array(*counts)},
                       waitPoint, ValueRange{mine});
    if (failed(r))
      return failure();
    Value back = rt.moveDim(*r, dim, true);
    if (back.getType() != op.getType())
      back = tensor::CastOp::create(rt.b, rt.loc, op.getType(), back);
    return back;
  }
};

// [R] -> [S(d)] without communication: view dim as [stride, n, rest] and
// keep block [:, j, :], j the rank's group index. Uneven: the j-th run of
// `sizes`.
struct ChunkLowering : CollectivePattern<ChunkOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(ChunkOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    if (std::optional<ArrayRef<int64_t>> sizes = op.getSizes())
      return lowerUneven(op, in, *sizes, rt);
    FailureOr<int64_t> n = checkEven(op, in);
    if (failed(n))
      return failure();
    auto inType = cast<RankedTensorType>(in.getType());
    int64_t dim = op.getDim();
    SmallVector<int64_t> view =
        splitView(inType.getShape(), dim, op.getStride(), *n);
    Value t = rt.reshape(in, view);
    Value j = rt.groupIndex();
    OpBuilder &b = rt.b;
    SmallVector<OpFoldResult> offsets(view.size(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> lengths, strides(view.size(), b.getIndexAttr(1));
    for (int64_t v : view)
      lengths.push_back(b.getIndexAttr(v));
    offsets[dim + 1] = j;
    lengths[dim + 1] = b.getIndexAttr(1);
    SmallVector<int64_t> sliceShape = view;
    sliceShape[dim + 1] = 1;
    Value slice = tensor::ExtractSliceOp::create(
        b, rt.loc, RankedTensorType::get(sliceShape, inType.getElementType()),
        t, offsets, lengths, strides);
    return rt.reshape(slice, op.getType().getShape());
  }

  FailureOr<Value> lowerUneven(ChunkOp op, Value in, ArrayRef<int64_t> sizes,
                               RuntimeCalls &rt) const {
    auto inType = cast<RankedTensorType>(in.getType());
    int64_t dim = op.getDim();
    // A slice: other dims may be dynamic (uneven shards of another axis).
    if (op.getStride() != 1)
      return op.emitError("uneven strided collectives are not supported by "
                          "the CPU back end");
    SmallVector<int64_t> prefix;
    int64_t acc = 0;
    for (int64_t s : sizes) {
      prefix.push_back(acc);
      acc += s;
    }
    Value j = rt.groupIndex();
    Value offset = rt.lookup(j, prefix), length = rt.lookup(j, sizes);
    OpBuilder &b = rt.b;
    SmallVector<OpFoldResult> offsets(inType.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> lengths,
        strides(inType.getRank(), b.getIndexAttr(1));
    for (int64_t d = 0; d < inType.getRank(); ++d)
      lengths.push_back(
          d == dim ? OpFoldResult(length)
          : inType.isDynamicDim(d)
              ? OpFoldResult(
                    tensor::DimOp::create(b, rt.loc, in, d).getResult())
              : OpFoldResult(b.getIndexAttr(inType.getDimSize(d))));
    offsets[dim] = offset;
    SmallVector<int64_t> sliceShape(inType.getShape());
    sliceShape[dim] = ShapedType::kDynamic;
    Value slice = tensor::ExtractSliceOp::create(
        b, rt.loc, RankedTensorType::get(sliceShape, inType.getElementType()),
        in, offsets, lengths, strides);
    if (slice.getType() != op.getType())
      slice = tensor::CastOp::create(b, rt.loc, op.getType(), slice);
    return slice;
  }
};

// [S(i)] -> [S(j)]: send [.., ss, n, bs, ..] -> [n, .., ss, bs, ..],
// all_to_all_<T>, then receive [n, .., cs, bc, ..] -> [.., cs, n, bc, ..].
// Uneven (`sizes`, or a dynamic concat dim): all_to_all_v_<T>.
struct AllToAllLowering : CollectivePattern<AllToAllOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(AllToAllOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    Value in = adaptor.getInput();
    auto inType = cast<RankedTensorType>(in.getType());
    RankedTensorType outType = op.getType();
    int64_t sd = op.getSplitDim(), cd = op.getConcatDim();
    if (std::optional<ArrayRef<int64_t>> sizes = op.getSizes())
      return lowerUneven(op, in, *sizes, rt);
    if ((!inType.hasStaticShape() || !outType.hasStaticShape()) &&
        !inType.isDynamicDim(sd)) {
      // Uneven on the concat side only: equal split pieces.
      FailureOr<int64_t> n = op.getGroupSize();
      if (failed(n))
        return failure();
      SmallVector<int64_t> even;
      for (int64_t i = 0; i < *n; ++i)
        even.push_back(chunkInterval(inType.getDimSize(sd), *n, i).size);
      return lowerUneven(op, in, even, rt);
    }
    FailureOr<int64_t> n = checkEven(op, in);
    if (failed(n))
      return failure();
    ArrayRef<int64_t> local = inType.getShape();
    SmallVector<int64_t> view = splitView(local, sd, op.getSplitStride(), *n);
    Value send =
        rt.transpose(rt.reshape(in, view),
                     toFront(sd + 1, static_cast<int64_t>(view.size())));
    SmallVector<int64_t> piece(local.begin(), local.end());
    piece[sd] /= *n;
    SmallVector<int64_t> recvShape = {*n};
    recvShape.append(piece.begin(), piece.end());
    FailureOr<Value> r = rt.flatCall("all_to_all", send, recvShape, {});
    if (failed(r))
      return failure();
    return interleaveReceived(rt, *r, piece, cd, op.getConcatStride(), *n,
                              outType.getShape());
  }

  FailureOr<Value> lowerUneven(AllToAllOp op, Value in, ArrayRef<int64_t> sizes,
                               RuntimeCalls &rt) const {
    auto inType = cast<RankedTensorType>(in.getType());
    RankedTensorType outType = op.getType();
    if (op.getSplitStride() != 1 || op.getConcatStride() != 1)
      return op->emitError("uneven strided all_to_all is not supported by "
                           "the CPU back end");
    int64_t sd = op.getSplitDim(), cd = op.getConcatDim();
    FailureOr<int64_t> n = op.getGroupSize();
    if (failed(n))
      return failure();
    if (sd == cd || inType.isDynamicDim(sd) || outType.isDynamicDim(cd))
      return op->emitError("this uneven all_to_all is not supported by the "
                           "CPU back end");
    for (int64_t d = 0; d < inType.getRank(); ++d)
      if (d != cd && inType.isDynamicDim(d))
        return op->emitError("uneven all_to_all with several dynamic dims");
    SmallVector<int64_t> concatSizes;
    for (int64_t i = 0; i < *n; ++i)
      concatSizes.push_back(
          inType.isDynamicDim(cd)
              ? chunkInterval(outType.getDimSize(cd), *n, i).size
              : inType.getDimSize(cd));
    SmallVector<int64_t> inShape(inType.getShape());
    for (int64_t &d : inShape)
      if (ShapedType::isDynamic(d))
        d = -1;
    SmallVector<Value> outDyn;
    if (outType.isDynamicDim(sd))
      outDyn.push_back(rt.lookup(rt.groupIndex(), sizes));
    return rt.flatCall("all_to_all_v", in, outType.getShape(),
                       {rt.int64Array(inShape), rt.int64Array(sizes),
                        rt.int64Array(concatSizes), rt.i64(sd), rt.i64(cd)},
                       outDyn);
  }
};

// Any step given by its layouts (uneven, nested or strided shards): the
// runtime computes who holds what from exchange's descriptor; dynamic result
// sizes are this rank's target shard, asked of the runtime.
struct ExchangeLowering : CollectivePattern<ExchangeOp> {
  using CollectivePattern::CollectivePattern;
  FailureOr<Value> lower(ExchangeOp op, OpAdaptor adaptor,
                         RuntimeCalls &rt) const override {
    std::vector<int64_t> shape(op.getShape().begin(), op.getShape().end());
    std::vector<int64_t> desc = rt::encodeExchange(
        shape, op.getSource().getLayout(), op.getTarget().getLayout());
    Value descArray = rt.int64Array(desc);
    RankedTensorType outType = op.getType();
    OpBuilder &b = rt.b;
    SmallVector<Value> outDyn;
    for (int64_t d = 0; d < outType.getRank(); ++d) {
      if (!outType.isDynamicDim(d))
        continue;
      func::FuncOp fn =
          rt.declare("shardx_rt_cg_exchange_dim",
                     {descArray.getType(), b.getI64Type()}, {b.getI64Type()});
      auto call =
          func::CallOp::create(b, rt.loc, fn, ValueRange{descArray, rt.i64(d)});
      // Each rank's size, kept for the memory model (on meshes it visits).
      auto mesh =
          SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, op.getMeshAttr());
      std::vector<int64_t> meshShape;
      if (mesh)
        meshShape.assign(mesh.getShape().begin(), mesh.getShape().end());
      if (std::optional<int64_t> ranks = countMeshDevices(meshShape);
          mesh && ranks && *ranks <= kRankValueMaxRanks) {
        SmallVector<int64_t> sizes;
        for (const std::vector<int64_t> &at : allMeshCoords(meshShape))
          sizes.push_back(op.getTarget()
                              .getLayout()
                              .getLocalShard(meshShape, shape, at)
                              .shape[d]);
        call->setAttr(
            kRankValueAttr,
            b.getDictionaryAttr(
                {b.getNamedAttr("mesh_shape", mesh.getShapeAttr()),
                 b.getNamedAttr("values", b.getDenseI64ArrayAttr(sizes))}));
      }
      Value size = call.getResult(0);
      outDyn.push_back(
          arith::IndexCastOp::create(b, rt.loc, b.getIndexType(), size));
    }
    return rt.flatCall("exchange", adaptor.getInput(), outType.getShape(),
                       {descArray}, outDyn);
  }
};

// Rows with run-time counts (a dropless MoE's dispatch and combine):
// ragged_all_to_all_<T>(in, out, send_counts, recv_counts, row, axes),
// `row` the elements of one row. The runtime exchanges the counts, writes
// them to `recv_counts`, then moves only the counted rows. With counts the
// program gives (`recv_counts` operand), ragged_all_to_all_known_<T> with
// the same arguments reads them instead and moves only the rows.
struct RaggedAllToAllLowering : OpConversionPattern<RaggedAllToAllOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RaggedAllToAllOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RuntimeCalls rt(rewriter, cast<CollectiveOpInterface>(op.getOperation()));
    // The one check that can fail comes before anything is built (the
    // received counts' buffer, the counts' copies): a failed pattern
    // leaves the IR as it found it.
    RankedTensorType outType = op.getResult().getType();
    if (failed(rt.checkElementType(outType.getElementType())))
      return failure();
    // The elements of a row (the verifier keeps dims after 0 static).
    int64_t row = 1;
    for (int64_t d : outType.getShape().drop_front())
      row *= d;
    Value in = adaptor.getInput();
    if (Value given = adaptor.getRecvCounts()) {
      FailureOr<Value> out =
          rt.flatCall("ragged_all_to_all_known", in, outType.getShape(),
                      {rt.flatBuffer(adaptor.getSendCounts()),
                       rt.flatBuffer(given), rt.i64(row)});
      if (failed(out))
        return failure();
      rewriter.replaceOp(op, *out);
      return success();
    }
    RankedTensorType countsType = op.getReceivedCounts().getType();
    Value recv = memref::AllocOp::create(
        rewriter, rt.loc,
        MemRefType::get(countsType.getShape(), countsType.getElementType()));
    FailureOr<Value> out =
        rt.flatCall("ragged_all_to_all", in, outType.getShape(),
                    {rt.flatBuffer(adaptor.getSendCounts()),
                     rt.flatBuffer(recv), rt.i64(row)});
    if (failed(out))
      return failure();
    Value recvCounts = bufferization::ToTensorOp::create(
        rewriter, rt.loc, countsType, recv, /*restrict=*/true,
        /*writable=*/true);
    rewriter.replaceOp(op, {*out, recvCounts});
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// Any other ShardX op (a global-program op, `shardx.local_size`, an op a
/// pattern was not written for) is an error naming it. Matches only ops
/// without a pattern of their own, so a pattern's own error stands alone.
struct NoLoweringPattern : ConversionPattern {
  NoLoweringPattern(MLIRContext *context, llvm::StringSet<> lowered)
      : ConversionPattern(MatchAnyOpTypeTag(), /*benefit=*/0, context),
        lowered(std::move(lowered)) {}

  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value>,
                                ConversionPatternRewriter &) const override {
    if (!isa_and_nonnull<ShardXDialect>(op->getDialect()) || isa<MeshOp>(op) ||
        lowered.contains(op->getName().getStringRef()))
      return failure();
    return op->emitError("no CPU lowering for '") << op->getName() << "'";
  }

  llvm::StringSet<> lowered;
};

struct ConvertShardXToRuntimePass
    : mlir::shardx::impl::ConvertShardXToRuntimePassBase<
          ConvertShardXToRuntimePass> {
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    RewritePatternSet patterns(context);
    populateShardXToRuntimePatterns(patterns);
    llvm::StringSet<> lowered;
    for (const std::unique_ptr<RewritePattern> &p :
         patterns.getNativePatterns())
      if (std::optional<OperationName> root = p->getRootKind())
        lowered.insert(root->getStringRef());
    patterns.add<NoLoweringPattern>(context, std::move(lowered));
    ConversionTarget target(*context);
    configureShardXToRuntimeTarget(target);
    // A pattern that fails has said why at its op: the driver's "failed to
    // legalize" error there would only repeat it.
    llvm::DenseSet<Location> explained;
    ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Error)
        return failure();
      if (explained.contains(diag.getLocation()) &&
          StringRef(diag.str()).starts_with("failed to legalize"))
        return success();
      explained.insert(diag.getLocation());
      return failure();
    });
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::shardx::populateShardXToRuntimePatterns(
    RewritePatternSet &patterns) {
  patterns
      .add<AllGatherLowering<AllGatherOp>, AllGatherLowering<AllGatherStartOp>,
           AllReduceLowering, AllReduceStartLowering, AllToAllLowering,
           AxisIndexLowering, BroadcastLowering, ChunkLowering,
           ExchangeLowering, PartitionValueLowering, PermuteLowering,
           RaggedAllToAllLowering, ReduceScatterLowering<ReduceScatterOp>,
           ReduceScatterLowering<ReduceScatterStartOp>, WaitLowering>(
          patterns.getContext());
}

void mlir::shardx::configureShardXToRuntimeTarget(ConversionTarget &target) {
  // ShardX's computations stay (shardx-decompose-for-codegen writes them
  // as linalg ops); its other ops are lowered.
  target.addDynamicallyLegalDialect<ShardXDialect>(isShardXComputation);
  target.addLegalOp<MeshOp>();
  target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
}
