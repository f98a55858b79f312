//===- LinalgRules.cpp - Sharding rules of linalg structured ops ----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// Loops -> factors (parallel or reduction, from the iterator types); each
/// tensor operand dim -> the loop its indexing map names. A constant result
/// (a broadcast size-1 dim) maps to no factor; any other expression (d0 + d1
/// of a convolution) maps to the loops it uses, which then need
/// replication. Results map like their init operands.
template <typename OpTy>
struct LinalgStructuredRule
    : public ShardingRuleOpInterface::ExternalModel<LinalgStructuredRule<OpTy>,
                                                    OpTy> {
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
      for (AffineExpr expr : map.getResults()) {
        SmallVector<int64_t> factors;
        if (auto dim = dyn_cast<AffineDimExpr>(expr)) {
          factors.push_back(dim.getPosition());
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
