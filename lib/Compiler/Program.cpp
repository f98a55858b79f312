//===- Program.cpp - The program around code generation -------------------===//
//
// Part of ShardX.
//
// What code generation needs from the program and the tools: the program
// description artifacts embed, the entry points, the global program of
// --unsharded, and the tools' context and input.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/IR/IndexChecks.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/RuntimeDType.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/InitAll.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "shardx/Exec/ProgramInfo.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/Timing.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

std::vector<int64_t> shapeOf(Type type) {
  std::vector<int64_t> shape;
  if (auto shaped = dyn_cast<ShapedType>(type); shaped && shaped.hasRank())
    for (int64_t d : shaped.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? int64_t(-1) : d);
  return shape;
}

/// One input or output of `fn` as the executor sees it: local and global
/// shape, element type and layout (the attribute and its spelling).
FailureOr<exec::TensorSpec> describeValue(func::FuncOp fn, Type type,
                                          Type global, Attribute layout) {
  // The executor and the binding allocate and scatter by the global shape,
  // and the entry wrappers pass every argument as a tensor's descriptor: a
  // scalar argument failed the translation to LLVM IR, a dynamic shape
  // aborted the executor.
  auto globalTensor = dyn_cast<RankedTensorType>(global);
  if (!globalTensor || !globalTensor.hasStaticShape() ||
      !isa<RankedTensorType>(type))
    return fn.emitError("entry point ")
           << fn.getSymName() << " takes or returns " << global
           << "; entry points take and return ranked tensors of static "
              "global shape (a scalar as a 0-d tensor, tensor<i64>)";
  exec::TensorSpec spec;
  spec.shape = shapeOf(type);
  spec.globalShape = shapeOf(global);
  auto shaped = dyn_cast<ShapedType>(type);
  Type element = shaped ? shaped.getElementType() : type;
  std::optional<rt::DType> dtype = getRuntimeDType(element);
  if (!dtype)
    return fn.emitError("entry point ")
           << fn.getSymName() << " takes or returns " << element
           << " elements, which the runtime does not have (f32, f64, bf16, "
              "f16, i64, i32, i16, i8, i1, index)";
  spec.dtype = *dtype;
  if (auto l = dyn_cast_or_null<mlir::shardx::LayoutAttr>(layout)) {
    spec.layout = l.getLayout();
    llvm::raw_string_ostream os(spec.layoutText);
    Attribute(l).print(os);
  }
  return spec;
}

} // namespace

std::string mlir::shardx::describeProgram(ModuleOp module) {
  exec::ProgramInfo info;
  module.walk([&](mlir::shardx::MeshOp mesh) {
    info.meshes.push_back(
        {mesh.getSymName().str(),
         std::vector<int64_t>(mesh.getShape().begin(), mesh.getShape().end())});
  });
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isPrivate() || fn.isExternal())
      continue;
    exec::EntryPoint &entry = info.functions.emplace_back();
    entry.name = fn.getSymName().str();
    FunctionType type = fn.getFunctionType();
    // After SPMD expansion the global side of the calling convention is in
    // the signature attribute; an unsharded program is its own global form.
    auto sig = fn->getAttrOfType<DictionaryAttr>("shardx.signature");
    auto sigEntry = [&](StringRef key, unsigned i) -> Attribute {
      if (!sig)
        return nullptr;
      auto arr = sig.getAs<ArrayAttr>(key);
      return arr && i < arr.size() ? arr[i] : nullptr;
    };
    auto describe = [&](TypeRange types, StringRef typesKey,
                        StringRef layoutsKey,
                        std::vector<exec::TensorSpec> &specs) {
      for (auto [i, t] : llvm::enumerate(types)) {
        auto g = dyn_cast_or_null<TypeAttr>(sigEntry(typesKey, i));
        FailureOr<exec::TensorSpec> spec =
            describeValue(fn, t, g ? g.getValue() : t, sigEntry(layoutsKey, i));
        if (failed(spec))
          return failure();
        specs.push_back(std::move(*spec));
      }
      return success();
    };
    if (failed(describe(type.getInputs(), "arg_types", "arg_layouts",
                        entry.inputs)) ||
        failed(describe(type.getResults(), "result_types", "result_layouts",
                        entry.outputs)))
      return "";
    if (sig)
      if (auto mesh = sig.getAs<FlatSymbolRefAttr>("mesh"))
        entry.mesh = mesh.getValue().str();
    // The output the importer marked as its index checks' code (verified
    // by the dialect: a list of checks on a 0-d i64 result).
    for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i) {
      Attribute marked = fn.getResultAttr(i, kIndexChecksAttrName);
      if (!marked)
        continue;
      FailureOr<SmallVector<IndexCheckText>> checks = getIndexChecks(marked);
      if (failed(checks) || entry.checkOutput >= 0) {
        fn.emitError("entry point ")
            << fn.getSymName() << " has more than one '" << kIndexChecksAttrName
            << "' result, or a malformed one";
        return "";
      }
      entry.checkOutput = i;
      for (auto [exception, message] : *checks)
        entry.checks.push_back({exception.str(), message.str()});
    }
  }
  return exec::writeProgramInfo(info);
}

void mlir::shardx::prepareEntryPoints(ModuleOp module) {
  // Entry points get C wrappers taking pointers to memref descriptors, and
  // read-only arguments: launchers pass the caller's buffers in place, and
  // bufferization copies an argument before the program writes to it.
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isPrivate() || fn.isExternal())
      continue;
    fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                UnitAttr::get(module.getContext()));
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
      if (isa<TensorType>(fn.getArgument(i).getType()))
        fn.setArgAttr(i, bufferization::BufferizationDialect::kWritableAttrName,
                      BoolAttr::get(module.getContext(), false));
  }
}

/// Removes every ShardX construct that has no effect on global values.
LogicalResult mlir::shardx::stripToGlobalProgram(ModuleOp module) {
  module.walk([](func::FuncOp fn) {
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
      fn.removeArgAttr(i, "shardx.layout");
    for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
      fn.removeResultAttr(i, StringAttr::get(fn.getContext(), "shardx.layout"));
  });
  WalkResult result = module.walk([](Operation *op) {
    op->removeAttr("shardx.layouts");
    op->removeAttr("shardx.operand_layouts");
    if (isa<mlir::shardx::AnnotateOp, mlir::shardx::RedistributeOp>(op)) {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
      return WalkResult::skip();
    }
    if (isa<mlir::shardx::MeshOp>(op)) {
      op->erase();
      return WalkResult::skip();
    }
    if (op->getDialect() &&
        op->getDialect()->getNamespace() == "shardx" && !isa<mlir::shardx::MeshOp>(op) &&
        !mlir::shardx::isShardXComputation(op)) {
      op->emitError("the unsharded program cannot contain '")
          << op->getName() << "' (a per-rank operation)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}


std::unique_ptr<MLIRContext> mlir::shardx::createToolContext() {
  registerAllPasses();
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllShardXDialects(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

OwningOpRef<ModuleOp> mlir::shardx::loadProgram(StringRef path,
                                                MLIRContext &context,
                                                StringRef tool) {
  std::string error;
  auto file = openInputFile(path, &error);
  if (!file) {
    llvm::errs() << tool << ": error: " << error << "\n";
    return nullptr;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  // A program annotated for upstream's partitioner (the shard dialect) is
  // imported as it is loaded, its diagnostics shown against the source
  // (docs/ShardImport.md).
  if (module && hasShardDialectOps(*module)) {
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    if (failed(importShardProgram(*module)))
      return nullptr;
  }
  return module;
}

namespace mlir::shardx {
#define GEN_PASS_DEF_RECORDPROGRAMINFOPASS
#define GEN_PASS_DEF_PREPAREENTRYPOINTSPASS
#define GEN_PASS_DEF_DROPMESHESPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct RecordProgramInfoPass
    : mlir::shardx::impl::RecordProgramInfoPassBase<RecordProgramInfoPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string info = mlir::shardx::describeProgram(module);
    if (info.empty())
      return signalPassFailure();
    module->setAttr(mlir::shardx::kProgramInfoAttr,
                    StringAttr::get(module.getContext(), info));
    // The description holds the index checks from here on; code
    // generation does not carry result attributes.
    StringAttr checks = StringAttr::get(module.getContext(),
                                        mlir::shardx::kIndexChecksAttrName);
    module.walk([&](func::FuncOp fn) {
      for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
        fn.removeResultAttr(i, checks);
    });
  }
};

struct PrepareEntryPointsPass
    : mlir::shardx::impl::PrepareEntryPointsPassBase<PrepareEntryPointsPass> {
  void runOnOperation() override {
    mlir::shardx::prepareEntryPoints(getOperation());
  }
};

struct DropMeshesPass : mlir::shardx::impl::DropMeshesPassBase<DropMeshesPass> {
  void runOnOperation() override {
    for (auto mesh : llvm::make_early_inc_range(
             getOperation().getOps<mlir::shardx::MeshOp>()))
      mesh.erase();
  }
};

} // namespace
