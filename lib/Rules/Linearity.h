//===- Linearity.h - Which operands an op is linear in ----------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The linearity lattice the rules answer `isLinearIn` with: scalar code is a
// linear function of a set of "partial" values, independent of them, or
// neither. Shared by the linalg and elementwise rules.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_RULES_LINEARITY_H
#define SHARDX_LIB_RULES_LINEARITY_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include "llvm/ADT/SmallBitVector.h"

namespace mlir::shardx {

/// Whether the body of `op` yields a linear function of the tensor operands
/// in `partial` (operand numbers), its inits being accumulators: add/sub of
/// partials, scaling by or division by a non-partial, negation, float
/// casts, select against zero.
bool isBodyLinearIn(linalg::LinalgOp op, const llvm::SmallBitVector &partial);

/// Whether the elementwise arith op `op` (one result, no region) is linear
/// in its operands in `partial`.
bool isArithLinearIn(Operation *op, const llvm::SmallBitVector &partial);

} // namespace mlir::shardx

#endif // SHARDX_LIB_RULES_LINEARITY_H
