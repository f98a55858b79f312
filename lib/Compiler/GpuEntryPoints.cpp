//===- GpuEntryPoints.cpp - The cuda target's staged entry points -----------===//
//
// Part of ShardX.
//
// The cuda target's entry points: each public function's buffers recorded
// before bufferization (shardx-record-staging-signatures), then the
// wrappers that stage them between host and device
// (shardx-add-staging-wrappers).
//
//===----------------------------------------------------------------------===//


#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_RECORDSTAGINGSIGNATURESPASS
#define GEN_PASS_DEF_ADDSTAGINGWRAPPERSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// The module attribute of shardx-record-staging-signatures.
constexpr llvm::StringLiteral kStagingSignatures = "shardx.staging_signatures";

/// Per public function, the buffers of its calling convention for the
/// runtime's staging: outputs then inputs, each "O|I<rank>:<element bytes>".
DictionaryAttr entrySignatures(ModuleOp module) {
  SmallVector<NamedAttribute> signatures;
  auto describe = [](char kind, Type type) {
    auto shaped = cast<ShapedType>(type);
    unsigned bits = shaped.getElementTypeBitWidth();
    return std::string(1, kind) + std::to_string(shaped.getRank()) + ":" +
           std::to_string((bits + 7) / 8) + " ";
  };
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isPrivate() || fn.isExternal())
      continue;
    std::string sig;
    for (Type t : fn.getFunctionType().getResults())
      if (isa<ShapedType>(t))
        sig += describe('O', t);
    for (Type t : fn.getFunctionType().getInputs())
      if (isa<ShapedType>(t))
        sig += describe('I', t);
    signatures.push_back(NamedAttribute(
        fn.getSymNameAttr(), StringAttr::get(module.getContext(), sig)));
  }
  return DictionaryAttr::get(module.getContext(), signatures);
}

/// For each `_mlir_ciface_<f>(p0, ..., pk)` with a signature, adds
/// `shardx_entry_<f>(argv)`: the launcher's host buffers go to the device
/// (`shardx_rt_cuda_stage_in` returns argv with device descriptors), the
/// program runs on them (through the device entry below), and its results come back as host buffers in the
/// launcher's result descriptors (`shardx_rt_cuda_stage_out`). Also
/// `shardx_entry_<f>_device(deviceArgv)`, the program alone on device
/// descriptors, and `shardx_entry_<f>_resident(argv)`, which stages once
/// and runs the device entry repeatedly (`shardx_rt_cuda_run_resident`).
void addStagingEntryWrappers(ModuleOp module, DictionaryAttr signatures) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto voidType = LLVM::LLVMVoidType::get(ctx);
  auto declare = [&](StringRef name, Type result, ArrayRef<Type> args) {
    if (auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
      return fn;
    b.setInsertionPointToStart(module.getBody());
    return LLVM::LLVMFuncOp::create(b, module.getLoc(), name,
                                    LLVM::LLVMFunctionType::get(result, args));
  };
  LLVM::LLVMFuncOp stageIn =
      declare("shardx_rt_cuda_stage_in", ptr, {ptr, ptr});
  LLVM::LLVMFuncOp stageOut =
      declare("shardx_rt_cuda_stage_out", voidType, {ptr, ptr, ptr});
  LLVM::LLVMFuncOp runResident =
      declare("shardx_rt_cuda_run_resident", voidType, {ptr, ptr, ptr});
  SmallVector<LLVM::LLVMFuncOp> entries;
  for (auto fn : module.getOps<LLVM::LLVMFuncOp>())
    if (fn.getName().starts_with("_mlir_ciface_") && !fn.isExternal() &&
        signatures.contains(fn.getName().drop_front(strlen("_mlir_ciface_"))))
      entries.push_back(fn);
  // A function `void name(ptr)` at the end of the module whose body
  // `build` fills from its argument.
  auto define = [&](const Twine &name, Location loc,
                    llvm::function_ref<void(Value)> build) {
    b.setInsertionPointToEnd(module.getBody());
    auto fn = LLVM::LLVMFuncOp::create(
        b, loc, name.str(), LLVM::LLVMFunctionType::get(voidType, {ptr}));
    b.setInsertionPointToStart(fn.addEntryBlock(b));
    build(fn.getArgument(0));
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    return fn;
  };
  for (LLVM::LLVMFuncOp fn : entries) {
    StringRef name = fn.getName().drop_front(strlen("_mlir_ciface_"));
    Location loc = fn.getLoc();
    std::string sig = signatures.getAs<StringAttr>(name).getValue().str();
    sig.push_back('\0');
    b.setInsertionPointToEnd(module.getBody());
    auto global = LLVM::GlobalOp::create(
        b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), sig.size()),
        /*isConstant=*/true, LLVM::Linkage::Internal,
        ("shardx_signature_" + name).str(), b.getStringAttr(sig));

    // shardx_entry_<f>_device(deviceArgv): the program on device
    // descriptors (argv as stage_in returns it), no copies, no sync.
    auto onDevice =
        define("shardx_entry_" + name + "_device", loc, [&](Value device) {
          SmallVector<Value> args;
          for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i) {
            Value slot = LLVM::GEPOp::create(
                b, loc, ptr, ptr, device, ArrayRef<LLVM::GEPArg>{int32_t(i)});
            args.push_back(LLVM::LoadOp::create(b, loc, ptr, slot));
          }
          LLVM::CallOp::create(b, loc, fn, args);
        });

    // shardx_entry_<f>(argv): staged in, the device entry, staged out.
    define("shardx_entry_" + name, loc, [&](Value argv) {
      Value sigPtr = LLVM::AddressOfOp::create(b, loc, global);
      Value device =
          LLVM::CallOp::create(b, loc, stageIn, ValueRange{argv, sigPtr})
              .getResult();
      LLVM::CallOp::create(b, loc, onDevice, ValueRange{device});
      LLVM::CallOp::create(b, loc, stageOut, ValueRange{argv, device, sigPtr});
    });

    // shardx_entry_<f>_resident(argv): the launcher's ABI, with the inputs
    // staged once and the program run on them as often as
    // shardx_rt_cuda_resident_config asked (shardx-gpu-exec --resident).
    define("shardx_entry_" + name + "_resident", loc, [&](Value argv) {
      Value sigPtr = LLVM::AddressOfOp::create(b, loc, global);
      Value devicePtr = LLVM::AddressOfOp::create(b, loc, onDevice);
      LLVM::CallOp::create(b, loc, runResident,
                           ValueRange{argv, sigPtr, devicePtr});
    });
  }
}

struct RecordStagingSignaturesPass
    : mlir::shardx::impl::RecordStagingSignaturesPassBase<
          RecordStagingSignaturesPass> {
  void runOnOperation() override {
    getOperation()->setAttr(kStagingSignatures,
                            entrySignatures(getOperation()));
  }
};


struct AddStagingWrappersPass
    : mlir::shardx::impl::AddStagingWrappersPassBase<AddStagingWrappersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto signatures = module->getAttrOfType<DictionaryAttr>(kStagingSignatures);
    if (!signatures) {
      module.emitError("shardx-add-staging-wrappers: no '")
          << kStagingSignatures
          << "' (run shardx-record-staging-signatures before bufferization)";
      return signalPassFailure();
    }
    module->removeAttr(kStagingSignatures);
    addStagingEntryWrappers(module, signatures);
  }
};


} // namespace
