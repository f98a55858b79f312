//===- GuardIndices.cpp - Tensor element access without undefined cases --===//
//
// Part of ShardX.
//
// `tensor.extract` and `tensor.insert` at an index outside the tensor are
// undefined behaviour; lowered to loads and stores, they read or write
// outside a buffer, and the process dies (SIGSEGV) or computes with
// whatever the memory held. The importer's programs make every index safe
// and report eager's error first (docs/Importer.md), but a hand-written
// program's indices are data too. So each access whose indices are not
// known to be in range becomes total, as the decomposed gathers and
// scatters are (DecomposeForCodegen.cpp):
//
//   %v = tensor.extract %t[%i, %j] : tensor<8x4xf32>
// becomes
//   %ok = (%i ult 8) & (%j ult 4)          (unsigned: a negative is large)
//   %x = tensor.extract %t[select(%ok, %i, 0), select(%ok, %j, 0)]
//   %v = select(%ok, %x, 0.0)
//
// so an out-of-range extract reads 0, and an out-of-range insert writes
// nothing (`scf.if %ok`). A tensor with a dynamic dim reads under `scf.if`
// too (it may be empty, where index 0 is out of range as well); a tensor
// with a static dim of 0 is never read. Indices known to be in range are
// left alone: constants, `linalg.index` of a loop whose static range fits
// the dim, and an index already clamped by its own range check (a
// decomposed gather's, or this pass's: running it twice changes nothing).
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_GUARDTENSORINDICESPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

/// Whether `bound` is at most dim `d` of `tensor`: a constant no larger than
/// its static size, or `tensor.dim` of that dim.
bool boundFits(Value bound, Value tensor, int64_t d) {
  int64_t size = cast<RankedTensorType>(tensor.getType()).getDimSize(d);
  APInt c;
  if (matchPattern(bound, m_ConstantInt(&c)))
    return !ShapedType::isDynamic(size) && c.sle(size);
  auto dim = bound.getDefiningOp<tensor::DimOp>();
  std::optional<int64_t> which = dim ? dim.getConstantIndex() : std::nullopt;
  return dim && dim.getSource() == tensor && which == d;
}

/// Whether `condition` implies 0 <= `index` < dim `d` of `tensor`: one of its
/// conjuncts (`arith.andi` operands, recursively) is `index ult B`, or two
/// are `index sge 0` and `index slt B`, with B fitting the dim.
bool impliesInRange(Value condition, Value index, Value tensor, int64_t d) {
  SmallVector<Value> pending{condition};
  bool nonNegative = false, below = false;
  while (!pending.empty()) {
    Value c = pending.pop_back_val();
    if (auto both = c.getDefiningOp<arith::AndIOp>()) {
      pending.append({both.getLhs(), both.getRhs()});
      continue;
    }
    auto cmp = c.getDefiningOp<arith::CmpIOp>();
    if (!cmp || cmp.getLhs() != index)
      continue;
    switch (cmp.getPredicate()) {
    case arith::CmpIPredicate::ult:
      if (boundFits(cmp.getRhs(), tensor, d))
        return true;
      break;
    case arith::CmpIPredicate::slt:
      below |= boundFits(cmp.getRhs(), tensor, d);
      break;
    case arith::CmpIPredicate::sge:
      nonNegative |= matchPattern(cmp.getRhs(), m_Zero());
      break;
    default:
      break;
    }
  }
  return nonNegative && below;
}

/// Whether `index`, used at `user`, lies in [0, size) of dim `d` of `tensor`
/// for every run:
/// - a constant there, or a `linalg.index` of a loop of the enclosing linalg
///   op whose static range is at most the size;
/// - a value clamped by its own range check, `select(%ok, %i, %k)` with `%ok`
///   implying `%i` in range and `%k` known in range (the decomposed gathers'
///   form and this pass's own);
/// - used in the then-region of an `scf.if` whose condition implies it (this
///   pass's form for dynamic dims and inserts).
/// So a second run of the pass changes nothing. Of a dynamic dim, only the
/// last two are known (it may be 0).
bool knownInRange(Value index, Value tensor, int64_t d, Operation *user) {
  int64_t size = cast<RankedTensorType>(tensor.getType()).getDimSize(d);
  APInt value;
  if (!ShapedType::isDynamic(size) &&
      matchPattern(index, m_ConstantInt(&value)))
    return value.isNonNegative() && value.slt(size);
  if (auto clamped = index.getDefiningOp<arith::SelectOp>()) {
    if (impliesInRange(clamped.getCondition(), clamped.getTrueValue(), tensor,
                       d) &&
        knownInRange(clamped.getFalseValue(), tensor, d, clamped))
      return true;
  }
  for (auto guard = user->getParentOfType<scf::IfOp>(); guard;
       guard = guard->getParentOfType<scf::IfOp>()) {
    if (guard.getThenRegion().isAncestor(user->getParentRegion()) &&
        impliesInRange(guard.getCondition(), index, tensor, d))
      return true;
  }
  if (ShapedType::isDynamic(size))
    return false;
  auto loop = index.getDefiningOp<linalg::IndexOp>();
  if (!loop)
    return false;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(loop->getParentOp());
  if (!linalgOp)
    return false;
  SmallVector<int64_t> ranges = linalgOp.getStaticLoopRanges();
  int64_t dim = loop.getDim();
  return dim < static_cast<int64_t>(ranges.size()) &&
         !ShapedType::isDynamic(ranges[dim]) && ranges[dim] <= size;
}

/// The access's condition: every unknown index of `indices` into `tensor`
/// below its dim (unsigned), with those indices; null when all are known at
/// `user`.
Value inBounds(OpBuilder &b, Location loc, Value tensor, ValueRange indices,
               Operation *user, SmallVectorImpl<unsigned> &unknown) {
  auto type = cast<RankedTensorType>(tensor.getType());
  Value all;
  for (auto [d, index] : llvm::enumerate(indices)) {
    int64_t size = type.getDimSize(d);
    if (knownInRange(index, tensor, d, user))
      continue;
    unknown.push_back(d);
    Value bound =
        ShapedType::isDynamic(size)
            ? tensor::DimOp::create(b, loc, tensor, d).getResult()
            : arith::ConstantIndexOp::create(b, loc, size).getResult();
    Value ok =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, index, bound);
    all = all ? arith::AndIOp::create(b, loc, all, ok) : ok;
  }
  return all;
}

bool hasZeroDim(RankedTensorType type) {
  return llvm::is_contained(type.getShape(), 0);
}

void guardExtract(tensor::ExtractOp op) {
  Type element = op.getType();
  if (!isa<FloatType, IntegerType, IndexType>(element))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TypedAttr zeroAttr = b.getZeroAttr(element);
  RankedTensorType type = op.getTensor().getType();
  if (hasZeroDim(type)) {
    op.getResult().replaceAllUsesWith(
        arith::ConstantOp::create(b, loc, zeroAttr).getResult());
    op.erase();
    return;
  }
  SmallVector<unsigned> unknown;
  Value ok = inBounds(b, loc, op.getTensor(), op.getIndices(), op, unknown);
  if (!ok)
    return;
  Value zero = arith::ConstantOp::create(b, loc, zeroAttr);
  if (!type.hasStaticShape()) {
    auto guarded = scf::IfOp::create(
        b, loc, ok,
        [&](OpBuilder &b, Location loc) {
          Value x = tensor::ExtractOp::create(b, loc, op.getTensor(),
                                              op.getIndices());
          scf::YieldOp::create(b, loc, x);
        },
        [&](OpBuilder &b, Location loc) {
          scf::YieldOp::create(b, loc, zero);
        });
    op.getResult().replaceAllUsesWith(guarded.getResult(0));
    op.erase();
    return;
  }
  // Static shape: every dim has an element 0, so the clamped read is in
  // range and the kernel stays branch-free.
  Value origin = arith::ConstantIndexOp::create(b, loc, 0);
  for (unsigned d : unknown) {
    Value index = op.getIndices()[d];
    op.getIndicesMutable()[d].assign(
        arith::SelectOp::create(b, loc, ok, index, origin));
  }
  b.setInsertionPointAfter(op);
  auto masked = arith::SelectOp::create(b, loc, ok, op.getResult(), zero);
  op.getResult().replaceAllUsesExcept(masked, masked);
}

void guardInsert(tensor::InsertOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  RankedTensorType type = op.getDest().getType();
  if (hasZeroDim(type)) {
    op.getResult().replaceAllUsesWith(op.getDest());
    op.erase();
    return;
  }
  SmallVector<unsigned> unknown;
  Value ok = inBounds(b, loc, op.getDest(), op.getIndices(), op, unknown);
  if (!ok)
    return;
  auto guarded = scf::IfOp::create(
      b, loc, ok,
      [&](OpBuilder &b, Location loc) {
        Value written = tensor::InsertOp::create(b, loc, op.getScalar(),
                                                 op.getDest(), op.getIndices());
        scf::YieldOp::create(b, loc, written);
      },
      [&](OpBuilder &b, Location loc) {
        scf::YieldOp::create(b, loc, op.getDest());
      });
  op.getResult().replaceAllUsesWith(guarded.getResult(0));
  op.erase();
}

struct GuardTensorIndicesPass
    : mlir::shardx::impl::GuardTensorIndicesPassBase<GuardTensorIndicesPass> {
  void runOnOperation() override {
    SmallVector<tensor::ExtractOp> extracts;
    SmallVector<tensor::InsertOp> inserts;
    getOperation()->walk([&](Operation *op) {
      if (auto extract = dyn_cast<tensor::ExtractOp>(op))
        extracts.push_back(extract);
      else if (auto insert = dyn_cast<tensor::InsertOp>(op))
        inserts.push_back(insert);
    });
    for (tensor::ExtractOp op : extracts)
      guardExtract(op);
    for (tensor::InsertOp op : inserts)
      guardInsert(op);
  }
};

} // namespace
