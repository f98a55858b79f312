//===- GuardDivision.cpp - Integer division without undefined cases -------===//
//
// Part of ShardX.
//
// Integer division and remainder by 0, and signed ones of the most negative
// value by -1, are undefined behaviour in `arith`, and x86's idiv traps on
// both (SIGFPE: the process dies). A program's divisors are data, so each
// such op divides by 1 in those cases instead:
//
//   %q = arith.divsi %x, %d : i32
// becomes
//   %zero = arith.cmpi eq, %d, 0
//   %wrap = (%x == MIN) & (%d == -1)
//   %q = arith.divsi %x, select(%zero | %wrap, 1, %d)
//
// so `x / 0` is x, `x % 0` is 0 and `MIN / -1` is MIN (the two's complement
// wrap; eager PyTorch's CPU kernels trap there too, torch 2.x). Divisors
// that are constants other than 0 and -1 are left alone.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_GUARDINTEGERDIVISIONPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

/// Whether `divisor` is a constant other than 0 and -1 (every lane of a
/// splat): such a division has no undefined case.
bool isSafeConstant(Value divisor) {
  APInt value;
  if (!matchPattern(divisor, m_ConstantInt(&value)))
    return false;
  return !value.isZero() && !value.isAllOnes();
}

/// The integer `value` (of the element type's width) as a constant of
/// `type`, splat over a vector.
Value constantLike(OpBuilder &b, Location loc, Type type, const APInt &value) {
  TypedAttr attr = b.getIntegerAttr(getElementTypeOrSelf(type), value);
  if (auto vector = dyn_cast<VectorType>(type))
    attr = SplatElementsAttr::get(vector, attr);
  return arith::ConstantOp::create(b, loc, type, attr);
}

/// Replaces operand 1 (the divisor) of `op` by 1 where it is 0 or, for a
/// signed op, where it is -1 and the dividend the most negative value.
void guard(Operation *op, bool isSigned) {
  Value dividend = op->getOperand(0), divisor = op->getOperand(1);
  Type type = divisor.getType();
  // Tensors are converted to loops before this pass runs; anything else
  // (a tensor left by another path) is not touched.
  if (!type.isIntOrIndex() && !isa<VectorType>(type))
    return;
  if (isSafeConstant(divisor))
    return;
  OpBuilder b(op);
  Location loc = op->getLoc();
  Type element = getElementTypeOrSelf(type);
  unsigned width = element.isIndex() ? IndexType::kInternalStorageBitWidth
                                     : element.getIntOrFloatBitWidth();
  Value zero = constantLike(b, loc, type, APInt::getZero(width));
  Value one = constantLike(b, loc, type, APInt(width, 1));
  Value bad =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, divisor, zero);
  if (isSigned) {
    Value minusOne = constantLike(b, loc, type, APInt::getAllOnes(width));
    Value min = constantLike(b, loc, type, APInt::getSignedMinValue(width));
    Value wraps = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, dividend, min),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, divisor,
                              minusOne));
    bad = arith::OrIOp::create(b, loc, bad, wraps);
  }
  Value safe = arith::SelectOp::create(b, loc, bad, one, divisor);
  op->setOperand(1, safe);
}

struct GuardIntegerDivisionPass
    : mlir::shardx::impl::GuardIntegerDivisionPassBase<
          GuardIntegerDivisionPass> {
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      if (isa<arith::DivSIOp, arith::RemSIOp, arith::CeilDivSIOp,
              arith::FloorDivSIOp>(op))
        guard(op, /*isSigned=*/true);
      else if (isa<arith::DivUIOp, arith::RemUIOp, arith::CeilDivUIOp>(op))
        guard(op, /*isSigned=*/false);
    });
  }
};

} // namespace
