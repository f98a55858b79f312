//===- NarrowGemms.cpp - GEMMs of widened bf16/f16 values -----------------===//
//
// Part of ShardX.
//
// `shardx-narrow-gemm-operands` (the cuda target, on tensors after fusion):
// a GEMM whose operands are widened bf16/f16 values reads the narrow values
// instead, so that cuBLAS runs it on tensor cores (bf16/f16 inputs, f32
// accumulation and result). PyTorch's CPU attention under autocast upcasts
// q, k and v before its GEMMs, and ShardX's flash-precision attention
// (python/shardx/importer/attention.py) writes its GEMMs the same way:
//
//   %w = linalg.generic {elementwise} ins(%x : bf16) { yield extf(%in) }
//   %c = linalg.generic {gemm} ins(%w, %v : f32, f32) outs(%acc : f32)
// becomes
//   %c = linalg.generic {gemm} ins(%x, %y : bf16, bf16) outs(%acc : f32)
//        { %a = extf(%in0); %b = extf(%in1); ... }
//
// The product of two widened bf16 (or f16) values is exact in f32, so the
// GEMM computes the same sums; only their order is cuBLAS's.
//
//===----------------------------------------------------------------------===//

#include "Contractions.h"

#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_NARROWGEMMOPERANDSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// An operand of a GEMM as the narrow value it widens: read `value` through
/// `map` (composed with the GEMM's map of the operand).
struct NarrowOperand {
  Type type;
  Value value;
  AffineMap map;
  /// The producer to copy with a narrow result first (it computes the
  /// narrow value rather than reading it), or null; `yielded` is that value
  /// in its body (what its `arith.extf` widens).
  linalg::GenericOp copy;
  Value yielded;
};

/// `operand` as a widened bf16/f16 value: the result of an elementwise
/// generic (its result map a permutation) whose body yields `arith.extf` of
/// a bf16/f16 value to f32 and does not read its init.
std::optional<NarrowOperand> narrowOperand(Value operand) {
  auto producer = operand.getDefiningOp<linalg::GenericOp>();
  if (!producer || !producer.hasPureTensorSemantics() ||
      producer->getNumResults() != 1 || producer.getNumDpsInits() != 1 ||
      producer.getNumReductionLoops() != 0)
    return std::nullopt;
  OpOperand *init = producer.getDpsInitOperand(0);
  if (producer.payloadUsesValueFromOperand(init))
    return std::nullopt;
  AffineMap outMap = producer.getMatchingIndexingMap(init);
  if (!outMap.isPermutation())
    return std::nullopt;
  auto yield = cast<linalg::YieldOp>(producer.getBody()->getTerminator());
  auto extf = yield.getOperand(0).getDefiningOp<arith::ExtFOp>();
  if (!extf || !extf.getType().isF32())
    return std::nullopt;
  Type narrow = extf.getIn().getType();
  if (!narrow.isBF16() && !narrow.isF16())
    return std::nullopt;
  AffineMap fromResult = inversePermutation(outMap);
  // The producer's input itself, read elementwise: read it through its map.
  if (auto arg = dyn_cast<BlockArgument>(extf.getIn());
      arg && arg.getOwner() == producer.getBody()) {
    OpOperand *in = producer.getMatchingOpOperand(arg);
    AffineMap inMap = producer.getMatchingIndexingMap(in);
    if (inMap.isPermutation())
      return NarrowOperand{narrow, in->get(), inMap.compose(fromResult),
                           nullptr, Value()};
  }
  // A narrow value the body computes (a rounding): a copy of the producer
  // yields it; its result is read as the producer's was.
  return NarrowOperand{narrow, Value(), outMap.compose(fromResult), producer,
                       extf.getIn()};
}

/// The copy of `operand`'s producer that yields the narrow value.
Value narrowCopy(PatternRewriter &rewriter, const NarrowOperand &operand) {
  linalg::GenericOp producer = operand.copy;
  Type narrow = operand.type;
  auto resultType = cast<RankedTensorType>(producer.getResult(0).getType());
  Location loc = producer.getLoc();
  // Right after the producer: the GEMM's zero fill stays right before it
  // (cuBLAS's beta = 0).
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(producer);
  Value empty =
      tensor::EmptyOp::create(rewriter, loc, resultType.getShape(), narrow);
  auto copy = linalg::GenericOp::create(
      rewriter, loc, TypeRange{resultType.clone(narrow)},
      producer.getDpsInputs(), ValueRange{empty},
      producer.getIndexingMapsArray(), producer.getIteratorTypesArray(),
      [&](OpBuilder &b, Location nested, ValueRange args) {
        IRMapping mapping;
        Block *body = producer.getBody();
        for (unsigned i = 0, e = producer.getNumDpsInputs(); i < e; ++i)
          mapping.map(body->getArgument(i), args[i]);
        for (Operation &op : body->without_terminator())
          b.clone(op, mapping);
        linalg::YieldOp::create(b, nested, mapping.lookup(operand.yielded));
      });
  return copy.getResult(0);
}

/// A GEMM of two widened values of one narrow type -> the GEMM of the
/// narrow values, widened in its body.
struct NarrowGemmOperands : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp gemm,
                                PatternRewriter &rewriter) const override {
    if (!gemm.hasPureTensorSemantics() || !mlir::shardx::matchGemm(gemm) ||
        !getElementTypeOrSelf(gemm.getResult(0).getType()).isF32())
      return failure();
    std::optional<NarrowOperand> a = narrowOperand(gemm.getDpsInputs()[0]);
    std::optional<NarrowOperand> b = narrowOperand(gemm.getDpsInputs()[1]);
    if (!a || !b)
      return failure();
    if (a->type != b->type)
      return failure();
    SmallVector<AffineMap> maps = gemm.getIndexingMapsArray();
    SmallVector<Value> inputs;
    for (auto [i, o] : llvm::enumerate(std::array<NarrowOperand, 2>{*a, *b})) {
      inputs.push_back(o.copy ? narrowCopy(rewriter, o) : o.value);
      maps[i] = o.map.compose(maps[i]);
    }
    Type f32 = rewriter.getF32Type();
    Block *body = gemm.getBody();
    auto narrowed = linalg::GenericOp::create(
        rewriter, gemm.getLoc(), gemm.getResultTypes(), inputs,
        gemm.getDpsInits(), maps, gemm.getIteratorTypesArray(),
        [&](OpBuilder &nb, Location loc, ValueRange args) {
          IRMapping mapping;
          for (unsigned i = 0; i < 2; ++i)
            mapping.map(body->getArgument(i),
                        arith::ExtFOp::create(nb, loc, f32, args[i]));
          mapping.map(body->getArgument(2), args[2]);
          for (Operation &op : body->without_terminator())
            nb.clone(op, mapping);
          auto yield = cast<linalg::YieldOp>(body->getTerminator());
          linalg::YieldOp::create(nb, loc, mapping.lookup(yield.getOperand(0)));
        });
    narrowed->setDiscardableAttrs(gemm->getDiscardableAttrDictionary());
    rewriter.replaceOp(gemm, narrowed.getResults());
    return success();
  }
};

struct NarrowGemmOperandsPass
    : mlir::shardx::impl::NarrowGemmOperandsPassBase<NarrowGemmOperandsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<NarrowGemmOperands>(&getContext());
    // The widening producers no longer read are dead and go.
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
