//===- GroupedMatmul.h - The importer's grouped matmuls ---------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The two forms in which the importer writes `_grouped_mm` (importer/ops/
// grouped.py), recognised by shardx-ragged-experts and shardx-localize.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_GROUPEDMATMUL_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_GROUPEDMATMUL_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <optional>

namespace mlir::shardx {

/// A grouped matmul, `g` (operand 2) the rows' groups, nondecreasing in
/// the row (the number of groups' ends at or before it), every term
/// `select(g[r] == e, x * w, 0)` added to the init:
enum class GroupedMatmulForm {
  /// `x [R, K] x w [E, K, N] -> [R, N]`, loops (r, n, e, k): `x (d0, d3)`,
  /// `w (d2, d3, d1)`, `g (d0)`, out `(d0, d1)`.
  Rows,
  /// `x [K, R] x w [R, N] -> [E, K, N]` (the weights' gradient), loops
  /// (e, k, n, r): `x (d1, d3)`, `w (d3, d2)`, `g (d3)`, out
  /// `(d0, d1, d2)`.
  Weights,
};

/// The form of `op`, or nullopt when it is not a grouped matmul.
std::optional<GroupedMatmulForm> matchGroupedMatmulForm(linalg::GenericOp op);

/// The same, also matching an expert loop offset by a value from outside
/// `op` (`index(e) + v`, shardx-localize's form of a split expert loop):
/// `*offset` is `v`, or null when the loop is not offset.
std::optional<GroupedMatmulForm> matchGroupedMatmulForm(linalg::GenericOp op,
                                                        Value *offset);

/// The loop of `form` that runs over the experts, and the one over the rows.
inline unsigned expertLoop(GroupedMatmulForm form) {
  return form == GroupedMatmulForm::Rows ? 2 : 0;
}
inline unsigned rowLoop(GroupedMatmulForm form) {
  return form == GroupedMatmulForm::Rows ? 0 : 3;
}

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_GROUPEDMATMUL_H
