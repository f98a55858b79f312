//===- KernelPointerArgs.cpp - Kernel buffers passed as pointers ----------===//
//
// Part of ShardX.
//
// `shardx-kernel-pointer-args` (cpu target, right before the memref and func
// conversions to the LLVM dialect): a memref argument lowers to its whole
// descriptor, 3 + 2 * rank scalars that every call extracts from the
// caller's descriptor and the callee packs again. An outlined kernel's
// buffers have static shapes and strides (kernels are keyed by them), so
// each of its statically shaped and strided memref arguments becomes one
// pointer, to the buffer's element at its offset; the kernel rebuilds the
// descriptor from its type. A 32-layer GPT step makes 1,637 kernel calls:
// the host code built and took apart a descriptor for each of their
// buffers.
//
//   call @shardx_kernel_1(%v) : (memref<4x8xf32, strided<[8,1], offset: ?>>)
// becomes
//   %d = builtin.unrealized_conversion_cast %v : memref<...> to !llvm.struct
//   %q = llvm.getelementptr (extractvalue %d[1])[(extractvalue %d[2])]
//   call @shardx_kernel_1(%q) : (!llvm.ptr) -> ()
// and the kernel starts with
//   %a = builtin.unrealized_conversion_cast <descriptor: %q, %q, offset 0,
//          sizes [4, 8], strides [8, 1]> : !llvm.struct<...> to memref<...>
//
// The rebuilt descriptor's allocated pointer is the aligned one, which is
// right only where nothing reads it: a kernel (a loop nest) never does.
// With `layer-functions` (off in the cpu pipeline: MLIR's func conversion
// then spends seconds recomputing the host block's op order, see
// docs/Compiler.md), a layer function (`shardx_call_*`,
// shardx-outline-calls; 448 calls with about 36 buffers each in that step),
// which may free a buffer or hand its descriptor on, takes an argument as a
// pointer only where every use, through views, only addresses elements:
// loads, stores, copies, kernels and the runtime's `shardx_rt_*` functions
// (which read the aligned pointer only, as its memrefCopy does). A dealloc,
// a return, a call of another function or an op this pass does not know
// keeps the descriptor. Its static results travel as their allocated and
// aligned pointers (the caller frees them), the caller rebuilding the
// descriptor.
//
// The conversions then see the casts' other ends (reconcile-unrealized-casts
// folds each pair), the kernel's loops address the same elements as before,
// and the entry points and runtime calls keep their ABI.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/DataLayoutInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace {

/// The descriptor type a memref argument of a kernel is rebuilt as, or null
/// where the argument keeps the descriptor ABI: unranked, a dynamic size or
/// stride, a memory space, or an element type LLVM cannot address.
LLVM::LLVMStructType pointerArgDescriptor(Type type,
                                          const LLVMTypeConverter &converter) {
  auto memref = dyn_cast<MemRefType>(type);
  if (!memref || !memref.hasStaticShape() || memref.getMemorySpace())
    return nullptr;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(memref.getStridesAndOffset(strides, offset)) ||
      llvm::any_of(strides, ShapedType::isDynamic))
    return nullptr;
  if (!converter.convertType(memref.getElementType()))
    return nullptr;
  return dyn_cast_or_null<LLVM::LLVMStructType>(converter.convertType(memref));
}

/// `memref` as a descriptor of the two pointers, with its type's sizes and
/// strides and its static offset (0 for a dynamic one, which the caller
/// added to the pointer).
Value rebuildDescriptor(OpBuilder &b, Location loc, MemRefType memref,
                        LLVM::LLVMStructType descriptorType, Value allocated,
                        Value aligned) {
  auto [strides, offset] = memref.getStridesAndOffset();
  auto descriptor = MemRefDescriptor::poison(b, loc, descriptorType);
  descriptor.setAllocatedPtr(b, loc, allocated);
  descriptor.setAlignedPtr(b, loc, aligned);
  descriptor.setConstantOffset(b, loc,
                               ShapedType::isDynamic(offset) ? 0 : offset);
  for (auto [d, size] : llvm::enumerate(memref.getShape()))
    descriptor.setConstantSize(b, loc, d, size);
  for (auto [d, stride] : llvm::enumerate(strides))
    descriptor.setConstantStride(b, loc, d, stride);
  return UnrealizedConversionCastOp::create(b, loc, memref,
                                            static_cast<Value>(descriptor))
      .getResult(0);
}

/// Whether a use of `buffer` (an argument of a layer function), or of a
/// view of it, may read its allocated pointer: a dealloc, a return, a call
/// of a function other than a kernel or the runtime, an op not known here.
bool mayReadAllocatedPointer(BlockArgument buffer) {
  SmallVector<Value> work{buffer};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      // Element accesses and metadata.
      if (isa<memref::LoadOp, memref::CopyOp, memref::DimOp,
              memref::ExtractAlignedPointerAsIndexOp, memref::PrefetchOp>(user))
        continue;
      if (auto store = dyn_cast<memref::StoreOp>(user);
          store && &use == &store.getMemrefMutable())
        continue;
      // Views: the same allocated pointer, in their results.
      if (isa<memref::CastOp, memref::ReinterpretCastOp,
              memref::ExtractStridedMetadataOp, memref::TransposeOp,
              memref::SubViewOp, memref::ExpandShapeOp,
              memref::CollapseShapeOp>(user)) {
        for (Value result : user->getResults())
          if (isa<BaseMemRefType>(result.getType()))
            work.push_back(result);
        continue;
      }
      // Kernels are loop nests; the runtime reads the aligned pointer only
      // (lib/Runtime/CompiledCode.cpp, MemRefKernels.cpp).
      if (auto call = dyn_cast<func::CallOp>(user)) {
        StringRef callee = call.getCallee();
        if (callee.starts_with(shardx::kKernelPrefix) ||
            callee.starts_with("shardx_rt_"))
          continue;
      }
      return true;
    }
  }
  return false;
}

} // namespace

LogicalResult mlir::shardx::passKernelBuffersAsPointers(ModuleOp module,
                                                        bool layerFunctions) {
  MLIRContext *ctx = module.getContext();
  // The index width the conversions will use: the module's data layout.
  LowerToLLVMOptions options(ctx, DataLayout(module));
  LLVMTypeConverter converter(ctx, options);
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  OpBuilder b(ctx);
  auto isConverted = [layerFunctions](StringRef name) {
    return name.starts_with(kKernelPrefix) ||
           (layerFunctions && name.starts_with(kCallPrefix));
  };

  // Each kernel's and layer function's calls, found in one walk; one with
  // another use (a symbol reference that is not a call) keeps its ABI.
  // Uses that cannot be known (an op of unknown symbol semantics): every
  // function keeps its ABI.
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(&module.getBodyRegion());
  if (!uses)
    return success();
  llvm::DenseMap<StringAttr, SmallVector<func::CallOp>> calls;
  llvm::DenseSet<StringAttr> otherUses;
  for (const SymbolTable::SymbolUse &use : *uses) {
    StringAttr callee = use.getSymbolRef().getRootReference();
    if (!isConverted(callee.getValue()))
      continue;
    if (auto call = dyn_cast<func::CallOp>(use.getUser()))
      calls[callee].push_back(call);
    else
      otherUses.insert(callee);
  }

  for (auto fn : module.getOps<func::FuncOp>()) {
    bool kernel = fn.getName().starts_with(kKernelPrefix);
    bool layer = layerFunctions && fn.getName().starts_with(kCallPrefix);
    // A layer function's body says which buffers are safe: a declaration
    // keeps its ABI.
    if (!(kernel && fn.getNumResults() == 0) && !(layer && !fn.isExternal()))
      continue;
    if (otherUses.contains(fn.getSymNameAttr()))
      continue;
    FunctionType type = fn.getFunctionType();
    SmallVector<LLVM::LLVMStructType> descriptors;
    SmallVector<Type> argTypes;
    bool any = false;
    for (auto [i, arg] : llvm::enumerate(type.getInputs())) {
      LLVM::LLVMStructType descriptor = pointerArgDescriptor(arg, converter);
      if (descriptor && layer &&
          mayReadAllocatedPointer(fn.getBody().getArgument(i)))
        descriptor = nullptr;
      descriptors.push_back(descriptor);
      argTypes.push_back(descriptor ? ptrType : arg);
      any |= bool(descriptor);
    }
    if (!any)
      continue;

    // The callers: the element at the buffer's offset.
    for (func::CallOp call : calls.lookup(fn.getSymNameAttr())) {
      b.setInsertionPoint(call);
      Location loc = call.getLoc();
      SmallVector<Value> operands(call.getOperands());
      for (auto [i, descriptorType] : llvm::enumerate(descriptors)) {
        if (!descriptorType)
          continue;
        auto memref = cast<MemRefType>(type.getInput(i));
        Value cast = UnrealizedConversionCastOp::create(b, loc, descriptorType,
                                                        operands[i])
                         .getResult(0);
        MemRefDescriptor descriptor(cast);
        Value pointer = descriptor.alignedPtr(b, loc);
        if (ShapedType::isDynamic(memref.getStridesAndOffset().second))
          pointer = LLVM::GEPOp::create(
              b, loc, ptrType, converter.convertType(memref.getElementType()),
              pointer, ValueRange{descriptor.offset(b, loc)});
        operands[i] = pointer;
      }
      call->setOperands(operands);
    }

    // The callee: each such argument's descriptor rebuilt from its type.
    fn.setFunctionType(FunctionType::get(ctx, argTypes, type.getResults()));
    if (fn.isExternal())
      continue;
    Block &entry = fn.getBody().front();
    b.setInsertionPointToStart(&entry);
    for (auto [i, descriptorType] : llvm::enumerate(descriptors)) {
      if (!descriptorType)
        continue;
      BlockArgument arg = entry.getArgument(i);
      SmallVector<OpOperand *> argUses =
          llvm::map_to_vector(arg.getUses(), [](OpOperand &u) { return &u; });
      arg.setType(ptrType);
      // The caller added a dynamic offset to the pointer already.
      Value rebuilt =
          rebuildDescriptor(b, fn.getLoc(), cast<MemRefType>(type.getInput(i)),
                            descriptorType, arg, arg);
      for (OpOperand *u : argUses)
        u->set(rebuilt);
    }
  }

  // A layer function's statically shaped results with a static offset:
  // their allocated and aligned pointers, the descriptor rebuilt by the
  // caller (which frees them, so both pointers travel).
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (!layerFunctions || !fn.getName().starts_with(kCallPrefix) ||
        fn.isExternal() || otherUses.contains(fn.getSymNameAttr()))
      continue;
    FunctionType type = fn.getFunctionType();
    SmallVector<LLVM::LLVMStructType> descriptors;
    SmallVector<Type> resultTypes;
    bool any = false;
    for (Type result : type.getResults()) {
      LLVM::LLVMStructType descriptor = pointerArgDescriptor(result, converter);
      if (descriptor &&
          ShapedType::isDynamic(
              cast<MemRefType>(result).getStridesAndOffset().second))
        descriptor = nullptr;
      descriptors.push_back(descriptor);
      if (descriptor)
        resultTypes.append({ptrType, ptrType});
      else
        resultTypes.push_back(result);
      any |= bool(descriptor);
    }
    if (!any)
      continue;
    fn.setFunctionType(FunctionType::get(ctx, type.getInputs(), resultTypes));
    fn.walk([&](func::ReturnOp ret) {
      b.setInsertionPoint(ret);
      SmallVector<Value> operands;
      for (auto [value, descriptorType] :
           llvm::zip_equal(ret.getOperands(), descriptors)) {
        if (!descriptorType) {
          operands.push_back(value);
          continue;
        }
        MemRefDescriptor descriptor(UnrealizedConversionCastOp::create(
                                        b, ret.getLoc(), descriptorType, value)
                                        .getResult(0));
        operands.push_back(descriptor.allocatedPtr(b, ret.getLoc()));
        operands.push_back(descriptor.alignedPtr(b, ret.getLoc()));
      }
      ret->setOperands(operands);
    });
    for (func::CallOp call : calls.lookup(fn.getSymNameAttr())) {
      b.setInsertionPoint(call);
      Location loc = call.getLoc();
      auto newCall = func::CallOp::create(b, loc, fn.getSymName(), resultTypes,
                                          call.getOperands());
      newCall->setDiscardableAttrs(call->getDiscardableAttrDictionary());
      unsigned next = 0;
      for (auto [i, descriptorType] : llvm::enumerate(descriptors)) {
        if (!descriptorType) {
          call.getResult(i).replaceAllUsesWith(newCall.getResult(next++));
          continue;
        }
        Value allocated = newCall.getResult(next++);
        Value aligned = newCall.getResult(next++);
        call.getResult(i).replaceAllUsesWith(
            rebuildDescriptor(b, loc, cast<MemRefType>(type.getResult(i)),
                              descriptorType, allocated, aligned));
      }
      call.erase();
    }
  }
  return success();
}

namespace mlir::shardx {
#define GEN_PASS_DEF_KERNELPOINTERARGSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct KernelPointerArgsPass
    : shardx::impl::KernelPointerArgsPassBase<KernelPointerArgsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(shardx::passKernelBuffersAsPointers(getOperation(),
                                                   layerFunctions)))
      signalPassFailure();
  }
};

} // namespace
