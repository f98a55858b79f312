//===- LinalgRules.cpp - Sharding rules of linalg structured ops ----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Linearity.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::shardx;

/// The combiner of a linalg op's one reduction (`out = combine(out, x)`,
/// found by MLIR's matchReduction), or null.
static Operation *getCombinerOp(linalg::LinalgOp op) {
  if (op->getNumResults() != 1 || op.getNumDpsInits() != 1)
    return nullptr;
  auto yield = dyn_cast<linalg::YieldOp>(op.getBlock()->getTerminator());
  if (!yield || yield.getNumOperands() != 1)
    return nullptr;
  SmallVector<Operation *, 1> combiners;
  if (!matchReduction(op.getRegionOutputArgs(), 0, combiners) ||
      combiners.size() != 1)
    return nullptr;
  return combiners.front();
}

/// The partial op a combiner leaves: sum, max, min or prod.
static std::optional<ReduceOp> getReduceOp(Operation *combiner) {
  return llvm::TypeSwitch<Operation *, std::optional<ReduceOp>>(combiner)
      .Case<arith::AddFOp, arith::AddIOp>([](auto) { return ReduceOp::Sum; })
      .Case<arith::MaximumFOp, arith::MaxNumFOp, arith::MaxSIOp>(
          [](auto) { return ReduceOp::Max; })
      .Case<arith::MinimumFOp, arith::MinNumFOp, arith::MinSIOp>(
          [](auto) { return ReduceOp::Min; })
      .Case<arith::MulFOp, arith::MulIOp>([](auto) { return ReduceOp::Prod; })
      .Default([](Operation *) { return std::nullopt; });
}

/// Whether `value` is the identity of `kind` (arith's identity of the
/// matching atomic kind: 0 for a sum, 1 for a product, -inf or the least
/// signed integer for a max, +inf or the greatest for a min).
static bool isIdentityOf(ReduceOp kind, TypedAttr value) {
  Type type = value.getType();
  bool isFloat = isa<FloatType>(type);
  if (isa<IndexType>(type))
    type = IntegerType::get(type.getContext(), 64);
  if (!isFloat && !isa<IntegerType>(type))
    return false;
  arith::AtomicRMWKind atomic = [&] {
    switch (kind) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return isFloat ? arith::AtomicRMWKind::addf : arith::AtomicRMWKind::addi;
    case ReduceOp::Prod:
      return isFloat ? arith::AtomicRMWKind::mulf : arith::AtomicRMWKind::muli;
    case ReduceOp::Max:
      return isFloat ? arith::AtomicRMWKind::maximumf
                     : arith::AtomicRMWKind::maxs;
    case ReduceOp::Min:
      return isFloat ? arith::AtomicRMWKind::minimumf
                     : arith::AtomicRMWKind::mins;
    }
    llvm_unreachable("unknown reduction");
  }();
  OpBuilder builder(type.getContext());
  TypedAttr identity = arith::getIdentityValueAttr(
      atomic, type, builder, UnknownLoc::get(type.getContext()));
  if (auto f = dyn_cast<FloatAttr>(value))
    return f.getValue().compare(cast<FloatAttr>(identity).getValue()) ==
           llvm::APFloat::cmpEqual;
  auto i = dyn_cast<IntegerAttr>(value);
  APInt expected = cast<IntegerAttr>(identity).getValue();
  return i && i.getValue().getBitWidth() == expected.getBitWidth() &&
         i.getValue() == expected;
}

namespace {

/// `s * outer + c * inner` (a convolution's or pooling's input index at
/// stride `s`, dilation `c`; the outer loop is the longer one): the dim
/// holds the windows of the outer loop's rows, `s * (range(outer) - 1) +
/// extent + 1` rows (`extent = c * (range(inner) - 1)`) and up to `s - 1`
/// trailing rows no window reads (what a strided convolution leaves over).
/// A shard's windows start `low = extent / 2` rows before its rows (the
/// rows of a "same"-padded input split like its source); the last shard
/// holds the `high` rows left past the last output row's `stride` rows.
struct Window {
  int64_t outer, inner, stride, unread, low, high;
};
static std::optional<Window> matchWindow(AffineExpr expr,
                                         ArrayRef<int64_t> ranges,
                                         int64_t size) {
  auto add = dyn_cast<AffineBinaryOpExpr>(expr);
  if (!add || add.getKind() != AffineExprKind::Add ||
      ShapedType::isDynamic(size))
    return std::nullopt;
  // A term: a loop times a positive constant.
  auto term = [](AffineExpr e) -> std::optional<std::pair<int64_t, int64_t>> {
    if (auto d = dyn_cast<AffineDimExpr>(e))
      return std::make_pair(int64_t(d.getPosition()), int64_t(1));
    auto mul = dyn_cast<AffineBinaryOpExpr>(e);
    if (!mul || mul.getKind() != AffineExprKind::Mul)
      return std::nullopt;
    auto d = dyn_cast<AffineDimExpr>(mul.getLHS());
    auto c = dyn_cast<AffineConstantExpr>(mul.getRHS());
    if (!d || !c || c.getValue() < 1)
      return std::nullopt;
    return std::make_pair(int64_t(d.getPosition()), c.getValue());
  };
  auto a = term(add.getLHS()), b = term(add.getRHS());
  if (!a || !b || a->first == b->first)
    return std::nullopt;
  int64_t ra = ranges[a->first], rb = ranges[b->first];
  if (ShapedType::isDynamic(ra) || ShapedType::isDynamic(rb))
    return std::nullopt;
  // The outer loop has the longer range.
  if (rb > ra) {
    std::swap(a, b);
    std::swap(ra, rb);
  }
  if (ra <= rb || rb < 1)
    return std::nullopt;
  int64_t stride = a->second, extent = b->second * (rb - 1);
  int64_t unread = size - (stride * (ra - 1) + extent + 1);
  int64_t low = extent / 2, high = size - stride * ra - low;
  if (unread < 0 || unread >= stride || high < 0)
    return std::nullopt;
  return Window{a->first, b->first, stride, unread, low, high};
}

/// Loops -> factors (parallel or reduction, from the iterator types); each
/// tensor operand dim -> the loop its indexing map names. A constant result
/// (a broadcast size-1 dim) maps to no factor; any other expression (d0 + d1
/// of a convolution) maps to the loops it uses, which then need
/// replication, except a window (`matchWindow`): that input dim is the
/// outer loop's rows (times the stride) widened by the window, a windowed
/// dim of the rule (the op reads a halo across shard edges), and the window
/// loop needs replication.
/// Results map like their init operands.
template <typename OpTy>
struct LinalgStructuredRule
    : public ShardingRuleOpInterface::ExternalModel<LinalgStructuredRule<OpTy>,
                                                    OpTy> {
  /// Reads only the op's indexing maps, iterator types and operand types
  /// (not its body or discardable attributes): propagation keeps one rule
  /// per (op name, inherent attributes, types) in its rule cache
  /// (RuleCache::get, Transforms/Propagation/RuleCache.h).
  FailureOr<ShardingRule> getShardingRule(Operation *op) const {
    auto linalgOp = cast<linalg::LinalgOp>(op);
    if (!linalgOp.hasPureTensorSemantics())
      return failure();
    ShardingRule rule;
    SmallVector<int64_t> ranges = linalgOp.getStaticLoopRanges();
    SmallVector<utils::IteratorType> iterators =
        linalgOp.getIteratorTypesArray();
    for (auto [range, iterator] : llvm::zip_equal(ranges, iterators))
      rule.addFactor(range, iterator == utils::IteratorType::reduction
                                ? ShardingRule::FactorKind::Reduction
                                : ShardingRule::FactorKind::Parallel);
    auto dimsOf = [&](OpOperand &operand) {
      SmallVector<SmallVector<int64_t>> dims;
      AffineMap map = linalgOp.getMatchingIndexingMap(&operand);
      auto type = cast<RankedTensorType>(operand.get().getType());
      for (auto [d, expr] : llvm::enumerate(map.getResults())) {
        SmallVector<int64_t> factors;
        std::optional<Window> window;
        if (!linalgOp.isDpsInit(&operand))
          window = matchWindow(expr, ranges, type.getDimSize(d));
        if (auto dim = dyn_cast<AffineDimExpr>(expr)) {
          factors.push_back(dim.getPosition());
        } else if (window) {
          // The dim is the outer loop's rows (times the stride) widened by
          // the window; the window loop stays whole.
          factors.push_back(window->outer);
          rule.factorKinds[window->inner] =
              ShardingRule::FactorKind::NeedReplication;
          ShardingRule::WindowedDim w{
              /*result=*/false, static_cast<int64_t>(rule.operands.size()),
              static_cast<int64_t>(d), window->low, window->high,
              /*halo=*/true};
          w.stride = window->stride;
          w.unread = window->unread;
          rule.windows.push_back(w);
        } else if (!isa<AffineConstantExpr>(expr)) {
          expr.walk([&](AffineExpr e) {
            if (auto d = dyn_cast<AffineDimExpr>(e)) {
              factors.push_back(d.getPosition());
              rule.factorKinds[d.getPosition()] =
                  ShardingRule::FactorKind::NeedReplication;
            }
          });
        }
        dims.push_back(factors);
      }
      return dims;
    };
    for (OpOperand *input : linalgOp.getDpsInputOperands())
      if (isa<RankedTensorType>(input->get().getType()))
        rule.operands.push_back(dimsOf(*input));
    for (OpOperand &init : linalgOp.getDpsInitsMutable()) {
      rule.operands.push_back(dimsOf(init));
      rule.results.push_back(rule.operands.back());
    }
    return rule;
  }

  /// The combiner of `out = combine(out, x)`.
  std::optional<ReduceOp> getReductionKind(Operation *op) const {
    Operation *combiner = getCombinerOp(cast<linalg::LinalgOp>(op));
    return combiner ? getReduceOp(combiner) : std::nullopt;
  }

  /// The init is a linalg.fill with the identity of the combiner.
  bool hasIdentityInit(Operation *op) const {
    std::optional<ReduceOp> kind = getReductionKind(op);
    if (!kind)
      return false;
    auto fill = cast<linalg::LinalgOp>(op)
                    .getDpsInits()[0]
                    .template getDefiningOp<linalg::FillOp>();
    TypedAttr value;
    return fill && matchPattern(fill.getInputs()[0], m_Constant(&value)) &&
           isIdentityOf(*kind, value);
  }

  /// From the body: linear in the partial operands, the init an
  /// accumulator.
  bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial) const {
    return isBodyLinearIn(cast<linalg::LinalgOp>(op), partial);
  }

  /// A fill of a tensor.empty.
  bool isShapeOnly(Operation *op) const {
    if constexpr (std::is_same_v<OpTy, linalg::FillOp>)
      return cast<linalg::FillOp>(op)
                 .getOutputs()[0]
                 .template getDefiningOp<tensor::EmptyOp>() != nullptr;
    return false;
  }
};

template <typename... Ops> void registerAll(MLIRContext *ctx) {
  (Ops::template attachInterface<LinalgStructuredRule<Ops>>(*ctx), ...);
}

} // namespace

void mlir::shardx::registerLinalgShardingRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, linalg::LinalgDialect *) {
    registerAll<
#define GET_OP_LIST
#include "mlir/Dialect/Linalg/IR/LinalgStructuredOps.cpp.inc"
        >(ctx);
  });
}
