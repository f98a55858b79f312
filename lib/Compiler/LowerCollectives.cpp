//===- LowerCollectives.cpp - ShardX collectives to runtime calls ---------===//
//
// Part of ShardX.
//
// Before bufferization, every ShardX collective on local tensors becomes
// tensor reshapes and transposes around one call of a flat runtime
// collective (`shardx_rt_cg_*`, lib/Runtime/CompiledCode.cpp): the runtime
// only moves contiguous buffers; the dim, stride and group order of each op
// are layout changes done here.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/Exchange.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// The runtime C ABI's code of a reduction (SHARDX_RT_SUM, ...): the same
/// numbering as ReductionKind and ReduceOp (static_asserts in ShardXAttrs.cpp
/// and CApi.cpp).
int32_t reduceCode(ReductionKind kind) {
  return static_cast<int32_t>(toReduceOp(kind));
}

class Lowering {
public:
  Lowering(ModuleOp module) : module(module), b(module.getContext()) {}

  LogicalResult run();

private:
  FailureOr<std::string> suffix(Operation *op, Type elt) {
    if (elt.isF32())
      return std::string("f32");
    if (elt.isF64())
      return std::string("f64");
    if (elt.isInteger(32))
      return std::string("i32");
    if (elt.isInteger(64))
      return std::string("i64");
    op->emitError("collectives on ") << elt << " are not supported by the CPU "
                                     << "runtime (f32, f64, i32, i64; i1 "
                                     << "except in reductions)";
    return failure();
  }

  MemRefType dyn1D(Type elt) {
    return MemRefType::get({ShapedType::kDynamic}, elt,
                           StridedLayoutAttr::get(b.getContext(),
                                                  ShapedType::kDynamic,
                                                  {ShapedType::kDynamic}));
  }

  func::FuncOp declare(StringRef name, TypeRange args, TypeRange results) {
    if (auto fn = module.lookupSymbol<func::FuncOp>(name))
      return fn;
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(module.getBody());
    auto fn = func::FuncOp::create(b, module.getLoc(), name,
                                   b.getFunctionType(args, results));
    fn.setPrivate();
    return fn;
  }

  /// A contiguous 1-D memref holding `t` (a copy: the call reads raw memory).
  Value contiguous(Location loc, Value t) {
    auto type = cast<RankedTensorType>(t.getType());
    SmallVector<int64_t> dynStrides(type.getRank(), ShapedType::kDynamic);
    auto strided = MemRefType::get(
        type.getShape(), type.getElementType(),
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               dynStrides));
    Value buffer =
        bufferization::ToBufferOp::create(b, loc, strided, t, /*readOnly=*/true);
    Value copy = memref::AllocOp::create(
        b, loc, MemRefType::get(type.getShape(), type.getElementType()),
        dynSizes(loc, t));
    memref::CopyOp::create(b, loc, buffer, copy);
    return flat(loc, copy);
  }

  /// The dynamic sizes of tensor `t` (tensor.dim of each dynamic dim).
  SmallVector<Value> dynSizes(Location loc, Value t) {
    auto type = cast<RankedTensorType>(t.getType());
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        sizes.push_back(tensor::DimOp::create(b, loc, t, d));
    return sizes;
  }

  Value cstIndex(Location loc, int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  }

  /// This rank's index in the group over `axes`.
  Value groupIndex(Location loc, ArrayRef<int64_t> axes) {
    Value arr = int64Array(loc, axes);
    func::FuncOp fn = declare("shardx_rt_cg_axis_index", {arr.getType()},
                              {b.getI64Type()});
    Value j = func::CallOp::create(b, loc, fn, ValueRange{arr}).getResult(0);
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), j);
  }

  /// `table[j]` for an index value j (a select chain; tables are small).
  Value lookup(Location loc, Value j, ArrayRef<int64_t> table) {
    Value r = cstIndex(loc, table[0]);
    for (auto [i, v] : llvm::enumerate(table)) {
      Value hit = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j,
                                        cstIndex(loc, i));
      r = arith::SelectOp::create(b, loc, hit, cstIndex(loc, v), r);
    }
    return r;
  }

  /// Moves dim `dim` of `t` to the front (or back with `inverse`).
  Value moveDim(Location loc, Value t, int64_t dim, bool inverse) {
    int64_t rank = cast<RankedTensorType>(t.getType()).getRank();
    SmallVector<int64_t> perm;
    if (!inverse) {
      perm.push_back(dim);
      for (int64_t i = 0; i < rank; ++i)
        if (i != dim)
          perm.push_back(i);
    } else {
      for (int64_t i = 1; i <= dim; ++i)
        perm.push_back(i);
      perm.push_back(0);
      for (int64_t i = dim + 1; i < rank; ++i)
        perm.push_back(i);
    }
    return transpose(loc, t, perm);
  }

  /// `m` (identity layout) as memref<?xT, strided<[?], offset: ?>>.
  Value flat(Location loc, Value m) {
    auto type = cast<MemRefType>(m.getType());
    Value one;
    if (type.getRank() == 0) {
      one = memref::ExpandShapeOp::create(
          b, loc, MemRefType::get({1}, type.getElementType()), m,
          ArrayRef<ReassociationIndices>{});
    } else {
      ReassociationIndices all;
      for (int64_t i = 0; i < type.getRank(); ++i)
        all.push_back(i);
      one = memref::CollapseShapeOp::create(b, loc, m,
                                            ArrayRef<ReassociationIndices>{all});
    }
    return memref::CastOp::create(b, loc, dyn1D(type.getElementType()), one);
  }

  Value int64Array(Location loc, ArrayRef<int64_t> values) {
    auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                      b.getI64Type());
    Value cst = arith::ConstantOp::create(
        b, loc, DenseIntElementsAttr::get(type, values));
    auto memType = MemRefType::get(type.getShape(), b.getI64Type());
    Value buffer =
        bufferization::ToBufferOp::create(b, loc, memType, cst, true);
    return memref::CastOp::create(b, loc, dyn1D(b.getI64Type()), buffer);
  }

  /// Calls `shardx_rt_cg_<kind>_<suffix>(in, out, extra..., axes)` with a
  /// fresh output of `outShape` and returns it as a tensor.
  FailureOr<Value> flatCall(Operation *op, StringRef kind, Value in,
                            ArrayRef<int64_t> outShape,
                            ArrayRef<Value> extra, ArrayRef<int64_t> axes,
                            ValueRange outDynSizes = {}) {
    Location loc = op->getLoc();
    auto inType = cast<RankedTensorType>(in.getType());
    Type elt = inType.getElementType();
    // Booleans (masks) move as i32; a reduction of booleans stays an error.
    bool reduces = kind == "all_reduce" || kind == "reduce_scatter" ||
                   kind == "partition_value";
    if (elt.isInteger(1) && !reduces) {
      FailureOr<Value> wide =
          flatCall(op, kind, castElements(loc, in, b.getI32Type()), outShape,
                   extra, axes, outDynSizes);
      if (failed(wide))
        return failure();
      return castElements(loc, *wide, elt);
    }
    FailureOr<std::string> sfx = suffix(op, elt);
    if (failed(sfx))
      return failure();
    Value inFlat = contiguous(loc, in);
    auto outMemType = MemRefType::get(outShape, elt);
    Value out = memref::AllocOp::create(b, loc, outMemType, outDynSizes);
    Value outFlat = flat(loc, out);
    SmallVector<Value> args = {inFlat, outFlat};
    args.append(extra.begin(), extra.end());
    args.push_back(int64Array(loc, axes));
    SmallVector<Type> types;
    for (Value a : args)
      types.push_back(a.getType());
    func::FuncOp fn =
        declare(("shardx_rt_cg_" + kind + "_" + *sfx).str(), types, {});
    func::CallOp::create(b, loc, fn, args);
    return Value(bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get(outShape, elt), out, /*restrict=*/true,
        /*writable=*/true));
  }

  /// `t` with its integer elements zero-extended or truncated to `elt`.
  Value castElements(Location loc, Value t, Type elt) {
    auto type = cast<RankedTensorType>(t.getType());
    SmallVector<Value> dyn;
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (type.isDynamicDim(i))
        dyn.push_back(tensor::DimOp::create(b, loc, t, i));
    Value init = tensor::EmptyOp::create(b, loc, type.getShape(), elt, dyn);
    bool extend = elt.getIntOrFloatBitWidth() >
                  type.getElementType().getIntOrFloatBitWidth();
    return linalg::MapOp::create(
               b, loc, ValueRange{t}, init,
               [&](OpBuilder &nb, Location nl, ValueRange args) {
                 Value v = extend
                               ? arith::ExtUIOp::create(nb, nl, elt, args[0])
                                     .getResult()
                               : arith::TruncIOp::create(nb, nl, elt, args[0])
                                     .getResult();
                 linalg::YieldOp::create(nb, nl, v);
               })
        ->getResult(0);
  }

  Value reshape(Location loc, Value t, ArrayRef<int64_t> shape) {
    auto type = cast<RankedTensorType>(t.getType());
    if (type.getShape() == shape)
      return t;
    auto oneD = RankedTensorType::get({type.getNumElements()},
                                      type.getElementType());
    Value flatT = t;
    if (type.getRank() != 1) {
      ReassociationIndices all;
      for (int64_t i = 0; i < type.getRank(); ++i)
        all.push_back(i);
      flatT = tensor::CollapseShapeOp::create(
          b, loc, oneD, t,
          type.getRank() ? ArrayRef<ReassociationIndices>{all}
                         : ArrayRef<ReassociationIndices>{});
    }
    auto target = RankedTensorType::get(shape, type.getElementType());
    if (shape.size() == 1)
      return flatT;
    ReassociationIndices all;
    for (size_t i = 0; i < shape.size(); ++i)
      all.push_back(i);
    return tensor::ExpandShapeOp::create(
        b, loc, target, flatT,
        shape.empty() ? ArrayRef<ReassociationIndices>{}
                      : ArrayRef<ReassociationIndices>{all});
  }

  Value transpose(Location loc, Value t, ArrayRef<int64_t> perm) {
    bool identity = true;
    for (auto [i, p] : llvm::enumerate(perm))
      identity &= static_cast<int64_t>(i) == p;
    if (identity)
      return t;
    auto type = cast<RankedTensorType>(t.getType());
    SmallVector<int64_t> shape;
    SmallVector<Value> dyn;
    for (int64_t p : perm) {
      shape.push_back(type.getDimSize(p));
      if (type.isDynamicDim(p))
        dyn.push_back(tensor::DimOp::create(b, loc, t, p));
    }
    Value init =
        tensor::EmptyOp::create(b, loc, shape, type.getElementType(), dyn);
    return linalg::TransposeOp::create(b, loc, t, init, perm)->getResult(0);
  }

  int64_t groupSize(Operation *op, ArrayRef<int64_t> axes) {
    auto meshRef = op->getAttrOfType<FlatSymbolRefAttr>("mesh");
    MeshOp mesh = lookupMesh(op, meshRef);
    int64_t n = 1;
    if (!mesh)
      return -1;
    for (int64_t a : axes)
      n *= mesh.getShape()[a];
    return n;
  }

  Value i32(Location loc, int64_t v) {
    return arith::ConstantIntOp::create(b, loc, v, 32);
  }
  Value i64(Location loc, int64_t v) {
    return arith::ConstantIntOp::create(b, loc, v, 64);
  }

  FailureOr<Value> lower(Operation *op);
  LogicalResult lowerAsync(AllReduceStartOp start);
  FailureOr<Value> lowerExchange(ExchangeOp op);
  FailureOr<Value> lowerUneven(Operation *op, ArrayRef<int64_t> sizes);

  ModuleOp module;
  OpBuilder b;
};

FailureOr<Value> Lowering::lower(Operation *op) {
  Location loc = op->getLoc();
  b.setInsertionPoint(op);
  if (auto ex = dyn_cast<ExchangeOp>(op))
    return lowerExchange(ex);
  if (auto sizesAttr = op->getAttrOfType<DenseI64ArrayAttr>("sizes"))
    return lowerUneven(op, sizesAttr.asArrayRef());
  if (auto ai = dyn_cast<AxisIndexOp>(op))
    return groupIndex(loc, ai.getAxes());
  Value in = op->getOperand(0);
  auto inType = cast<RankedTensorType>(in.getType());
  auto outType = cast<RankedTensorType>(op->getResult(0).getType());
  // Flat collectives keep the shape: dynamic (uneven) shapes are fine.
  if (auto ar = dyn_cast<AllReduceOp>(op))
    return flatCall(op, "all_reduce", in, inType.getShape(),
                    {i32(loc, reduceCode(ar.getReduction()))}, ar.getAxes(),
                    dynSizes(loc, in));
  if (auto bc = dyn_cast<BroadcastOp>(op))
    return flatCall(op, "broadcast", in, inType.getShape(),
                    {i64(loc, bc.getRoot())}, bc.getAxes(), dynSizes(loc, in));
  if (auto pv = dyn_cast<PartitionValueOp>(op))
    return flatCall(op, "partition_value", in, inType.getShape(),
                    {i32(loc, reduceCode(pv.getReduction()))}, pv.getAxes(),
                    dynSizes(loc, in));
  if (auto pm = dyn_cast<PermuteOp>(op))
    return flatCall(op, "permute", in, inType.getShape(),
                    {int64Array(loc, pm.getPairs())}, pm.getAxes(),
                    dynSizes(loc, in));
  if (auto a2a = dyn_cast<AllToAllOp>(op);
      a2a && (!inType.hasStaticShape() || !outType.hasStaticShape()) &&
      !inType.isDynamicDim(a2a.getSplitDim())) {
    // Uneven on the concat side only: equal split pieces.
    int64_t n = groupSize(op, a2a.getAxes());
    SmallVector<int64_t> even;
    for (int64_t i = 0; i < n; ++i)
      even.push_back(
          ::shardx::chunkInterval(inType.getDimSize(a2a.getSplitDim()), n, i)
              .size);
    return lowerUneven(op, even);
  }
  if (!inType.hasStaticShape() || !outType.hasStaticShape())
    return op->emitError("dynamic shapes in collectives are not supported by "
                         "the CPU back end yet"),
           failure();
  ArrayRef<int64_t> L = inType.getShape();
  if (auto ar = dyn_cast<AllReduceOp>(op))
    return flatCall(op, "all_reduce", in, L,
                    {i32(loc, reduceCode(ar.getReduction()))}, ar.getAxes());
  if (auto bc = dyn_cast<BroadcastOp>(op))
    return flatCall(op, "broadcast", in, L, {i64(loc, bc.getRoot())},
                    bc.getAxes());
  if (auto pv = dyn_cast<PartitionValueOp>(op))
    return flatCall(op, "partition_value", in, L,
                    {i32(loc, reduceCode(pv.getReduction()))}, pv.getAxes());
  if (auto pm = dyn_cast<PermuteOp>(op))
    return flatCall(op, "permute", in, L, {int64Array(loc, pm.getPairs())},
                    pm.getAxes());
  if (auto axesAttr = op->getAttrOfType<DenseI64ArrayAttr>("axes"))
    if (groupSize(op, axesAttr.asArrayRef()) < 1)
      return op->emitError("unknown mesh"), failure();
  if (auto ag = dyn_cast<AllGatherOp>(op)) {
    int64_t n = groupSize(op, ag.getAxes());
    int64_t dim = ag.getDim(), s = ag.getStride();
    SmallVector<int64_t> gathered = {n};
    gathered.append(L.begin(), L.end());
    FailureOr<Value> g = flatCall(op, "all_gather", in, gathered, {},
                                  ag.getAxes());
    if (failed(g))
      return failure();
    // [n, pre, s, b, post] -> [pre, s, n, b, post] -> result.
    SmallVector<int64_t> view = {n};
    view.append(L.begin(), L.begin() + dim);
    view.push_back(s);
    view.push_back(L[dim] / s);
    view.append(L.begin() + dim + 1, L.end());
    SmallVector<int64_t> perm;
    for (int64_t i = 1; i <= dim + 1; ++i)
      perm.push_back(i);
    perm.push_back(0);
    for (int64_t i = dim + 2; i < static_cast<int64_t>(view.size()); ++i)
      perm.push_back(i);
    Value t = transpose(loc, reshape(loc, *g, view), perm);
    return reshape(loc, t, outType.getShape());
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
    int64_t n = groupSize(op, rs.getAxes());
    int64_t dim = rs.getDim(), s = rs.getStride();
    // [pre, s, n, b, post] -> [n, pre, s, b, post].
    SmallVector<int64_t> view(L.begin(), L.begin() + dim);
    view.push_back(s);
    view.push_back(n);
    view.push_back(L[dim] / (s * n));
    view.append(L.begin() + dim + 1, L.end());
    SmallVector<int64_t> perm = {dim + 1};
    for (int64_t i = 0; i < static_cast<int64_t>(view.size()); ++i)
      if (i != dim + 1)
        perm.push_back(i);
    Value t = transpose(loc, reshape(loc, in, view), perm);
    return flatCall(op, "reduce_scatter", t, outType.getShape(),
                    {i32(loc, reduceCode(rs.getReduction()))}, rs.getAxes());
  }
  if (auto a2a = dyn_cast<AllToAllOp>(op)) {
    int64_t n = groupSize(op, a2a.getAxes());
    int64_t sd = a2a.getSplitDim(), cd = a2a.getConcatDim();
    int64_t ss = a2a.getSplitStride(), cs = a2a.getConcatStride();
    // Send: [.., ss, n, bs, ..] -> [n, .., ss, bs, ..].
    SmallVector<int64_t> view(L.begin(), L.begin() + sd);
    view.push_back(ss);
    view.push_back(n);
    view.push_back(L[sd] / (ss * n));
    view.append(L.begin() + sd + 1, L.end());
    SmallVector<int64_t> perm = {sd + 1};
    for (int64_t i = 0; i < static_cast<int64_t>(view.size()); ++i)
      if (i != sd + 1)
        perm.push_back(i);
    Value send = transpose(loc, reshape(loc, in, view), perm);
    SmallVector<int64_t> piece(L.begin(), L.end());
    piece[sd] /= n;
    SmallVector<int64_t> recvShape = {n};
    recvShape.append(piece.begin(), piece.end());
    FailureOr<Value> r =
        flatCall(op, "all_to_all", send, recvShape, {}, a2a.getAxes());
    if (failed(r))
      return failure();
    // Receive: [n, .., cs, bc, ..] -> [.., cs, n, bc, ..] -> result.
    SmallVector<int64_t> rview = {n};
    rview.append(piece.begin(), piece.begin() + cd);
    rview.push_back(cs);
    rview.push_back(piece[cd] / cs);
    rview.append(piece.begin() + cd + 1, piece.end());
    SmallVector<int64_t> rperm;
    for (int64_t i = 1; i <= cd + 1; ++i)
      rperm.push_back(i);
    rperm.push_back(0);
    for (int64_t i = cd + 2; i < static_cast<int64_t>(rview.size()); ++i)
      rperm.push_back(i);
    Value t = transpose(loc, reshape(loc, *r, rview), rperm);
    return reshape(loc, t, outType.getShape());
  }
  if (auto chunk = dyn_cast<ChunkOp>(op)) {
    int64_t n = groupSize(op, chunk.getAxes());
    int64_t dim = chunk.getDim(), s = chunk.getStride();
    SmallVector<int64_t> view(L.begin(), L.begin() + dim);
    view.push_back(s);
    view.push_back(n);
    view.push_back(L[dim] / (s * n));
    view.append(L.begin() + dim + 1, L.end());
    Value t = reshape(loc, in, view);
    Value ji = groupIndex(loc, chunk.getAxes());
    SmallVector<OpFoldResult> offsets(view.size(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes, strides(view.size(), b.getIndexAttr(1));
    for (int64_t v : view)
      sizes.push_back(b.getIndexAttr(v));
    offsets[dim + 1] = ji;
    sizes[dim + 1] = b.getIndexAttr(1);
    SmallVector<int64_t> sliceShape = view;
    sliceShape[dim + 1] = 1;
    Value slice = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(sliceShape, inType.getElementType()), t,
        offsets, sizes, strides);
    return reshape(loc, slice, outType.getShape());
  }
  return op->emitError("no CPU lowering for '") << op->getName() << "'",
         failure();
}

/// A step given by its layouts: the runtime computes who holds what, so
/// every local size, uneven or strided, is exact. Dynamic result sizes are
/// this rank's target shard, asked of the runtime.
FailureOr<Value> Lowering::lowerExchange(ExchangeOp op) {
  Location loc = op.getLoc();
  std::vector<int64_t> shape(op.getShape().begin(), op.getShape().end());
  std::vector<int64_t> desc = ::shardx::rt::encodeExchange(
      shape, op.getSource().getLayout(), op.getTarget().getLayout());
  Value descArray = int64Array(loc, desc);
  auto outType = cast<RankedTensorType>(op.getType());
  SmallVector<Value> outDyn;
  for (int64_t d = 0; d < outType.getRank(); ++d) {
    if (!outType.isDynamicDim(d))
      continue;
    func::FuncOp fn =
        declare("shardx_rt_cg_exchange_dim",
                {descArray.getType(), b.getI64Type()}, {b.getI64Type()});
    Value size = func::CallOp::create(b, loc, fn,
                                      ValueRange{descArray, i64(loc, d)})
                     .getResult(0);
    outDyn.push_back(
        arith::IndexCastOp::create(b, loc, b.getIndexType(), size));
  }
  return flatCall(op, "exchange", op.getInput(), outType.getShape(),
                  {descArray}, op.getAxes(), outDyn);
}

/// Collectives with explicit per-member sizes (uneven shards, stride 1):
/// the dim moves to the front, the runtime's variable-count collective runs
/// on whole rows, the dim moves back.
FailureOr<Value> Lowering::lowerUneven(Operation *op, ArrayRef<int64_t> sizes) {
  Location loc = op->getLoc();
  if (op->getAttrOfType<IntegerAttr>("stride") &&
      op->getAttrOfType<IntegerAttr>("stride").getInt() != 1)
    return op->emitError("uneven strided collectives are not supported by "
                         "the CPU back end"),
           failure();
  Value in = op->getOperand(0);
  auto inType = cast<RankedTensorType>(in.getType());
  auto outType = cast<RankedTensorType>(op->getResult(0).getType());
  int64_t dim = op->getAttrOfType<IntegerAttr>("dim")
                    ? op->getAttrOfType<IntegerAttr>("dim").getInt()
                    : 0;
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
  if (auto a2a = dyn_cast<AllToAllOp>(op)) {
    if (a2a.getSplitStride() != 1 || a2a.getConcatStride() != 1)
      return op->emitError("uneven strided all_to_all is not supported by "
                           "the CPU back end"),
             failure();
    int64_t sd = a2a.getSplitDim(), cd = a2a.getConcatDim();
    int64_t n = groupSize(op, axes);
    if (sd == cd || inType.isDynamicDim(sd) || outType.isDynamicDim(cd))
      return op->emitError("this uneven all_to_all is not supported by the "
                           "CPU back end"),
             failure();
    for (int64_t d = 0; d < inType.getRank(); ++d)
      if (d != cd && inType.isDynamicDim(d))
        return op->emitError("uneven all_to_all with several dynamic dims"),
               failure();
    SmallVector<int64_t> concatSizes;
    for (int64_t i = 0; i < n; ++i)
      concatSizes.push_back(
          inType.isDynamicDim(cd)
              ? ::shardx::chunkInterval(outType.getDimSize(cd), n, i).size
              : inType.getDimSize(cd));
    SmallVector<int64_t> inShape(inType.getShape());
    for (int64_t &d : inShape)
      if (ShapedType::isDynamic(d))
        d = -1;
    SmallVector<Value> outDyn;
    if (outType.isDynamicDim(sd))
      outDyn.push_back(lookup(loc, groupIndex(loc, axes), sizes));
    FailureOr<Value> r = flatCall(
        op, "all_to_all_v", in, outType.getShape(),
        {int64Array(loc, inShape), int64Array(loc, sizes),
         int64Array(loc, concatSizes), i64(loc, sd), i64(loc, cd)},
        axes, outDyn);
    return r;
  }
  // Elements per row of the moved dim.
  int64_t row = 1;
  for (int64_t d = 0; d < inType.getRank(); ++d)
    if (d != dim) {
      if (inType.isDynamicDim(d))
        return op->emitError("uneven collective with another dynamic dim"),
               failure();
      row *= inType.getDimSize(d);
    }
  SmallVector<int64_t> counts;
  for (int64_t s : sizes)
    counts.push_back(s * row);
  if (auto ag = dyn_cast<AllGatherOp>(op)) {
    Value front = moveDim(loc, in, dim, false);
    auto frontType = cast<RankedTensorType>(front.getType());
    SmallVector<int64_t> shape(frontType.getShape());
    shape[0] = outType.getDimSize(dim);
    FailureOr<Value> g = flatCall(op, "all_gather_v", front, shape,
                                  {int64Array(loc, counts)}, ag.getAxes());
    if (failed(g))
      return failure();
    return moveDim(loc, *g, dim, true);
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
    Value front = moveDim(loc, in, dim, false);
    auto frontType = cast<RankedTensorType>(front.getType());
    SmallVector<int64_t> shape(frontType.getShape());
    shape[0] = ShapedType::kDynamic;
    Value mine = lookup(loc, groupIndex(loc, axes), sizes);
    FailureOr<Value> r = flatCall(
        op, "reduce_scatter_v", front, shape,
        {i32(loc, reduceCode(rs.getReduction())), int64Array(loc, counts)},
        rs.getAxes(), ValueRange{mine});
    if (failed(r))
      return failure();
    Value back = moveDim(loc, *r, dim, true);
    if (back.getType() != outType)
      back = tensor::CastOp::create(b, loc, outType, back);
    return back;
  }
  if (auto chunk = dyn_cast<ChunkOp>(op)) {
    SmallVector<int64_t> prefix;
    int64_t acc = 0;
    for (int64_t s : sizes) {
      prefix.push_back(acc);
      acc += s;
    }
    Value j = groupIndex(loc, axes);
    Value offset = lookup(loc, j, prefix), length = lookup(loc, j, sizes);
    SmallVector<OpFoldResult> offsets(inType.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> lengths, strides(inType.getRank(),
                                               b.getIndexAttr(1));
    for (int64_t d = 0; d < inType.getRank(); ++d)
      lengths.push_back(d == dim ? OpFoldResult(length)
                                 : OpFoldResult(b.getIndexAttr(
                                       inType.getDimSize(d))));
    offsets[dim] = offset;
    SmallVector<int64_t> sliceShape(inType.getShape());
    sliceShape[dim] = ShapedType::kDynamic;
    Value slice = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(sliceShape, inType.getElementType()), in,
        offsets, lengths, strides);
    if (slice.getType() != outType)
      slice = tensor::CastOp::create(b, loc, outType, slice);
    return slice;
  }
  return op->emitError("uneven '") << op->getName()
                                   << "' is not supported by the CPU back end",
         failure();
}

/// all_reduce_start + wait -> a call that starts the all_reduce on a copy of
/// the operand into a fresh buffer, and at the wait a call that waits for it
/// (it takes both buffers, so that they live until then) and the buffer as
/// the result. Element types the runtime does not move (i1) run the
/// synchronous call at the start instead.
LogicalResult Lowering::lowerAsync(AllReduceStartOp start) {
  auto wait = cast<WaitOp>(*start->getUsers().begin());
  Location loc = start.getLoc();
  b.setInsertionPoint(start);
  Value in = start.getInput();
  auto inType = cast<RankedTensorType>(in.getType());
  Type elt = inType.getElementType();
  Value result;
  if (elt.isInteger(1)) {
    FailureOr<Value> v =
        flatCall(start, "all_reduce", in, inType.getShape(),
                 {i32(loc, reduceCode(start.getReduction()))}, start.getAxes(),
                 dynSizes(loc, in));
    if (failed(v))
      return failure();
    result = *v;
  } else {
    FailureOr<std::string> sfx = suffix(start, elt);
    if (failed(sfx))
      return failure();
    Value inFlat = contiguous(loc, in);
    Value out = memref::AllocOp::create(
        b, loc, MemRefType::get(inType.getShape(), elt), dynSizes(loc, in));
    Value outFlat = flat(loc, out);
    SmallVector<Value> args = {inFlat, outFlat,
                               i32(loc, reduceCode(start.getReduction())),
                               int64Array(loc, start.getAxes())};
    func::FuncOp startFn =
        declare("shardx_rt_cg_all_reduce_start_" + *sfx,
                ValueRange(args).getTypes(), {b.getI64Type()});
    Value request =
        func::CallOp::create(b, loc, startFn, args).getResult(0);
    b.setInsertionPoint(wait);
    SmallVector<Value> waitArgs = {request, inFlat, outFlat};
    func::FuncOp waitFn = declare("shardx_rt_cg_wait_" + *sfx,
                                  ValueRange(waitArgs).getTypes(), {});
    func::CallOp::create(b, wait.getLoc(), waitFn, waitArgs);
    result = bufferization::ToTensorOp::create(b, wait.getLoc(), inType, out,
                                               /*restrict=*/true,
                                               /*writable=*/true);
  }
  wait.getResult().replaceAllUsesWith(result);
  wait->erase();
  start->erase();
  return success();
}

LogicalResult Lowering::run() {
  SmallVector<AllReduceStartOp> starts;
  module.walk([&](AllReduceStartOp op) { starts.push_back(op); });
  for (AllReduceStartOp start : starts)
    if (failed(lowerAsync(start)))
      return failure();
  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, PermuteOp,
            BroadcastOp, ChunkOp, PartitionValueOp, AxisIndexOp, ExchangeOp>(
            op))
      ops.push_back(op);
    else if (op->getDialect() &&
             op->getDialect()->getNamespace() == "shardx" &&
             !isa<MeshOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    FailureOr<Value> v = lower(op);
    if (failed(v))
      return failure();
    op->getResult(0).replaceAllUsesWith(*v);
    op->erase();
  }
  return success();
}

} // namespace

LogicalResult mlir::shardx::lowerCollectivesToRuntimeCalls(ModuleOp module) {
  return Lowering(module).run();
}
