//===- LocalPieces.cpp - Local types and this rank's pieces ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "LocalPieces.h"

#include "shardx/Dialect/ShardX/Transforms/RecordedLayouts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::shardx;

Layout LocalPieces::layoutOf(Value v) const {
  if (LayoutAttr a = getRecordedLayout(v))
    return a.getLayout();
  return Layout(meshRank);
}

FailureOr<RankedTensorType> LocalPieces::localType(Value v,
                                                   Operation *where) const {
  auto global = cast<RankedTensorType>(v.getType());
  LayoutAttr attr = getRecordedLayout(v);
  if (!attr)
    return global;
  const Layout &layout = attr.getLayout();
  if (layout.isReplicated() && !layout.hasPartial())
    return global;
  if (!global.hasStaticShape()) {
    where->emitError("cannot expand a sharded tensor of dynamic global "
                     "shape ")
        << global;
    return failure();
  }
  RankedTensorType local = attr.getLocalType(global, meshShape);
  for (int64_t d = 0; d < local.getRank(); ++d)
    if (local.isDynamicDim(d))
      if (const auto *ds = layout.getDim(d))
        if (ds->sizes.empty() && llvm::any_of(ds->splits, [](const Split &s) {
              return s.stride != 1;
            })) {
          where->emitError() << "uneven strided shards of " << global
                             << " under " << attr << " cannot be expanded";
          return failure();
        }
  return local;
}

std::pair<Value, Value> LocalPieces::emitPiece(OpBuilder &b, Location loc,
                                               const DimSharding &ds,
                                               int64_t size) const {
  auto cst = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  if (!ds.sizes.empty()) {
    SmallVector<int64_t> axes;
    for (const Split &s : ds.splits)
      axes.push_back(s.axis);
    Value j = AxisIndexOp::create(b, loc, b.getIndexType(), meshRef,
                                  b.getDenseI64ArrayAttr(axes));
    Value offset = cst(0), length = cst(ds.sizes[0]);
    int64_t prefix = 0;
    for (auto [i, sz] : llvm::enumerate(ds.sizes)) {
      Value hit =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j, cst(i));
      offset = arith::SelectOp::create(b, loc, hit, cst(prefix), offset);
      length = arith::SelectOp::create(b, loc, hit, cst(sz), length);
      prefix += sz;
    }
    return {offset, length};
  }
  // Nested torch.chunk: ceil-sized chunks, major split first.
  Value offset = cst(0), length = cst(size);
  for (const Split &s : ds.splits) {
    int64_t n = meshShape[s.axis];
    Value j = AxisIndexOp::create(b, loc, b.getIndexType(), meshRef,
                                  b.getDenseI64ArrayAttr({s.axis}));
    Value chunk = arith::CeilDivUIOp::create(b, loc, length, cst(n));
    Value lo = arith::MinUIOp::create(
        b, loc, arith::MulIOp::create(b, loc, j, chunk), length);
    Value hi = arith::MinUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, lo, chunk), length);
    offset = arith::AddIOp::create(b, loc, offset, lo);
    length = arith::SubIOp::create(b, loc, hi, lo);
  }
  return {offset, length};
}

SmallVector<Value> LocalPieces::dynamicSizes(OpBuilder &b, Location loc,
                                             RankedTensorType global,
                                             RankedTensorType local,
                                             const Layout &layout) const {
  SmallVector<Value> sizes;
  for (int64_t d = 0; d < local.getRank(); ++d)
    if (local.isDynamicDim(d))
      sizes.push_back(
          emitPiece(b, loc, *layout.getDim(d), global.getDimSize(d)).second);
  return sizes;
}
