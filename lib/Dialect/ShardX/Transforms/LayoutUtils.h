//===- LayoutUtils.h - Layouts of values in a propagated program -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The transforms' helpers over propagated programs. Reading recorded
// layouts is public API (shardx/Dialect/ShardX/Transforms/RecordedLayouts.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/RecordedLayouts.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace mlir::shardx {

/// The discardable attribute naming the layout an op reads the tensor its
/// region captures in (an embedding lookup's table, shardx/Rules/
/// EmbeddingRule.h); an op without it reads captured tensors whole.
constexpr llvm::StringLiteral kTableLayoutAttrName = "shardx.table_layout";

/// Sets the `shardx.layouts` entry of `value` (an op result).
void setResultLayout(OpResult value, LayoutAttr layout);

/// The ranked-tensor values among `values` (an op's tensor operands or
/// results, in the order sharding rules count them).
SmallVector<Value> tensorValues(ValueRange values);

/// The position of `use` among its owner's tensor operands.
unsigned tensorOperandIndex(OpOperand &use);

/// The layout function result `i` ends in when its value is in `current`:
/// the declared one, else `current` with pending Partials reduced.
LayoutAttr resultLayout(func::FuncOp fn, unsigned i, LayoutAttr current);

/// The index `atMember` on member `member` of the group `index` numbers
/// (a shardx.axis_index) and `otherwise` on the others: the per-member
/// width of a side of a pad or a halo that only an end member differs on.
Value selectAtMember(OpBuilder &b, Location loc, Value index, int64_t member,
                     int64_t atMember, int64_t otherwise);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H
