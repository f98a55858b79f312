//===- OpSemantics.h - What propagation knows of op bodies ------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Facts about what an op computes that the sharding rules do not carry: the
// combiner of a reduction, whether an init is that combiner's identity,
// whether a body is linear in some operands (so a pending Partial may flow
// through it), and which values are only a shape or a splat.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_OPSEMANTICS_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_OPSEMANTICS_H

#include "shardx/Layout/Layout.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include "llvm/ADT/SmallBitVector.h"

#include <optional>

namespace mlir::shardx {

/// The combiner of a linalg op's reduction, when its yield is
/// `combine(out, x)`.
std::optional<::shardx::ReduceOp> getCombiner(linalg::LinalgOp op);

/// Whether `value` is a linalg.fill with the identity of `combiner`.
bool isIdentityFill(Value value, ::shardx::ReduceOp combiner);

/// Whether the op computes its results as a linear function of the tensor
/// operands in `partial` (operand indices), its init an accumulator.
bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial);

/// Values that are only a shape or a splat: rematerialized in any layout.
bool isRematerializable(Value v);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_OPSEMANTICS_H
