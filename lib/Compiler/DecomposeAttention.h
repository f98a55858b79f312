//===- DecomposeAttention.h - shardx.attention as linalg ops ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_COMPILER_DECOMPOSEATTENTION_H
#define SHARDX_LIB_COMPILER_DECOMPOSEATTENTION_H

#include "mlir/IR/PatternMatch.h"

namespace mlir::shardx {

/// Replaces `op` (`shardx.attention`, `attention_dq` or `attention_dkv`) by
/// linalg ops on 3-D views of its tensors (DecomposeAttention.cpp).
LogicalResult decomposeAttention(RewriterBase &rewriter, Operation *op);

} // namespace mlir::shardx

#endif // SHARDX_LIB_COMPILER_DECOMPOSEATTENTION_H
