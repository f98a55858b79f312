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
/// linalg ops on 3-D views of its tensors (DecomposeAttention.cpp), over
/// blocks of keys whose scores take at most `blockBytes` each (0: one
/// block). A backward op's `partner` (findAttentionPartner), if given, is
/// replaced with it: their blocks written together, at `op`, which must
/// come first.
LogicalResult decomposeAttention(RewriterBase &rewriter, Operation *op,
                                 int64_t blockBytes,
                                 Operation *partner = nullptr);

/// The other backward op of the same attention as `op` (`attention_dkv` for
/// an `attention_dq` and back: the same operands and attributes, in the
/// same block), or null.
Operation *findAttentionPartner(Operation *op);

} // namespace mlir::shardx

#endif // SHARDX_LIB_COMPILER_DECOMPOSEATTENTION_H
