//===- GroupedMatmulLoops.cpp - Grouped matmuls as a GEMM per expert -----===//
//
// Part of ShardX.
//
// The importer writes `_grouped_mm` as a contraction over every expert,
// each term masked by its row's group (importer/ops/grouped.py; the two
// forms of GroupedMatmul.h): the form the sharding rules split, and E times
// the work of the product, in code that selects instead of multiplying
// matrices. On the CPU target each becomes a loop over the experts of one
// matmul on that expert's rows, whose bounds are counted from the groups
// at run time:
//
//   %out = linalg.generic ins(%x, %w, %g : [R, K], [E, K, N], [R]) outs(%z)
// becomes
//   %c = counts: c[e] = the rows whose group is below e, e in [0, E]
//   %out = scf.for %e = 0 to E iter_args(%acc = %z) {
//     rows [c[e], c[e+1]) of %x  times  %w[e]  added into those of %acc
//   }
//
// The groups must be nondecreasing, so that each expert's rows are one
// run: the pass proves it from their producer (the importer's row groups,
// or a slice of them) and leaves any other grouped matmul masked. A row
// past the last group's end is in none and keeps its init, as in the
// masked form. shardx-localize's form on an expert-parallel rank (rows of
// a run-time count, the expert loop offset by the rank's first expert) is
// rewritten too, the counts offset alike. Only the order of the sums
// changes: each element still adds the same products, over k, to its init.
// The cuda target keeps the masked form (its host code reads no device
// buffer for the bounds).
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Passes.h"

#include "../Dialect/ShardX/Transforms/Partition/GroupedMatmul.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_GROUPEDMATMULLOOPSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// c[e] for e in [0, experts]: the rows of `groups` whose group is below e.
Value countBelow(OpBuilder &b, Location loc, Value groups, int64_t experts,
                 Value offset) {
  auto gType = cast<RankedTensorType>(groups.getType());
  Type i64 = b.getI64Type();
  auto type = RankedTensorType::get({experts + 1}, i64);
  Value zero = arith::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(0));
  Value init =
      linalg::FillOp::create(
          b, loc, ValueRange{zero},
          ValueRange{tensor::EmptyOp::create(b, loc, type.getShape(), i64)})
          .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineMap row = AffineMap::get(2, 0, getAffineDimExpr(1, ctx));
  AffineMap slot = AffineMap::get(2, 0, getAffineDimExpr(0, ctx));
  auto counts = linalg::GenericOp::create(
      b, loc, TypeRange{type}, ValueRange{groups}, ValueRange{init},
      ArrayRef<AffineMap>{row, slot},
      ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                    utils::IteratorType::reduction},
      [&](OpBuilder &b, Location l, ValueRange args) {
        Value slot = linalg::IndexOp::create(b, l, 0);
        if (offset)
          slot = arith::AddIOp::create(b, l, slot, offset);
        Value e =
            arith::IndexCastOp::create(b, l, gType.getElementType(), slot);
        Value below =
            arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, args[0], e);
        Value one = arith::ExtUIOp::create(b, l, i64, below);
        linalg::YieldOp::create(
            b, l, ValueRange{arith::AddIOp::create(b, l, args[1], one)});
      });
  return counts.getResult(0);
}

/// Whether `v`, in the body of `op`, is its loop `dim`'s index plus values
/// from outside `op`, through casts: increasing in that loop.
bool isLoopIndex(Value v, linalg::GenericOp op, unsigned dim) {
  while (true) {
    if (auto index = v.getDefiningOp<linalg::IndexOp>())
      return index.getDim() == dim;
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (isa<arith::IndexCastOp, arith::ExtSIOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    auto add = dyn_cast<arith::AddIOp>(def);
    if (!add)
      return false;
    auto outside = [&](Value x) {
      return !op->isAncestor(x.getParentBlock()->getParentOp());
    };
    if (outside(add.getRhs()))
      v = add.getLhs();
    else if (outside(add.getLhs()))
      v = add.getRhs();
    else
      return false;
  }
}

/// Whether `groups` is nondecreasing in every run, which the rewrite needs
/// (each expert's rows one run): the importer's row groups (`_row_groups`:
/// g[r] = the ends at or before r, `out + extui(end <= r)` summed over the
/// ends, r the row loop's index plus any offset), or a slice of them along
/// the rows. Any other groups keep the masked form.
bool isNondecreasing(Value groups) {
  while (auto slice = groups.getDefiningOp<tensor::ExtractSliceOp>()) {
    if (!slice.hasUnitStride())
      return false;
    groups = slice.getSource();
  }
  auto op = groups.getDefiningOp<linalg::GenericOp>();
  if (!op || op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumResults() != 1 || op.getNumLoops() != 2 ||
      op.getIteratorTypesArray() !=
          SmallVector<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::reduction})
    return false;
  MLIRContext *ctx = op.getContext();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (maps[0] != AffineMap::get(2, 0, getAffineDimExpr(1, ctx)) ||
      maps[1] != AffineMap::get(2, 0, getAffineDimExpr(0, ctx)))
    return false;
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getOperand(0).getDefiningOp<arith::AddIOp>();
  if (!add || add.getLhs() != body.getArgument(1))
    return false;
  auto ext = add.getRhs().getDefiningOp<arith::ExtUIOp>();
  auto cmp = ext ? ext.getIn().getDefiningOp<arith::CmpIOp>() : nullptr;
  if (!cmp ||
      (cmp.getPredicate() != arith::CmpIPredicate::sle &&
       cmp.getPredicate() != arith::CmpIPredicate::ule) ||
      !isLoopIndex(cmp.getRhs(), op, 0))
    return false;
  // The end is the read end, through casts only (so it does not depend on
  // the row).
  Value end = cmp.getLhs();
  while (isa_and_nonnull<arith::ExtSIOp, arith::ExtUIOp, arith::IndexCastOp>(
      end.getDefiningOp()))
    end = end.getDefiningOp()->getOperand(0);
  return end == body.getArgument(0);
}

/// `v[offsets][sizes]` with unit strides, as `resultShape` (unit dims of
/// the slice dropped).
Value slice(OpBuilder &b, Location loc, Value v, ArrayRef<OpFoldResult> offsets,
            ArrayRef<OpFoldResult> sizes, ArrayRef<int64_t> resultShape) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
  auto result = RankedTensorType::get(resultShape, type.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, result, v, offsets, sizes,
                                        strides);
}

void rewrite(linalg::GenericOp op, GroupedMatmulForm form, Value offset) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getDpsInputs()[0], w = op.getDpsInputs()[1];
  Value groups = op.getDpsInputs()[2], init = op.getDpsInits()[0];
  bool byRows = form == GroupedMatmulForm::Rows;
  auto xType = cast<RankedTensorType>(x.getType());
  auto wType = cast<RankedTensorType>(w.getType());
  auto outType = cast<RankedTensorType>(init.getType());
  int64_t experts = byRows ? wType.getDimSize(0) : outType.getDimSize(0);
  Value counts = countBelow(b, loc, groups, experts, offset);
  Value lb = arith::ConstantIndexOp::create(b, loc, 0);
  Value ub = arith::ConstantIndexOp::create(b, loc, experts);
  Value step = arith::ConstantIndexOp::create(b, loc, 1);
  int64_t dyn = ShapedType::kDynamic;
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, step, ValueRange{init},
      [&](OpBuilder &b, Location l, Value e, ValueRange iter) {
        Value acc = iter[0];
        auto at = [&](Value i) -> Value {
          Value c = tensor::ExtractOp::create(b, l, counts, ValueRange{i});
          return arith::IndexCastOp::create(b, l, b.getIndexType(), c);
        };
        Value lo = at(e);
        Value hi = at(arith::AddIOp::create(b, l, e, step));
        Value n = arith::SubIOp::create(b, l, hi, lo);
        OpFoldResult zero = b.getIndexAttr(0), one = b.getIndexAttr(1);
        Value a, m, c;
        SmallVector<OpFoldResult> cOffsets, cSizes;
        if (byRows) {
          // x[lo:hi, :] x w[e] -> acc[lo:hi, :].
          int64_t k = xType.getDimSize(1), cols = outType.getDimSize(1);
          a = slice(b, l, x, {lo, zero}, {n, b.getIndexAttr(k)}, {dyn, k});
          m = slice(b, l, w, {e, zero, zero},
                    {one, b.getIndexAttr(k), b.getIndexAttr(cols)}, {k, cols});
          cOffsets = {lo, zero};
          cSizes = {n, b.getIndexAttr(cols)};
          c = slice(b, l, acc, cOffsets, cSizes, {dyn, cols});
        } else {
          // x[:, lo:hi] x w[lo:hi, :] -> acc[e].
          int64_t k = xType.getDimSize(0), cols = wType.getDimSize(1);
          a = slice(b, l, x, {zero, lo}, {b.getIndexAttr(k), n}, {k, dyn});
          m = slice(b, l, w, {lo, zero}, {n, b.getIndexAttr(cols)},
                    {dyn, cols});
          cOffsets = {e, zero, zero};
          cSizes = {one, b.getIndexAttr(k), b.getIndexAttr(cols)};
          c = slice(b, l, acc, cOffsets, cSizes, {k, cols});
        }
        Value product =
            linalg::MatmulOp::create(b, l, ValueRange{a, m}, ValueRange{c})
                .getResult(0);
        SmallVector<OpFoldResult> strides(outType.getRank(), one);
        Value written = tensor::InsertSliceOp::create(
            b, l, product, acc, cOffsets, cSizes, strides);
        scf::YieldOp::create(b, l, written);
      });
  op.getResult(0).replaceAllUsesWith(loop.getResult(0));
  op.erase();
}

struct GroupedMatmulLoopsPass
    : mlir::shardx::impl::GroupedMatmulLoopsPassBase<GroupedMatmulLoopsPass> {
  void runOnOperation() override {
    SmallVector<std::tuple<linalg::GenericOp, GroupedMatmulForm, Value>> found;
    getOperation()->walk([&](linalg::GenericOp op) {
      if (!op.hasPureTensorSemantics())
        return;
      Value offset;
      std::optional<GroupedMatmulForm> form =
          matchGroupedMatmulForm(op, &offset);
      if (!form || !isNondecreasing(op.getDpsInputs()[2]))
        return;
      // Every loop static but the rows' (shardx-localize's row runs have a
      // run-time count of rows; a dynamic count of experts keeps the form).
      unsigned rows = rowLoop(*form);
      for (auto [d, size] : llvm::enumerate(op.getStaticLoopRanges()))
        if (d != rows && ShapedType::isDynamic(size))
          return;
      found.emplace_back(op, *form, offset);
    });
    for (auto [op, form, offset] : found)
      rewrite(op, form, offset);
  }
};

} // namespace
