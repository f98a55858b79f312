//===- FoldDescriptors.cpp - Descriptor fields read where they were set ---===//
//
// Part of ShardX.
//
// `shardx-fold-descriptors` (cpu target, after the conversions to the LLVM
// dialect): the memref lowering builds a descriptor for every allocation,
// view and argument, one `llvm.insertvalue` per field, and every use takes
// the fields it needs apart again, one `llvm.extractvalue` each. The host
// code is compiled at -O0 (emitArtifact), so LLVM keeps them all: in the
// 32-layer GPT step's host function, 88,000 of its 114,000 instructions
// (35,000 left).
// Here an extraction of a field that an insertion chain of the same
// function set becomes the inserted value (one of a field the chain did not
// set reads the aggregate the chain started from), and the insertions,
// extractions and constants left without uses go.
//
//   %0 = llvm.insertvalue %p, %poison[1] : !llvm.struct<(ptr, ptr, i64)>
//   %1 = llvm.insertvalue %c0, %0[2] : !llvm.struct<(ptr, ptr, i64)>
//   %2 = llvm.extractvalue %1[1] : !llvm.struct<(ptr, ptr, i64)>
//   llvm.call @f(%2) : (!llvm.ptr) -> ()
// becomes
//   llvm.call @f(%p) : (!llvm.ptr) -> ()
//
// Outlined kernels are left as they are: they are optimized (and keyed by
// the kernel cache) on their own.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_FOLDDESCRIPTORSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// Where the field at `position` of `aggregate`, the end of a chain of
/// `llvm.insertvalue`s, comes from: the value inserted there, else the
/// aggregate the chain started from (the field is its own); null where
/// only part of the field was inserted or the field lies in an inserted
/// sub-aggregate that no chain built.
struct Field {
  Value inserted;
  Value base;
};
Field findField(Value aggregate, ArrayRef<int64_t> position) {
  bool whole = true; // `position` is the extraction's own
  while (auto insert = aggregate.getDefiningOp<LLVM::InsertValueOp>()) {
    ArrayRef<int64_t> at = insert.getPosition();
    size_t common = std::min(at.size(), position.size());
    if (at.take_front(common) != position.take_front(common)) {
      aggregate = insert.getContainer();
      continue;
    }
    if (at.size() == position.size())
      return {insert.getValue(), nullptr};
    // A part of the field extracted was inserted: not one value.
    if (at.size() > position.size())
      return {};
    // A sub-aggregate holding the field was inserted: look into it.
    aggregate = insert.getValue();
    position = position.drop_front(at.size());
    whole = false;
  }
  return {nullptr, whole ? aggregate : nullptr};
}

struct FoldDescriptorsPass
    : shardx::impl::FoldDescriptorsPassBase<FoldDescriptorsPass> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<FunctionOpInterface>()) {
      if (fn.isExternal() || fn.getName().starts_with(shardx::kKernelPrefix))
        continue;
      fn.walk([](LLVM::ExtractValueOp extract) {
        Field field = findField(extract.getContainer(), extract.getPosition());
        if (field.inserted)
          extract.replaceAllUsesWith(field.inserted);
        else if (field.base)
          extract.getContainerMutable().assign(field.base);
      });
      // Last to first: a chain's insertions go after its last one.
      for (Block &block : fn.getFunctionBody())
        for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
          if (isOpTriviallyDead(&op))
            op.erase();
    }
  }
};

} // namespace
