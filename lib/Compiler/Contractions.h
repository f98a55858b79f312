//===- Contractions.h - GEMM matching shared by the targets -----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_COMPILER_CONTRACTIONS_H
#define SHARDX_LIB_COMPILER_CONTRACTIONS_H

#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"

#include <optional>

namespace mlir::shardx {

/// A (batched) GEMM up to permutations of its operands and result: a
/// contraction with one batch, m, n and k dim at most, each operand map a
/// permutation of the dims it uses, one element type (or, with
/// `allowWidening`, bf16/f16 operands of one type and an f32 result, the
/// body widening them). Returns its dims.
std::optional<linalg::ContractionDimensions>
matchGemm(linalg::LinalgOp op, bool allowWidening = false);

} // namespace mlir::shardx

#endif // SHARDX_LIB_COMPILER_CONTRACTIONS_H
