//===- RuntimeCalls.cpp - Building shardx_rt_cg_* calls -----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "RuntimeCalls.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/RuntimeDType.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::shardx;

int32_t mlir::shardx::getRuntimeReductionCode(ReductionKind kind) {
  return static_cast<int32_t>(toReduceOp(kind));
}

RuntimeCalls::RuntimeCalls(OpBuilder &builder, CollectiveOpInterface op)
    : b(builder), loc(op->getLoc()), op(op),
      module(op->getParentOfType<ModuleOp>()) {}

FailureOr<std::string> RuntimeCalls::suffix(Type elt) {
  if (std::optional<rt::DType> type = getRuntimeDType(elt);
      type && rt::isCollectiveType(*type))
    return std::string(rt::stringifyDType(*type));
  op->emitError("collectives on ")
      << elt << " are not supported by the runtime (f32, f64, i32, i64, "
      << "bf16, f16; i1 except in reductions)";
  return failure();
}

LogicalResult RuntimeCalls::checkElementType(Type elt) {
  // Booleans move as i32 (flatCall), unless the op reduces them.
  if (elt.isInteger(1) && !op.getCollectiveReduction())
    return success();
  return suffix(elt);
}

MemRefType RuntimeCalls::dyn1D(Type elt) {
  return MemRefType::get({ShapedType::kDynamic}, elt,
                         StridedLayoutAttr::get(b.getContext(),
                                                ShapedType::kDynamic,
                                                {ShapedType::kDynamic}));
}

func::FuncOp RuntimeCalls::declare(StringRef name, TypeRange args,
                                   TypeRange results) {
  if (auto fn = module.lookupSymbol<func::FuncOp>(name))
    return fn;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(module.getBody());
  auto fn = func::FuncOp::create(b, module.getLoc(), name,
                                 b.getFunctionType(args, results));
  fn.setPrivate();
  return fn;
}

/// `t`'s buffer as a contiguous 1-D memref, for a call that reads it before
/// it returns: bufferization casts the tensor's buffer where it has the
/// identity layout (a fresh result, an argument) and copies it only where
/// it does not (a strided slice).
Value RuntimeCalls::contiguous(Value t) {
  auto type = cast<RankedTensorType>(t.getType());
  Value buffer = bufferization::ToBufferOp::create(
      b, loc, MemRefType::get(type.getShape(), type.getElementType()), t,
      /*readOnly=*/true);
  return flat(buffer);
}

/// A contiguous 1-D copy of `t`, for a started collective, which reads it
/// until its wait: a later op may write the tensor's own buffer in place.
Value RuntimeCalls::privateCopy(Value t) {
  auto type = cast<RankedTensorType>(t.getType());
  SmallVector<int64_t> dynStrides(type.getRank(), ShapedType::kDynamic);
  auto strided = MemRefType::get(
      type.getShape(), type.getElementType(),
      StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic, dynStrides));
  Value buffer =
      bufferization::ToBufferOp::create(b, loc, strided, t, /*readOnly=*/true);
  Value copy = memref::AllocOp::create(
      b, loc, MemRefType::get(type.getShape(), type.getElementType()),
      dynSizes(t));
  memref::CopyOp::create(b, loc, buffer, copy);
  return flat(copy);
}

SmallVector<Value> RuntimeCalls::dynSizes(Value t) {
  auto type = cast<RankedTensorType>(t.getType());
  SmallVector<Value> sizes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      sizes.push_back(tensor::DimOp::create(b, loc, t, d));
  return sizes;
}

Value RuntimeCalls::index(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

Value RuntimeCalls::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, v, 32);
}

Value RuntimeCalls::i64(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, v, 64);
}

Value RuntimeCalls::groupIndex() {
  Value arr = int64Array(op.getAxes());
  func::FuncOp fn =
      declare("shardx_rt_cg_axis_index", {arr.getType()}, {b.getI64Type()});
  auto call = func::CallOp::create(b, loc, fn, ValueRange{arr});
  if (auto mesh = module.lookupSymbol<MeshOp>(op.getMeshAttr()))
    call->setAttr(
        kRankValueAttr,
        b.getDictionaryAttr(
            {b.getNamedAttr("mesh_shape", mesh.getShapeAttr()),
             b.getNamedAttr("axes", b.getDenseI64ArrayAttr(op.getAxes()))}));
  return arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                    call.getResult(0));
}

Value RuntimeCalls::lookup(Value j, ArrayRef<int64_t> table) {
  Value r = index(table[0]);
  for (auto [i, v] : llvm::enumerate(table)) {
    Value hit =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j, index(i));
    r = arith::SelectOp::create(b, loc, hit, index(v), r);
  }
  return r;
}

Value RuntimeCalls::moveDim(Value t, int64_t dim, bool inverse) {
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
  return transpose(t, perm);
}

/// `m` (identity layout) as memref<?xT, strided<[?], offset: ?>>.
Value RuntimeCalls::flat(Value m) {
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

Value RuntimeCalls::flatBuffer(Value v) {
  if (isa<RankedTensorType>(v.getType()))
    return contiguous(v);
  return flat(v);
}

Value RuntimeCalls::int64Array(ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                    b.getI64Type());
  Value cst = arith::ConstantOp::create(
      b, loc, DenseIntElementsAttr::get(type, values));
  auto memType = MemRefType::get(type.getShape(), b.getI64Type());
  Value buffer = bufferization::ToBufferOp::create(b, loc, memType, cst, true);
  return memref::CastOp::create(b, loc, dyn1D(b.getI64Type()), buffer);
}

FailureOr<Value> RuntimeCalls::flatCall(StringRef kind, Value in,
                                        ArrayRef<int64_t> outShape,
                                        ArrayRef<Value> extra,
                                        ValueRange outDynSizes) {
  auto inType = cast<RankedTensorType>(in.getType());
  Type elt = inType.getElementType();
  // Booleans (masks) move as i32; a reduction of booleans stays an error.
  if (elt.isInteger(1) && !op.getCollectiveReduction()) {
    FailureOr<Value> wide = flatCall(kind, castElements(in, b.getI32Type()),
                                     outShape, extra, outDynSizes);
    if (failed(wide))
      return failure();
    return castElements(*wide, elt);
  }
  FailureOr<std::string> sfx = suffix(elt);
  if (failed(sfx))
    return failure();
  Value inFlat = contiguous(in);
  auto outMemType = MemRefType::get(outShape, elt);
  Value out = memref::AllocOp::create(b, loc, outMemType, outDynSizes);
  Value outFlat = flat(out);
  SmallVector<Value> args = {inFlat, outFlat};
  args.append(extra.begin(), extra.end());
  args.push_back(int64Array(op.getAxes()));
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

FailureOr<Value> RuntimeCalls::flatCallAsync(StringRef kind, Value in,
                                             ArrayRef<int64_t> outShape,
                                             ArrayRef<Value> extra,
                                             Operation *waitPoint,
                                             ValueRange outDynSizes) {
  auto inType = cast<RankedTensorType>(in.getType());
  Type elt = inType.getElementType();
  if (elt.isInteger(1))
    return flatCall(kind, in, outShape, extra, outDynSizes);
  FailureOr<std::string> sfx = suffix(elt);
  if (failed(sfx))
    return failure();
  Value inFlat = privateCopy(in);
  Value out = memref::AllocOp::create(b, loc, MemRefType::get(outShape, elt),
                                      outDynSizes);
  Value outFlat = flat(out);
  SmallVector<Value> args = {inFlat, outFlat};
  args.append(extra.begin(), extra.end());
  args.push_back(int64Array(op.getAxes()));
  func::FuncOp startFn =
      declare(("shardx_rt_cg_" + kind + "_start_" + *sfx).str(),
              ValueRange(args).getTypes(), {b.getI64Type()});
  Value request = func::CallOp::create(b, loc, startFn, args).getResult(0);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(waitPoint);
  SmallVector<Value> waitArgs = {request, inFlat, outFlat};
  func::FuncOp waitFn = declare(("shardx_rt_cg_wait_" + *sfx),
                                ValueRange(waitArgs).getTypes(), {});
  func::CallOp::create(b, waitPoint->getLoc(), waitFn, waitArgs);
  return Value(bufferization::ToTensorOp::create(
      b, waitPoint->getLoc(), RankedTensorType::get(outShape, elt), out,
      /*restrict=*/true, /*writable=*/true));
}

/// `t` with its integer elements zero-extended or truncated to `elt`.
Value RuntimeCalls::castElements(Value t, Type elt) {
  auto type = cast<RankedTensorType>(t.getType());
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), elt, dynSizes(t));
  bool extend = elt.getIntOrFloatBitWidth() >
                type.getElementType().getIntOrFloatBitWidth();
  return linalg::MapOp::create(
             b, loc, ValueRange{t}, init,
             [&](OpBuilder &nb, Location nl, ValueRange args) {
               Value v = extend ? arith::ExtUIOp::create(nb, nl, elt, args[0])
                                      .getResult()
                                : arith::TruncIOp::create(nb, nl, elt, args[0])
                                      .getResult();
               linalg::YieldOp::create(nb, nl, v);
             })
      ->getResult(0);
}

Value RuntimeCalls::reshape(Value t, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(t.getType());
  if (type.getShape() == shape)
    return t;
  auto oneD =
      RankedTensorType::get({type.getNumElements()}, type.getElementType());
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

Value RuntimeCalls::transpose(Value t, ArrayRef<int64_t> perm) {
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
