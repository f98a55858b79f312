//===- CpuCodegen.cpp - Lower tensor programs to CPU shared objects -------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
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
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <unistd.h>

using namespace mlir;

#ifndef SHARDX_RUNTIME_ARCHIVE
#define SHARDX_RUNTIME_ARCHIVE ""
#endif
#ifndef SHARDX_RUNTIME_BLAS_ARCHIVE
#define SHARDX_RUNTIME_BLAS_ARCHIVE ""
#endif
#ifndef SHARDX_LAYOUT_ARCHIVE
#define SHARDX_LAYOUT_ARCHIVE ""
#endif
#ifndef SHARDX_OPENBLAS_LIBRARY
#define SHARDX_OPENBLAS_LIBRARY "-lopenblas"
#endif

namespace {

constexpr llvm::StringLiteral kInfoSymbol = "shardx_program_info";

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

/// Adds the program description as a NUL-terminated global.
void addProgramInfo(ModuleOp module, StringRef json) {
  OpBuilder builder(module.getContext());
  builder.setInsertionPointToEnd(module.getBody());
  std::string data = json.str();
  data.push_back('\0');
  auto type = LLVM::LLVMArrayType::get(
      IntegerType::get(module.getContext(), 8), data.size());
  LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, kInfoSymbol,
                         builder.getStringAttr(data));
}

/// For each `_mlir_ciface_<f>(p0, ..., pk)` adds `shardx_entry_<f>(argv)`
/// calling it with argv[0..k]: one signature for every entry point, so that
/// launchers call any program through `shardx_rt_invoke`.
void addEntryWrappers(ModuleOp module) {
  OpBuilder b(module.getContext());
  auto ptr = LLVM::LLVMPointerType::get(module.getContext());
  SmallVector<LLVM::LLVMFuncOp> entries;
  for (auto fn : module.getOps<LLVM::LLVMFuncOp>())
    if (fn.getName().starts_with("_mlir_ciface_") && !fn.isExternal())
      entries.push_back(fn);
  for (LLVM::LLVMFuncOp fn : entries) {
    StringRef name = fn.getName().drop_front(strlen("_mlir_ciface_"));
    // A target may have made its own (the cuda one stages buffers).
    if (module.lookupSymbol(("shardx_entry_" + name).str()))
      continue;
    b.setInsertionPointToEnd(module.getBody());
    auto wrapper = LLVM::LLVMFuncOp::create(
        b, fn.getLoc(), ("shardx_entry_" + name).str(),
        LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(b.getContext()),
                                    {ptr}));
    Block *block = wrapper.addEntryBlock(b);
    b.setInsertionPointToStart(block);
    SmallVector<Value> args;
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i) {
      Value slot = LLVM::GEPOp::create(b, fn.getLoc(), ptr, ptr,
                                       block->getArgument(0),
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
      args.push_back(LLVM::LoadOp::create(b, fn.getLoc(), ptr, slot));
    }
    LLVM::CallOp::create(b, fn.getLoc(), fn, args);
    LLVM::ReturnOp::create(b, fn.getLoc(), ValueRange{});
  }
}

FailureOr<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(StringRef cpuOption, unsigned optLevel) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) {
    llvm::errs() << "error: no LLVM target for " << triple.str() << ": "
                 << error << "\n";
    return failure();
  }
  std::string cpu = cpuOption == "host" ? llvm::sys::getHostCPUName().str()
                                        : cpuOption.str();
  std::string features;
  if (cpuOption == "host") {
    llvm::SubtargetFeatures f;
    for (const auto &[name, on] : llvm::sys::getHostCPUFeatures())
      f.AddFeature(name, on);
    features = f.getString();
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu, features, options, llvm::Reloc::PIC_, std::nullopt,
      *llvm::CodeGenOpt::getLevel(optLevel)));
  if (!tm) {
    llvm::errs() << "error: cannot create a target machine for " << cpu
                 << "\n";
    return failure();
  }
  return tm;
}

LogicalResult linkSharedObject(StringRef object, StringRef output,
                               ArrayRef<std::string> libraries) {
  auto cxx = llvm::sys::findProgramByName("c++");
  if (!cxx)
    cxx = llvm::sys::findProgramByName("g++");
  if (!cxx) {
    llvm::errs() << "error: no C++ linker (c++ or g++) on PATH\n";
    return failure();
  }
  SmallVector<std::string> args = {*cxx, "-shared", "-o", output.str(),
                                   object.str()};
  // Every artifact exports the launcher entry point of the runtime; calls
  // inside the artifact bind to its own definitions (-Bsymbolic), not to a
  // same-named symbol of the process that loads it.
  args.push_back("-Wl,--undefined=shardx_rt_invoke");
  args.push_back("-Wl,--undefined=shardx_rt_set_compute_threads");
  args.push_back("-Wl,-Bsymbolic");
  args.append(libraries.begin(), libraries.end());
  args.push_back("-lpthread");
  args.push_back("-lm");
  SmallVector<StringRef> refs(args.begin(), args.end());
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(*cxx, refs, std::nullopt, {}, 0, 0,
                                     &error);
  if (rc != 0) {
    llvm::errs() << "error: linking " << output << " failed (" << rc
                 << (error.empty() ? "" : ": " + error) << ")\n";
    return failure();
  }
  return success();
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

LogicalResult mlir::shardx::runPassPipeline(ModuleOp module,
                                            StringRef pipeline) {
  PassManager pm(module.getContext());
  if (failed(parsePassPipeline(pipeline, pm, llvm::errs())))
    return failure();
  return pm.run(module);
}

LogicalResult mlir::shardx::bufferizeProgram(ModuleOp module) {
  PassManager collectives(module.getContext());
  collectives.addPass(createConvertShardXToRuntimePass());
  if (failed(collectives.run(module)))
    return failure();
  // Mesh declarations are compile-time information only.
  for (auto mesh :
       llvm::make_early_inc_range(module.getOps<mlir::shardx::MeshOp>()))
    mesh.erase();
  if (failed(runPassPipeline(module,
                             "func.func(convert-elementwise-to-linalg),"
                             "canonicalize,cse")) ||
      failed(fuseTensorOps(module)) ||
      failed(runPassPipeline(module, "canonicalize,cse")))
    return failure();
  splitSharedEmptyTensors(module);
  return runPassPipeline(module, "one-shot-bufferize{"
                                 "bufferize-function-boundaries "
                                 "function-boundary-type-conversion=identity-"
                                 "layout-map},canonicalize,cse");
}

LogicalResult mlir::shardx::compileModule(ModuleOp module,
                                          const CompileOptions &options) {
  // bf16/f16 reductions accumulate in f32 on every target (nothing to do
  // when the SPMD pipeline already widened them); cuBLAS accumulates the
  // cuda target's GEMMs in f32, the cpu target's are loop nests.
  PassManager widen(module.getContext());
  widen.addPass(
      createWidenAccumulationPass({/*contractions=*/options.target != "cuda"}));
  if (failed(widen.run(module)))
    return failure();
  if (options.target == "cuda")
    return compileModuleForCuda(module, options);
  if (options.target != "cpu") {
    llvm::errs() << "error: unknown --target '" << options.target
                 << "' (cpu, cuda)\n";
    return failure();
  }
  std::string info = describeProgram(module);
  prepareEntryPoints(module);
  if (failed(bufferizeProgram(module)))
    return failure();
  if (options.blas && failed(contractionsToBlasCalls(module)))
    return failure();
  // Loops LLVM vectorizes (CpuLoops.cpp): row reductions carry their
  // accumulators in registers, f32 exp/erf/tanh are polynomials.
  if (failed(runPassPipeline(
          module,
          "ownership-based-buffer-deallocation,canonicalize,"
          "buffer-deallocation-simplification,bufferization-lower-"
          "deallocations,convert-bufferization-to-memref,cse,canonicalize")))
    return failure();
  lowerInnerReductions(module);
  if (failed(runPassPipeline(module, "func.func(convert-linalg-to-loops)")) ||
      failed(approximateMath(module)) || failed(expandNarrowFloats(module)))
    return failure();
  // Buffers come from the runtime's caching allocator
  // (lib/Runtime/cpu/BufferCache.cpp), which keeps large blocks for the
  // next run instead of mapping and faulting them in again.
  if (failed(runPassPipeline(
          module,
          "math-expand-ops{ops=rsqrt},convert-math-to-libm,lower-affine,convert-scf-to-cf,"
          "expand-strided-metadata,lower-affine,"
          "finalize-memref-to-llvm{use-generic-functions},"
          "convert-math-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,"
          "convert-func-to-llvm,convert-cf-to-llvm,"
          "reconcile-unrealized-casts")))
    return failure();
  // The runtime and its GEMMs (OpenBLAS); $SHARDX_RUNTIME_ARCHIVE names a
  // copy of the runtime, with libShardXRuntimeBlas.a beside it.
  std::string runtime = SHARDX_RUNTIME_ARCHIVE;
  std::string blas = SHARDX_RUNTIME_BLAS_ARCHIVE;
  if (const char *env = std::getenv("SHARDX_RUNTIME_ARCHIVE")) {
    runtime = env;
    blas = (llvm::sys::path::parent_path(runtime) + "/libShardXRuntimeBlas.a")
               .str();
  }
  SmallVector<std::string> libraries;
  for (StringRef lib :
       {StringRef(runtime), StringRef(blas), StringRef(SHARDX_LAYOUT_ARCHIVE),
        StringRef(SHARDX_OPENBLAS_LIBRARY)})
    if (!lib.empty())
      libraries.push_back(lib.str());
  return emitArtifact(module, info, options, libraries);
}

LogicalResult mlir::shardx::emitArtifact(ModuleOp module, StringRef info,
                                         const CompileOptions &options,
                                         ArrayRef<std::string> libraries) {
  addProgramInfo(module, info);
  addEntryWrappers(module);

  std::error_code ec;
  if (options.emit == "mlir") {
    llvm::ToolOutputFile out(options.outputPath, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "error: " << options.outputPath << ": " << ec.message()
                   << "\n";
      return failure();
    }
    module.print(out.os());
    out.keep();
    return success();
  }

  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule) {
    module.emitError("translation to LLVM IR failed");
    return failure();
  }
  // Only the entry points leave the artifact: the program's own functions
  // are internal, so a function named like a libc symbol (`step`, `send`,
  // `index`) neither binds to libc's nor interposes it in the process.
  for (llvm::Function &f : *llvmModule)
    if (!f.isDeclaration() && !f.getName().starts_with("_mlir_ciface_") &&
        !f.getName().starts_with("shardx_entry_"))
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  if (options.optLevel > 3) {
    llvm::errs() << "error: optimization level " << options.optLevel
                 << " is not one of 0, 1, 2, 3\n";
    return failure();
  }
  auto tm = createTargetMachine(options.cpu, options.optLevel);
  if (failed(tm))
    return failure();
  llvmModule->setTargetTriple((*tm)->getTargetTriple());
  llvmModule->setDataLayout((*tm)->createDataLayout());
  auto optimize =
      makeOptimizingTransformer(options.optLevel, /*sizeLevel=*/0, tm->get());
  if (llvm::Error err = optimize(llvmModule.get())) {
    llvm::errs() << "error: LLVM optimization failed: "
                 << llvm::toString(std::move(err)) << "\n";
    return failure();
  }
  if (options.emit == "llvm") {
    llvm::ToolOutputFile out(options.outputPath, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "error: " << options.outputPath << ": " << ec.message()
                   << "\n";
      return failure();
    }
    llvmModule->print(out.os(), nullptr);
    out.keep();
    return success();
  }

  SmallString<128> objectPath;
  if (options.emit == "obj") {
    objectPath = options.outputPath;
  } else {
    int fd;
    if (auto err = llvm::sys::fs::createTemporaryFile("shardx", "o", fd,
                                                      objectPath)) {
      llvm::errs() << "error: cannot create a temporary file: "
                   << err.message() << "\n";
      return failure();
    }
    ::close(fd);
  }
  {
    llvm::ToolOutputFile out(objectPath, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "error: " << objectPath << ": " << ec.message() << "\n";
      return failure();
    }
    llvm::legacy::PassManager codegen;
    if ((*tm)->addPassesToEmitFile(codegen, out.os(), nullptr,
                                   llvm::CodeGenFileType::ObjectFile)) {
      llvm::errs() << "error: the target cannot emit object files\n";
      return failure();
    }
    codegen.run(*llvmModule);
    out.keep();
  }
  if (options.emit == "obj")
    return success();
  if (options.emit != "so") {
    llvm::errs() << "error: unknown --emit kind '" << options.emit << "'\n";
    return failure();
  }
  // Write the artifact next to its final name and rename it into place, so a
  // failed link never leaves a file that looks valid.
  SmallString<128> partial(options.outputPath);
  partial += ".partial";
  LogicalResult linked = linkSharedObject(objectPath, partial, libraries);
  llvm::sys::fs::remove(objectPath);
  if (failed(linked)) {
    llvm::sys::fs::remove(partial);
    return failure();
  }
  if (auto err = llvm::sys::fs::rename(partial, options.outputPath)) {
    llvm::errs() << "error: " << options.outputPath << ": " << err.message()
                 << "\n";
    return failure();
  }
  return success();
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
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}
