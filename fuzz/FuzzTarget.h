//===- FuzzTarget.h - Shared pieces of the ShardX fuzz targets --*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The fuzz targets implement libFuzzer's interface (LLVMFuzzerTestOneInput,
// LLVMFuzzerInitialize, LLVMFuzzerCustomMutator). They link either with
// libFuzzer (SHARDX_ENABLE_FUZZ, clang) or with StandaloneMain.cpp, a small
// deterministic driver for regular builds. Inputs are MLIR text; user errors
// must end as diagnostics, so a crash, an abort or a hang is a bug.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_FUZZ_FUZZTARGET_H
#define SHARDX_FUZZ_FUZZTARGET_H

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>
#include <memory>

extern "C" {
/// libFuzzer's byte-level mutator (libFuzzer defines it; the standalone
/// driver has its own).
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);
}

namespace mlir::shardx::fuzz {

/// A fresh context per input: the ShardX dialect records mesh shapes while
/// parsing, and uniqued attributes would pile up, so nothing may carry over
/// from one input to the next. Diagnostics are dropped (they are the
/// expected outcome of most inputs). With `allDialects`, every dialect
/// shardx-opt registers; otherwise only ShardX.
std::unique_ptr<mlir::MLIRContext> makeContext(bool allDialects);

/// Reports a broken invariant (a bug, not a user error) and aborts, so that
/// the fuzzer keeps the input.
[[noreturn]] void reportBug(llvm::StringRef what, llvm::StringRef detail);

/// Mutates MLIR text in place, aware of its tokens: integers become
/// boundary values, placements and mesh shapes change, lines are duplicated,
/// dropped or swapped, clauses are inserted. Returns the new size (at most
/// `maxSize`). Deterministic in `seed`.
size_t mutateMlirText(uint8_t *data, size_t size, size_t maxSize,
                      unsigned seed);

} // namespace mlir::shardx::fuzz

#endif // SHARDX_FUZZ_FUZZTARGET_H
