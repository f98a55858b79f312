//===- HostCode.h - The host unit's LLVM IR, for fast selection -*- C++ -*-===//
//
// Part of ShardX.
//
// Rewrites of the host unit's LLVM IR (Artifact.cpp's optimize, before the
// host code is compiled at -O0) that keep memref descriptors, which are
// structs, away from LLVM's fast instruction selector: it hands whatever
// aggregate it meets to the DAG selector.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_COMPILER_HOSTCODE_H
#define SHARDX_LIB_COMPILER_HOSTCODE_H

namespace llvm {
class Module;
} // namespace llvm

namespace mlir::shardx::host {

/// Inlines the program's function into its C wrapper (its one caller) and
/// makes the wrapper's aggregate loads and stores loads and stores of their
/// scalars.
void scalarizeEntryAggregates(llvm::Module &module);

/// `extractvalue (extractvalue %a, i), j` becomes `extractvalue %a, i, j`.
void flattenExtractChains(llvm::Module &module);

/// A local function returning an aggregate stores it through a pointer its
/// callers pass (one stack slot per caller and struct type) and returns
/// void; its callers load the fields they extracted.
void demoteAggregateReturns(llvm::Module &module);

/// Puts each run of instructions the fast selector does not take in a
/// block of its own.
void isolateAggregateCode(llvm::Module &module);

} // namespace mlir::shardx::host

#endif // SHARDX_LIB_COMPILER_HOSTCODE_H
