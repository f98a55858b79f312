//===- FactorProjection.h - Layouts seen through sharding rules -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A sharding strategy of an op is an assignment of splits to the factors of
// its sharding rule (docs/Rules.md); these functions translate between an
// operand's or result's layout and that assignment.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FACTORPROJECTION_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FACTORPROJECTION_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Layout/Layout.h"
#include "shardx/Rules/ShardingRule.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace mlir::shardx {

/// The splits of each factor (strides relative to the factor), or none.
using Assignment = SmallVector<std::optional<DimSharding>>;

/// The number of pieces `d` splits its dim into.
int64_t splitCount(const DimSharding &d, ArrayRef<int64_t> meshShape);

/// How a tensor with factor `dims` and layout `layout` looks in the rule's
/// factors. Splits that do not each fall inside one factor are not seen.
Assignment viewThroughRule(const ShardingRule &rule,
                           ArrayRef<SmallVector<int64_t>> dims,
                           const Layout &layout, ArrayRef<int64_t> meshShape);

/// The layout a tensor with factor `dims` has under `assignment`, or
/// nullopt when some dim cannot express it.
std::optional<Layout> project(const ShardingRule &rule,
                              ArrayRef<SmallVector<int64_t>> dims,
                              const Assignment &assignment,
                              ArrayRef<int64_t> meshShape, int64_t meshRank);

/// Adds to `a` every factor sharding of `view` whose factor is free and
/// whose axes are unused.
void mergeInto(Assignment &a, const Assignment &view);

/// As mergeInto, and a factor sharding whose minor axes are used gives its
/// major splits before the first used one.
void mergeMajorSplitsInto(Assignment &a, const Assignment &view);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_FACTORPROJECTION_H
