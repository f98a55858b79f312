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
// The conversions then see the casts' other ends (reconcile-unrealized-casts
// folds each pair), the kernel's loops address the same elements as before,
// and the entry points, layer functions and runtime calls keep their ABI.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
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

} // namespace

LogicalResult mlir::shardx::passKernelBuffersAsPointers(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  // The index width the conversions will use: the module's data layout.
  LowerToLLVMOptions options(ctx, DataLayout(module));
  LLVMTypeConverter converter(ctx, options);
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  OpBuilder b(ctx);

  // Each kernel's calls, found in one walk; a kernel with another use (a
  // symbol reference that is not a call) keeps its ABI.
  // Uses that cannot be known (an op of unknown symbol semantics): every
  // kernel keeps its ABI.
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(&module.getBodyRegion());
  if (!uses)
    return success();
  llvm::DenseMap<StringAttr, SmallVector<func::CallOp>> calls;
  llvm::DenseSet<StringAttr> otherUses;
  for (const SymbolTable::SymbolUse &use : *uses) {
    StringAttr callee = use.getSymbolRef().getRootReference();
    if (!callee.getValue().starts_with(kKernelPrefix))
      continue;
    if (auto call = dyn_cast<func::CallOp>(use.getUser()))
      calls[callee].push_back(call);
    else
      otherUses.insert(callee);
  }

  for (auto kernel : module.getOps<func::FuncOp>()) {
    if (!kernel.getName().starts_with(kKernelPrefix) ||
        kernel.getNumResults() != 0 ||
        otherUses.contains(kernel.getSymNameAttr()))
      continue;
    FunctionType type = kernel.getFunctionType();
    SmallVector<LLVM::LLVMStructType> descriptors;
    SmallVector<Type> argTypes;
    bool any = false;
    for (Type arg : type.getInputs()) {
      descriptors.push_back(pointerArgDescriptor(arg, converter));
      argTypes.push_back(descriptors.back() ? ptrType : arg);
      any |= bool(descriptors.back());
    }
    if (!any)
      continue;

    // The callers: the element at the buffer's offset.
    for (func::CallOp call : calls.lookup(kernel.getSymNameAttr())) {
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

    // The kernel: each such argument's descriptor rebuilt from its type.
    kernel.setFunctionType(FunctionType::get(ctx, argTypes, {}));
    if (kernel.isExternal())
      continue;
    Block &entry = kernel.getBody().front();
    b.setInsertionPointToStart(&entry);
    Location loc = kernel.getLoc();
    for (auto [i, descriptorType] : llvm::enumerate(descriptors)) {
      if (!descriptorType)
        continue;
      auto memref = cast<MemRefType>(type.getInput(i));
      auto [strides, offset] = memref.getStridesAndOffset();
      BlockArgument arg = entry.getArgument(i);
      SmallVector<OpOperand *> argUses =
          llvm::map_to_vector(arg.getUses(), [](OpOperand &u) { return &u; });
      arg.setType(ptrType);
      auto descriptor = MemRefDescriptor::poison(b, loc, descriptorType);
      descriptor.setAllocatedPtr(b, loc, arg);
      descriptor.setAlignedPtr(b, loc, arg);
      // The caller added a dynamic offset to the pointer already.
      descriptor.setConstantOffset(b, loc,
                                   ShapedType::isDynamic(offset) ? 0 : offset);
      for (auto [d, size] : llvm::enumerate(memref.getShape()))
        descriptor.setConstantSize(b, loc, d, size);
      for (auto [d, stride] : llvm::enumerate(strides))
        descriptor.setConstantStride(b, loc, d, stride);
      auto cast = UnrealizedConversionCastOp::create(
          b, loc, memref, static_cast<Value>(descriptor));
      for (OpOperand *u : argUses)
        u->set(cast.getResult(0));
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
  void runOnOperation() override {
    if (failed(shardx::passKernelBuffersAsPointers(getOperation())))
      signalPassFailure();
  }
};

} // namespace
