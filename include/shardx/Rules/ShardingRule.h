//===- ShardingRule.h - Sharding rules of ops -------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RULES_SHARDINGRULE_H
#define SHARDX_RULES_SHARDINGRULE_H

#include "shardx/Layout/Layout.h"

#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <optional>
#include <string>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::shardx {

/// An op in factors: every operand and result dim maps to the factors it is
/// made of (major to minor; none for a broadcast size-1 dim).
struct ShardingRule {
  enum class FactorKind { Parallel, Reduction, NeedReplication };

  /// Adds a factor and returns its index.
  int64_t addFactor(int64_t size, FactorKind kind) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int64_t>(factorSizes.size()) - 1;
  }

  SmallVector<int64_t> factorSizes; // ShapedType::kDynamic when unknown
  SmallVector<FactorKind> factorKinds;
  /// Per tensor operand, per dim, the factors.
  SmallVector<SmallVector<SmallVector<int64_t>>> operands;
  /// Per tensor result, per dim, the factors.
  SmallVector<SmallVector<SmallVector<int64_t>>> results;

  /// A windowed dim (docs/Rules.md, "Windowed ops"): a dim of one factor
  /// whose size is `stride` times the factor's plus `low + high` (a padded
  /// dim; the input rows of a convolution or pooling, `stride` its stride).
  /// When the factor is split, the dim is split with explicit sizes: the
  /// factor's pieces times `stride`, the first widened by `low` and the
  /// last by `high`; a consumer that reads the window (`halo`) needs
  /// `low` rows from the previous shard and `haloHigh()` from the next
  /// (shardx.halo, inserted by shardx-localize).
  struct WindowedDim {
    bool result;    // a result (else an operand)
    int64_t tensor; // index among the tensor operands or results
    int64_t dim;
    int64_t low, high;
    bool halo;          // the op reads across shard edges (a window), not a pad
    int64_t stride = 1; // dim rows per factor row
    int64_t unread = 0; // trailing rows of the dim no window reads
    /// The rows a shard reads from the next one: `high` less the rows past
    /// the last window (a stride-s window ends `s - 1 - unread` rows before
    /// the next shard's first window starts, so it may need none).
    int64_t haloHigh() const {
      return halo ? std::max<int64_t>(0, high - unread) : 0;
    }
    int64_t haloLow() const { return halo ? low : 0; }
  };
  SmallVector<WindowedDim> windows;
  /// The op's loop nests, each a list of factors, when it is several (a
  /// composite op such as `shardx.attention`); empty: one nest over every
  /// factor. The cost model's work is the sum of the nests' sizes.
  SmallVector<SmallVector<int64_t>> nests;
  /// The window of dim `d` of the tensor whose factors are `dims` (one of
  /// `operands` or `results`, by identity), or null.
  const WindowedDim *windowOf(ArrayRef<SmallVector<int64_t>> dims,
                              int64_t d) const {
    for (const WindowedDim &w : windows) {
      const auto &list = w.result ? results : operands;
      if (w.tensor < static_cast<int64_t>(list.size()) &&
          list[w.tensor].data() == dims.data() && w.dim == d)
        return &w;
    }
    return nullptr;
  }

  /// "([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}".
  std::string str() const;
};

/// Attaches the rules to the upstream ops that have one (linalg structured
/// ops, elementwise arith and math ops).
void registerShardingRuleExternalModels(DialectRegistry &registry);
/// The rules of one family (one file each).
void registerLinalgShardingRules(DialectRegistry &registry);
void registerElementwiseShardingRules(DialectRegistry &registry);
void registerTensorShardingRules(DialectRegistry &registry);
void registerAttentionShardingRules(DialectRegistry &registry);

} // namespace mlir::shardx

#include "shardx/Rules/ShardingRuleInterface.h.inc"

namespace mlir::shardx {

/// Whether `v` is only a shape or a splat (its producer's rule says so):
/// rematerialized in any layout rather than resharded.
bool isRematerializable(Value v);

} // namespace mlir::shardx

#endif // SHARDX_RULES_SHARDINGRULE_H
