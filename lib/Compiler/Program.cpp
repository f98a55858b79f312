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
#include "shardx/Layout/LayoutJson.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/Timing.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

using namespace mlir;


namespace {

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

llvm::json::Array shapeJson(Type type) {
  llvm::json::Array shape;
  if (auto shaped = dyn_cast<ShapedType>(type); shaped && shaped.hasRank())
    for (int64_t d : shaped.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? int64_t(-1) : d);
  return shape;
}

/// A layout as data for the executor: its JSON form (shardx/Layout/
/// LayoutJson.h, shared with the executor and Python) plus its spelling.
llvm::json::Object layoutJson(mlir::shardx::LayoutAttr attr) {
  llvm::Expected<llvm::json::Value> value =
      llvm::json::parse(::shardx::layoutToJsonText(attr.getLayout()));
  // The text comes from nlohmann::json::dump: it always parses.
  assert(value && value->getAsObject() && "layoutToJsonText wrote bad JSON");
  llvm::json::Object obj = std::move(*value->getAsObject());
  std::string text;
  llvm::raw_string_ostream os(text);
  Attribute(attr).print(os);
  obj["text"] = text;
  return obj;
}

llvm::json::Object describeValue(Type type, Type global, Attribute layout) {
  llvm::json::Object obj;
  auto shaped = dyn_cast<ShapedType>(type);
  obj["shape"] = shapeJson(type);
  obj["global_shape"] = shapeJson(global);
  obj["dtype"] = typeString(shaped ? shaped.getElementType() : type);
  if (auto l = dyn_cast_or_null<mlir::shardx::LayoutAttr>(layout))
    obj["layout"] = layoutJson(l);
  return obj;
}

} // namespace

std::string mlir::shardx::describeProgram(ModuleOp module) {
  llvm::json::Object root;
  root["version"] = 1;
  llvm::json::Array meshes;
  module.walk([&](mlir::shardx::MeshOp mesh) {
    llvm::json::Object m;
    m["name"] = mesh.getSymName().str();
    llvm::json::Array shape;
    for (int64_t s : mesh.getShape())
      shape.push_back(s);
    m["shape"] = std::move(shape);
    meshes.push_back(std::move(m));
  });
  root["meshes"] = std::move(meshes);
  llvm::json::Array functions;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isPrivate() || fn.isExternal())
      continue;
    llvm::json::Object f;
    f["name"] = fn.getSymName().str();
    llvm::json::Array inputs, outputs;
    FunctionType type = fn.getFunctionType();
    // After SPMD expansion the global side of the calling convention is in
    // the signature attribute; an unsharded program is its own global form.
    auto sig = fn->getAttrOfType<DictionaryAttr>("shardx.signature");
    auto entry = [&](StringRef key, unsigned i) -> Attribute {
      if (!sig)
        return nullptr;
      auto arr = sig.getAs<ArrayAttr>(key);
      return arr && i < arr.size() ? arr[i] : nullptr;
    };
    for (auto [i, t] : llvm::enumerate(type.getInputs())) {
      auto g = dyn_cast_or_null<TypeAttr>(entry("arg_types", i));
      inputs.push_back(
          describeValue(t, g ? g.getValue() : t, entry("arg_layouts", i)));
    }
    for (auto [i, t] : llvm::enumerate(type.getResults())) {
      auto g = dyn_cast_or_null<TypeAttr>(entry("result_types", i));
      outputs.push_back(
          describeValue(t, g ? g.getValue() : t, entry("result_layouts", i)));
    }
    if (sig)
      if (auto mesh = sig.getAs<FlatSymbolRefAttr>("mesh"))
        f["mesh"] = mesh.getValue().str();
    f["inputs"] = std::move(inputs);
    f["outputs"] = std::move(outputs);
    functions.push_back(std::move(f));
  }
  root["functions"] = std::move(functions);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::json::Value(std::move(root));
  return s;
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
        op->getDialect()->getNamespace() == "shardx" && !isa<mlir::shardx::MeshOp>(op)) {
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
    module->setAttr(mlir::shardx::kProgramInfoAttr,
                    StringAttr::get(module.getContext(),
                                    mlir::shardx::describeProgram(module)));
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
