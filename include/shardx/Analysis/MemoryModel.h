//===- MemoryModel.h - Per-rank memory of a local program -------*- C++ -*-===//
//
// Part of ShardX.
//
// How many bytes a rank holds at each op of a local program (after
// shardx-spmd: static per-rank shapes), and the peak: arguments held for the
// whole call (parameters, optimizer state, inputs), buffers the program
// allocates (activations, gradients, optimizer temporaries, collective
// buffers) alive from the op that makes them to their last use, and the
// results it returns. It models the CPU code generation (docs/Memory.md):
// one-shot bufferization writes an op's result into its destination when
// nothing reads the destination afterwards, elementwise chains fuse into one
// loop nest (shardx-fuse-tensor-ops), shardx-deallocate-buffers frees each
// buffer after its last use, and the runtime calls of collectives copy
// their input into a staging buffer that lives until the call (or its
// wait) is done. On a bufferized program (memref.alloc / memref.dealloc)
// it replays the allocations instead.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_ANALYSIS_MEMORYMODEL_H
#define SHARDX_ANALYSIS_MEMORYMODEL_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cstdint>
#include <string>

namespace mlir::shardx {

/// What a byte is for. Arguments are told apart by their attributes
/// (`torch.state` marks optimizer state; the arguments before the first
/// state are parameters, those after the last are inputs); temporaries by
/// the importer's phase in their location (forward, backward, optimizer).
enum class MemoryRole {
  Parameter,      ///< an argument before the optimizer state
  OptimizerState, ///< an argument with `torch.state`
  Input,          ///< another argument
  Activation,     ///< made in the forward phase (or with no phase)
  Gradient,       ///< made in the backward phase
  OptimizerTemp,  ///< made in the optimizer phase, not returned
  Collective,     ///< a collective's output, staging or packed bucket
  Result,         ///< returned by the function
};
constexpr size_t kNumMemoryRoles = 8;

/// The role's name in reports ("parameters", "optimizer state", ...).
llvm::StringRef memoryRoleName(MemoryRole role);

/// One buffer: bytes alive over ops [first, last] of the schedule (an
/// argument over all of them).
struct MemoryBuffer {
  int64_t bytes = 0;
  MemoryRole role = MemoryRole::Activation;
  int64_t first = 0;
  int64_t last = 0;
  bool argument = false;
  /// What made it (an op name or "argument N").
  std::string origin;
  /// The op that made it (null for an argument or a copy at the return).
  Operation *op = nullptr;
};

/// The per-rank memory of one function.
struct MemoryProfile {
  std::string function;
  /// The top-level ops in program order; live[i] is what is alive while
  /// ops[i] runs (its operands and its results).
  llvm::SmallVector<Operation *> ops;
  llvm::SmallVector<int64_t> live;
  llvm::SmallVector<MemoryBuffer> buffers;
  /// Bytes of the arguments (alive for the whole call).
  int64_t argumentBytes = 0;
  /// The most bytes alive at once, and the first op where that happens
  /// (-1 / null: no op; the peak is then the arguments).
  int64_t peakBytes = 0;
  int64_t peakIndex = -1;
  /// Bytes alive at the peak, by role.
  std::array<int64_t, kNumMemoryRoles> peakByRole{};
  /// The most bytes the program allocates itself at once (the peak without
  /// the arguments): what the runtime's meter measures.
  int64_t allocatedPeakBytes = 0;
  /// Whether it was modeled on buffers (a bufferized program).
  bool bufferized = false;
  /// Values of dynamic size with no bound found (counted as 0 bytes; an
  /// uneven shard's is bounded by its largest rank's at the tensor level).
  int64_t unsizedValues = 0;

  Operation *peakOp() const {
    return peakIndex >= 0 ? ops[peakIndex] : nullptr;
  }
  /// The summary printed by shardx-print-plan (several lines, no newline
  /// at the end).
  void print(llvm::raw_ostream &os) const;
  /// A JSON object: function, peak, by role, peak op and location, and the
  /// timeline (one value per op).
  void printJson(llvm::raw_ostream &os) const;
};

/// The memory profile of `fn` (one block; ops in nested regions count at
/// their top-level op), in its op order.
MemoryProfile computeMemoryProfile(func::FuncOp fn);

/// The CPU code generation's passes (the registered pipeline
/// `shardx-codegen-cpu`) up to `shardx-deallocate-buffers`, as a textual
/// pipeline on `builtin.module`: what turns a local program into the buffer
/// program the runtime allocates. Failure (with the reason in `error`) when
/// that pipeline is not registered.
FailureOr<std::string> getCpuBufferPipeline(std::string &error);

/// `bytes` in B / KiB / MiB / GiB with two decimals.
std::string formatBytes(int64_t bytes);

/// Whether `op` is a linalg.generic on tensors with one result, all loops
/// parallel, that does not read its destination and whose body is
/// arithmetic alone (arith ops and linalg.index; with `allowMath`, math
/// functions too).
bool isArithmeticElementwise(Operation *op, bool allowMath = false);

/// Whether `op` (a loop nest on tensors, or an elementwise arith op on
/// tensors) is cheaper to compute again in each elementwise reader than to
/// write once and read back in each: one result, all loops parallel, a
/// body of arithmetic alone (no math function, which would then run once
/// per reader; no gather) that does not read its destination, and inputs
/// of fewer bytes than its result (a bf16 tensor widened to f32, a one-hot
/// row made from the indices). With `allowMath`, the body may also call
/// math functions (the cuda target, whose elementwise kernels are bound by
/// memory, not arithmetic). shardx-fuse-tensor-ops gives such an op's
/// readers a copy each, and the memory model (which leaves math out) gives
/// it no buffer.
bool isCheaperToRecompute(Operation *op, bool allowMath = false);

} // namespace mlir::shardx

#endif // SHARDX_ANALYSIS_MEMORYMODEL_H
