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

LogicalResult mlir::shardx::runPassPipeline(ModuleOp module,
                                            StringRef pipeline,
                                            TimingScope *timing) {
  PassManager pm(module.getContext());
  if (failed(parsePassPipeline(pipeline, pm, llvm::errs())))
    return failure();
  TimingScope scope = nestTiming(timing, pipeline);
  if (timing)
    pm.enableTiming(scope);
  return pm.run(module);
}

TimingScope mlir::shardx::nestTiming(TimingScope *parent, StringRef name) {
  return parent ? parent->nest(name) : TimingScope();
}

/// `step` under a timing scope named `name` (when timing).
template <typename Step>
static auto timed(TimingScope *timing, StringRef name, Step step) {
  TimingScope scope = mlir::shardx::nestTiming(timing, name);
  return step();
}

LogicalResult mlir::shardx::bufferizeProgram(ModuleOp module,
                                             TimingScope *timing) {
  PassManager collectives(module.getContext());
  collectives.addPass(createConvertShardXToRuntimePass());
  TimingScope collectivesTiming =
      nestTiming(timing, "collectives to runtime calls");
  if (timing)
    collectives.enableTiming(collectivesTiming);
  if (failed(collectives.run(module)))
    return failure();
  collectivesTiming.stop();
  // Mesh declarations are compile-time information only.
  for (auto mesh :
       llvm::make_early_inc_range(module.getOps<mlir::shardx::MeshOp>()))
    mesh.erase();
  if (failed(runPassPipeline(module,
                             "func.func(convert-elementwise-to-linalg),"
                             "canonicalize,cse",
                             timing)) ||
      failed(timed(timing, "fuse tensor ops",
                   [&] { return fuseTensorOps(module); })) ||
      failed(runPassPipeline(module, "canonicalize,cse", timing)))
    return failure();
  splitSharedEmptyTensors(module);
  packSlicesAsConcat(module);
  return runPassPipeline(module,
                         "one-shot-bufferize{"
                         "bufferize-function-boundaries "
                         "function-boundary-type-conversion=identity-"
                         "layout-map},canonicalize,cse",
                         timing);
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
  TimingScope *timing = options.timing;
  if (failed(bufferizeProgram(module, timing)))
    return failure();
  if (options.blas &&
      failed(timed(timing, "contractions to BLAS calls",
                   [&] { return contractionsToBlasCalls(module); })))
    return failure();
  // Loops LLVM vectorizes (CpuLoops.cpp): row reductions carry their
  // accumulators in registers, f32 exp/erf/tanh are polynomials.
  if (failed(timed(timing, "deallocate buffers",
                   [&] { return deallocateBuffers(module); })))
    return failure();
  // One function per fused loop nest, identical ones merged: LLVM then
  // optimizes each unique kernel once, in parallel and through the kernel
  // cache, instead of the whole step as one function (emitArtifact).
  {
    TimingScope outlineTiming = nestTiming(timing, "outline kernels");
    FailureOr<OutlineStats> outlined = outlineKernels(module);
    if (failed(outlined))
      return failure();
    if (options.stats) {
      options.stats->kernels = outlined->outlined;
      options.stats->uniqueKernels = outlined->unique;
    }
  }
  TimingScope lowerTiming = nestTiming(timing, "lower to LLVM dialect");
  // In the kernels, which LLVM optimizes (the host unit is compiled at -O0).
  lowerMaskedScatters(module, ScatterOrder::IndicesOuter);
  lowerInnerReductions(module);
  if (failed(runPassPipeline(module, "func.func(convert-linalg-to-loops)",
                             timing ? &lowerTiming : nullptr)) ||
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
          "reconcile-unrealized-casts",
          timing ? &lowerTiming : nullptr)))
    return failure();
  lowerTiming.stop();
  SmallVector<std::string> libraries = runtimeLibraries(/*cuda=*/false);
  return emitArtifact(module, info, options, libraries);
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
