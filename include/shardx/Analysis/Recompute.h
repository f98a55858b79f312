//===- Recompute.h - Forward values computed again --------------*- C++ -*-===//
//
// Part of ShardX.
//
// The transformation under `shardx-recompute-activations`' selective and
// aggressive policies (lib/Compiler/Recompute.cpp, docs/Compiler.md
// "Activation recomputation"): forward values that the backward pass reads
// are copied just before their first backward reader, so that the forward
// value dies after its last forward reader. Shared by that pass and by
// shardx-auto-shard, which prices a plan's local program with them
// (docs/Memory.md, "Automatic sharding under a budget").
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_ANALYSIS_RECOMPUTE_H
#define SHARDX_ANALYSIS_RECOMPUTE_H

#include "shardx/Analysis/MemoryModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <set>
#include <utility>

namespace mlir::shardx {

/// The attribute on every copy.
inline constexpr llvm::StringLiteral kRecomputedAttrName = "shardx.recomputed";

/// The policy shardx-auto-shard chose for a function to fit its memory
/// budget (`"selective"` or `"aggressive"`), which
/// `shardx-recompute-activations{policy=plan}` (shardx-compile's default)
/// applies.
inline constexpr llvm::StringLiteral kRecomputePolicyAttrName =
    "shardx.recompute";

/// A forward value by its defining op's position in the function's block
/// and its result number: the same value in a clone of the function.
using RecomputeKey = std::pair<unsigned, unsigned>;

/// A forward value `recomputeActivations` (aggressive) would compute again,
/// with its bytes and the loop iterations of the chain that recomputes it.
struct RecomputeCandidate {
  RecomputeKey key;
  int64_t bytes = 0;
  int64_t cost = 0;
};

/// What `recomputeActivations` did: the ops copied and their loop
/// iterations (a linalg op's static loop ranges' product; a reshape or an
/// empty tensor 0), the unit the propagation cost model prices compute in.
struct RecomputeResult {
  unsigned copied = 0;
  int64_t iterations = 0;
};

/// Copies the recomputable forward values of `func` before their first
/// backward reader: `selective` (elementwise kernels and reshapes) or,
/// with `aggressive`, also contractions and reductions whose inputs the
/// backward pass keeps anyway. With `only`, only the backward reads of
/// those values. Nothing in a function without a backward phase.
RecomputeResult
recomputeActivations(func::FuncOp func, bool aggressive,
                     const std::set<RecomputeKey> *only = nullptr);

/// The values `recomputeActivations(func, /*aggressive=*/true)` would
/// compute again, in program order.
SmallVector<RecomputeCandidate> recomputeCandidates(func::FuncOp func);

/// Whether `op` may be computed twice at all: no side effects, no call
/// (collectives are runtime calls and run once).
bool isRepeatable(Operation *op);

/// The most bytes of activation (forward-phase) buffers alive at once in
/// `profile`, and the number of ops where that many are alive.
std::pair<int64_t, int64_t> activationPeak(const MemoryProfile &profile);

} // namespace mlir::shardx

#endif // SHARDX_ANALYSIS_RECOMPUTE_H
