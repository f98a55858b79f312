//===- NarrowFloats.cpp - bf16/f16 without compiler builtins --------------===//
//
// Part of ShardX.
//
// `shardx-expand-narrow-floats`: the CPU target computes bf16 and f16 in
// f32 and converts with integer arithmetic, so an artifact needs no
// compiler builtin. LLVM lowers `fptrunc float to bfloat` (and, on CPUs
// without F16C, every f16 conversion) to libgcc/compiler-rt calls such as
// `__truncsfbf2`, which GCC 12's libgcc (Debian 12) does not have: an
// artifact that calls one does not load there.
//
// - Arithmetic and math ops on bf16/f16 run in f32 between an `arith.extf`
//   and an `arith.truncf` (upstream `arith-emulate-unsupported-floats` and
//   `math-extend-to-supported-types`), as LLVM's type promotion and
//   PyTorch's CPU kernels do: each op rounds once to the narrow type (the
//   emulation's `contract` flags, which would let a chain skip its
//   intermediate roundings, are dropped).
// - Each `arith.extf` from and `arith.truncf` to bf16/f16 becomes integer
//   arithmetic on the bits, round to nearest even, as c10::BFloat16 and
//   c10::Half convert (an f64 source is rounded to f32 first, as PyTorch's
//   conversions do; a NaN becomes PyTorch's quiet NaN):
//
//     %h = arith.truncf %x : f32 to bf16
//   becomes
//     %u = arith.bitcast %x : f32 to i32
//     %lsb = (%u >> 16) & 1;  %r = (%u + 0x7fff + %lsb) >> 16
//     %h = arith.bitcast (select(isnan(%x), 0x7fc0, trunci %r)) : i16 to bf16
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_EXPANDNARROWFLOATSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

bool isNarrow(Type type) {
  Type elt = getElementTypeOrSelf(type);
  return elt.isBF16() || elt.isF16();
}

/// `type`'s shape (scalar or vector) with element type `elt`.
Type withElement(Type type, Type elt) {
  if (auto vec = dyn_cast<VectorType>(type))
    return vec.clone(elt);
  return elt;
}

/// Builds integer and float constants of one shape (scalar or vector).
struct Bits {
  OpBuilder &b;
  Location loc;
  Type shape;

  Value intConst(unsigned width, uint64_t value) {
    auto elt = b.getIntegerType(width);
    Type type = withElement(shape, elt);
    TypedAttr attr = IntegerAttr::get(elt, APInt(width, value));
    if (auto vec = dyn_cast<VectorType>(type))
      attr = DenseElementsAttr::get(vec, attr);
    return arith::ConstantOp::create(b, loc, type, attr);
  }
  Value i32(uint32_t value) { return intConst(32, value); }
  Value i16(uint16_t value) { return intConst(16, value); }
  Type i32Type() { return withElement(shape, b.getI32Type()); }
  Type i16Type() { return withElement(shape, b.getI16Type()); }
  Type f32Type() { return withElement(shape, b.getF32Type()); }

  Value shr(Value v, uint32_t n) { return arith::ShRUIOp::create(b, loc, v, i32(n)); }
  Value shl(Value v, uint32_t n) { return arith::ShLIOp::create(b, loc, v, i32(n)); }
  Value andi(Value v, uint32_t m) { return arith::AndIOp::create(b, loc, v, i32(m)); }
  Value ori(Value a, Value c) { return arith::OrIOp::create(b, loc, a, c); }
  Value add(Value a, Value c) { return arith::AddIOp::create(b, loc, a, c); }
  Value addc(Value a, uint32_t c) { return add(a, i32(c)); }
  Value sub(Value a, Value c) { return arith::SubIOp::create(b, loc, a, c); }
  Value cmp(arith::CmpIPredicate p, Value a, uint32_t c) {
    return arith::CmpIOp::create(b, loc, p, a, i32(c));
  }
  Value select(Value c, Value t, Value f) {
    return arith::SelectOp::create(b, loc, c, t, f);
  }
  Value asI32(Value f32) { return arith::BitcastOp::create(b, loc, i32Type(), f32); }
  Value asF32(Value i32v) { return arith::BitcastOp::create(b, loc, f32Type(), i32v); }
};

/// f32 -> bf16 bits (i16), round to nearest even; a NaN is 0x7fc0
/// (c10::BFloat16's round_to_nearest_even).
Value truncToBF16Bits(Bits &k, Value x) {
  Value u = k.asI32(x);
  Value lsb = k.andi(k.shr(u, 16), 1);
  Value rounded = k.shr(k.add(k.addc(u, 0x7fff), lsb), 16);
  Value bits = arith::TruncIOp::create(k.b, k.loc, k.i16Type(), rounded);
  Value isNan =
      arith::CmpFOp::create(k.b, k.loc, arith::CmpFPredicate::UNO, x, x);
  return k.select(isNan, k.i16(0x7fc0), bits);
}

/// f32 -> f16 bits (i16), round to nearest even with subnormals; a NaN is
/// sign | 0x7e00 (c10::Half's fp16_ieee_from_fp32_value).
Value truncToF16Bits(Bits &k, Value x) {
  using P = arith::CmpIPredicate;
  Value u = k.asI32(x);
  Value sign = k.andi(u, 0x80000000u);
  Value a = arith::XOrIOp::create(k.b, k.loc, u, sign);
  // |x| at or above 65536 is infinity here (from 65520 on, the rounding
  // below carries into the infinity's exponent); above infinity's bits is
  // NaN.
  Value special = k.select(k.cmp(P::ugt, a, 0x7f800000u), k.i32(0x7e00),
                           k.i32(0x7c00));
  // Below 2^-14 the result is subnormal: adding 0.5 (0x3f000000) in f32
  // rounds the mantissa to f16's last subnormal bit (round to nearest
  // even by the f32 add itself).
  Value magic = k.i32(0x3f000000u);
  Value sum = arith::AddFOp::create(k.b, k.loc, k.asF32(a), k.asF32(magic));
  Value subnormal = k.sub(k.asI32(sum), magic);
  // Normal: rebias the exponent (-112 << 23) and round the 13 dropped bits
  // to nearest even.
  Value odd = k.andi(k.shr(a, 13), 1);
  Value normal = k.shr(k.add(k.addc(a, 0xc8000fffu), odd), 13);
  Value result =
      k.select(k.cmp(P::uge, a, 0x47800000u), special,
               k.select(k.cmp(P::ult, a, 0x38800000u), subnormal, normal));
  result = k.ori(result, k.shr(sign, 16));
  return arith::TruncIOp::create(k.b, k.loc, k.i16Type(), result);
}

/// bf16 bits (i16) -> f32, exact.
Value extFromBF16Bits(Bits &k, Value bits) {
  Value u = arith::ExtUIOp::create(k.b, k.loc, k.i32Type(), bits);
  return k.asF32(k.shl(u, 16));
}

/// f16 bits (i16) -> f32, exact (subnormals, infinities and NaN payloads
/// included).
Value extFromF16Bits(Bits &k, Value bits) {
  using P = arith::CmpIPredicate;
  Value h = arith::ExtUIOp::create(k.b, k.loc, k.i32Type(), bits);
  Value o = k.shl(k.andi(h, 0x7fff), 13);
  Value exp = k.andi(o, 0x0f800000u);
  o = k.addc(o, 0x38000000u); // exponent rebias (127 - 15) << 23
  Value infNan = k.addc(o, 0x38000000u);
  // Zero and subnormals: renormalize through an f32 subtraction (exact).
  Value sub = arith::SubFOp::create(k.b, k.loc, k.asF32(k.addc(o, 0x00800000u)),
                                    k.asF32(k.i32(0x38800000u)));
  Value result = k.select(k.cmp(P::eq, exp, 0x0f800000u), infNan,
                          k.select(k.cmp(P::eq, exp, 0), k.asI32(sub), o));
  result = k.ori(result, k.shl(k.andi(h, 0x8000), 16));
  return k.asF32(result);
}

/// arith.truncf (f32 | f64) -> (bf16 | f16).
struct ExpandTruncF : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Type out = getElementTypeOrSelf(op.getType());
    Type in = getElementTypeOrSelf(op.getIn().getType());
    if (!isNarrow(out) || !(in.isF32() || in.isF64()) || op.getRoundingmode())
      return failure();
    Bits k{rewriter, op.getLoc(), op.getType()};
    Value x = op.getIn();
    if (in.isF64())
      x = arith::TruncFOp::create(rewriter, op.getLoc(), k.f32Type(), x);
    Value bits = out.isBF16() ? truncToBF16Bits(k, x) : truncToF16Bits(k, x);
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), bits);
    return success();
  }
};

/// arith.extf (bf16 | f16) -> (f32 | f64).
struct ExpandExtF : OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::ExtFOp op,
                                PatternRewriter &rewriter) const override {
    Type out = getElementTypeOrSelf(op.getType());
    Type in = getElementTypeOrSelf(op.getIn().getType());
    if (!isNarrow(in) || !(out.isF32() || out.isF64()))
      return failure();
    Bits k{rewriter, op.getLoc(), op.getType()};
    Value bits =
        arith::BitcastOp::create(rewriter, op.getLoc(), k.i16Type(), op.getIn());
    Value x = in.isBF16() ? extFromBF16Bits(k, bits) : extFromF16Bits(k, bits);
    if (out.isF64())
      x = arith::ExtFOp::create(rewriter, op.getLoc(), op.getType(), x);
    rewriter.replaceOp(op, x);
    return success();
  }
};

struct ExpandNarrowFloatsPass
    : shardx::impl::ExpandNarrowFloatsPassBase<ExpandNarrowFloatsPass> {
  LogicalResult initialize(MLIRContext *) override {
    // Arithmetic first: it introduces the extf/truncf pairs expanded after.
    // The passes themselves: text anchored on `builtin.module(...)` would
    // nest a second module pipeline, which runs on nothing.
    return parsePassPipeline(
        "math-extend-to-supported-types{target-type=f32},"
        "arith-emulate-unsupported-floats{source-types=bf16,f16 "
        "target-type=f32}",
        emulate);
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    ExpandNarrowFloatsPassBase::getDependentDialects(registry);
    emulate.getDependentDialects(registry);
  }
  void runOnOperation() override {
    if (failed(runPipeline(emulate, getOperation())) ||
        failed(shardx::expandNarrowFloatConversions(getOperation())))
      signalPassFailure();
  }
  OpPassManager emulate{"builtin.module"};
};

} // namespace

LogicalResult mlir::shardx::expandNarrowFloatConversions(ModuleOp module) {
  // The emulation marks its conversions `contract`, which lets the folder
  // drop an extf(truncf(x)) pair: PyTorch rounds after every op, so must we.
  module.walk([](Operation *op) {
    if (isa<arith::ExtFOp, arith::TruncFOp>(op))
      op->removeAttr("fastmath");
  });
  RewritePatternSet patterns(module.getContext());
  patterns.add<ExpandTruncF, ExpandExtF>(module.getContext());
  if (failed(applyPatternsGreedily(module, std::move(patterns))))
    return module.emitError("expanding bf16/f16 conversions did not converge");
  // Whatever still computes on a narrow float would need a builtin.
  WalkResult left = module.walk([](Operation *op) {
    if (!isa<arith::ExtFOp, arith::TruncFOp>(op) ||
        !(isNarrow(op->getOperand(0).getType()) ||
          isNarrow(op->getResult(0).getType())))
      return WalkResult::advance();
    op->emitError("the cpu target cannot convert between ")
        << op->getOperand(0).getType() << " and " << op->getResult(0).getType()
        << " without a compiler builtin";
    return WalkResult::interrupt();
  });
  return failure(left.wasInterrupted());
}
