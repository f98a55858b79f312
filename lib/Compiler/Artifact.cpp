//===- Artifact.cpp - LLVM dialect modules to objects and artifacts -------===//
//
// Part of ShardX.
//
// The end of every target's pipeline (emitArtifact): the module in the
// LLVM dialect gets its program description and entry wrappers, is
// translated to LLVM IR and split into units, one per outlined kernel
// (lib/Compiler/OutlineKernels.cpp) plus the host code that calls them, so
// that LLVM never optimizes one giant function. Units are looked up in the
// kernel cache (ObjectCache.h), the missing ones optimized and compiled to
// objects in parallel, one LLVM context per thread, and all of them are
// linked into the artifact. A kernel's unit is the kernel alone with the
// declarations it uses, in a canonical order, so the same kernel in another
// program is the same bitcode and the same cache entry. Before any of this,
// takeCachedKernels looks the kernels up by their MLIR (right after
// shardx-outline-kernels) and leaves the ones it finds as declarations, so
// that only the missing kernels and the host code are lowered.
//
//===----------------------------------------------------------------------===//

#include "HostCode.h"
#include "ObjectCache.h"
#include "shardx/Compiler/Compiler.h"
#include "shardx/Exec/Checksum.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <atomic>
#include <dlfcn.h>
#include <map>
#include <mutex>

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kInfoSymbol = "shardx_program_info";

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

LogicalResult linkSharedObject(ArrayRef<std::string> objects, StringRef output,
                               ArrayRef<std::string> libraries) {
  auto cxx = llvm::sys::findProgramByName("c++");
  if (!cxx)
    cxx = llvm::sys::findProgramByName("g++");
  if (!cxx) {
    llvm::errs() << "error: no C++ linker (c++ or g++) on PATH\n";
    return failure();
  }
  SmallVector<std::string> args = {*cxx, "-shared", "-o", output.str()};
  args.append(objects.begin(), objects.end());
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

/// The file that holds this code (a tool or a library) and its size and
/// modification time: a rebuilt ShardX keys new cache entries.
std::string buildIdentity() {
  static const std::string identity = [] {
    static int anchor;
    std::string self = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(&buildIdentity), &info) &&
        info.dli_fname)
      self = info.dli_fname;
    llvm::sys::fs::file_status status;
    if (self.empty() || llvm::sys::fs::status(self, status))
      return std::string("unknown");
    return self + ":" + std::to_string(status.getSize()) + ":" +
           std::to_string(status.getLastModificationTime()
                              .time_since_epoch()
                              .count());
  }();
  return identity;
}

/// `path`'s size and modification time ("-" where it is missing).
std::string fileStamp(StringRef path) {
  llvm::sys::fs::file_status status;
  if (path.empty() || llvm::sys::fs::status(path, status))
    return path.str() + ":-";
  return path.str() + ":" + std::to_string(status.getSize()) + ":" +
         std::to_string(
             status.getLastModificationTime().time_since_epoch().count());
}

/// What decides the machine code besides the IR: the target and the
/// optimization level (computed once; each thread makes its own machine).
struct TargetSpec {
  std::string triple, cpu, features;
  unsigned optLevel = 3;

  /// The part of a cache key that is not the IR: LLVM's version, ShardX's
  /// own build (its pipelines for the units) and the target.
  std::string key() const {
    return "shardx-object-1|llvm " LLVM_VERSION_STRING "|" + buildIdentity() +
           "|" + triple + "|" + cpu + "|" + features + "|O" +
           std::to_string(optLevel);
  }
};

/// Whether `cpu` is a processor LLVM knows for `triple` (true when LLVM has
/// no such target to ask: the compile then says so itself). An unknown
/// name made LLVM warn once per object unit ("'x' is not a recognized
/// processor") and then abort code generation ("LLVM ERROR: 64-bit code
/// requested on a subtarget that doesn't support it!").
bool isKnownProcessor(const llvm::Triple &triple, StringRef cpu) {
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return true;
  std::unique_ptr<llvm::MCSubtargetInfo> info(
      target->createMCSubtargetInfo(triple, "", ""));
  return !info || info->isCPUStringValid(cpu);
}

FailureOr<TargetSpec> targetSpec(StringRef cpuOption, unsigned optLevel) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  TargetSpec spec;
  spec.triple = llvm::sys::getDefaultTargetTriple();
  spec.optLevel = optLevel;
  spec.cpu = cpuOption == "host" ? llvm::sys::getHostCPUName().str()
                                 : cpuOption.str();
  if (cpuOption == "host") {
    llvm::SubtargetFeatures f;
    for (const auto &[name, on] : llvm::sys::getHostCPUFeatures())
      f.AddFeature(name, on);
    spec.features = f.getString();
  }
  std::string error;
  if (!llvm::TargetRegistry::lookupTarget(llvm::Triple(spec.triple), error)) {
    llvm::errs() << "error: no LLVM target for " << spec.triple << ": "
                 << error << "\n";
    return failure();
  }
  if (!isKnownProcessor(llvm::Triple(spec.triple), spec.cpu)) {
    llvm::errs() << "error: unknown --cpu '" << spec.cpu << "' for "
                 << spec.triple << " (host, or a processor `llc -mcpu=help` "
                 << "lists)\n";
    return failure();
  }
  return spec;
}

} // namespace

LogicalResult mlir::shardx::checkCompileOptions(const CompileOptions &options) {
  auto fail = [](const Twine &message) {
    llvm::errs() << "error: " << message << "\n";
    return failure();
  };
  // The output's directory, before the work: a missing one was found by
  // the linker at the end (three lines of ld's).
  StringRef out = options.outputPath;
  StringRef dir = llvm::sys::path::parent_path(out);
  if (dir.empty())
    dir = ".";
  if (!llvm::sys::fs::is_directory(dir))
    return fail("cannot write " + out + ": " + dir +
                (llvm::sys::fs::exists(dir) ? " is not a directory"
                                            : " does not exist"));
  if (llvm::sys::fs::is_directory(out))
    return fail("cannot write " + out + ": it is a directory");
  // A file made and removed: access() says yes to root on any directory.
  SmallString<128> probe;
  int fd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          dir + "/.shardx-write-check-%%%%%%", fd, probe))
    return fail("cannot write " + out + ": cannot create files in " + dir +
                ": " + ec.message());
  llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  llvm::sys::fs::remove(probe);
  if (options.target != "cpu" && options.target != "cuda")
    return fail("unknown --target '" + options.target + "' (cpu, cuda)");
  if (failed(checkGpuBinaryKind(options.gpuBinary)))
    return failure();
  if (options.optLevel > 3)
    return fail("optimization level " + Twine(options.optLevel) +
                " is not one of 0, 1, 2, 3");
  if (failed(targetSpec(options.cpu, options.optLevel)))
    return failure();
  if (options.target == "cuda") {
    // A chip LLVM's NVPTX backend does not know was ignored with a warning
    // per kernel module and a PTX `.target` nothing can load.
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargetMCs();
    if (!isKnownProcessor(llvm::Triple("nvptx64-nvidia-cuda"), options.gpuChip))
      return fail("unknown --gpu-chip '" + options.gpuChip +
                  "' (an NVPTX processor such as sm_80 or sm_90)");
  }
  return success();
}

namespace {

std::unique_ptr<llvm::TargetMachine>
makeTargetMachine(const TargetSpec &spec, unsigned codegenLevel,
                  std::string &error) {
  llvm::Triple triple(spec.triple);
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, spec.cpu, spec.features, options, llvm::Reloc::PIC_,
      std::nullopt, *llvm::CodeGenOpt::getLevel(codegenLevel)));
  if (!tm) {
    error = "cannot create a target machine for " + spec.cpu;
    return nullptr;
  }
  // As clang and llc do: -O0 selects instructions one by one (FastISel),
  // in time linear in the code, instead of by DAGs.
  tm->setO0WantsFastISel(true);
  return tm;
}

/// Runs the LLVM pass pipeline `pipeline` (opt's syntax) on `module`.
std::string runLLVMPipeline(llvm::Module &module, llvm::TargetMachine &tm,
                            StringRef pipeline) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(&tm);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager passes;
  if (llvm::Error err = builder.parsePassPipeline(passes, pipeline))
    return llvm::toString(std::move(err));
  passes.run(module, mam);
  return "";
}

/// Optimizes `module` for `tm`; an empty return is success. Kernels get LLVM's -O`optLevel` pipeline. The host
/// code (`host`) is one long function of calls and no loop, where LLVM's
/// optimizer and instruction selection above -O0 take time that grows
/// faster than its length (16 s for a 32-layer GPT): its entry aggregates
/// become scalars and it gets scalar replacement, simplification and dead
/// code removal only (linear), for the fast instruction selector.
std::string optimize(llvm::Module &module, llvm::TargetMachine &tm,
                     unsigned optLevel, bool host) {
  module.setTargetTriple(tm.getTargetTriple());
  module.setDataLayout(tm.createDataLayout());
  if (host) {
    mlir::shardx::host::scalarizeEntryAggregates(module);
    std::string error =
        runLLVMPipeline(module, tm, "function(sroa,instsimplify,dce)");
    if (!error.empty())
      return error;
    mlir::shardx::host::flattenExtractChains(module);
    mlir::shardx::host::demoteAggregateReturns(module);
    // The insertvalue chains that built the returned structs.
    error = runLLVMPipeline(module, tm, "function(dce)");
    if (!error.empty())
      return error;
    mlir::shardx::host::isolateAggregateCode(module);
  } else {
    auto transform = makeOptimizingTransformer(optLevel, /*sizeLevel=*/0, &tm);
    if (llvm::Error err = transform(&module))
      return "LLVM optimization failed: " + llvm::toString(std::move(err));
  }
  return "";
}

/// Appends `module`'s object code to `object`; an empty return is success.
std::string emitObject(llvm::Module &module, llvm::TargetMachine &tm,
                       SmallVectorImpl<char> &object) {
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager codegen;
  if (tm.addPassesToEmitFile(codegen, os, nullptr,
                             llvm::CodeGenFileType::ObjectFile))
    return "the target cannot emit object files";
  codegen.run(module);
  return "";
}

bool isKernel(const llvm::GlobalValue &gv) {
  return gv.getName().starts_with(mlir::shardx::kKernelPrefix);
}

/// One object file's worth of code: the host code or one kernel.
struct Unit {
  std::string name;
  bool host = false;     // the host code (entry points, calls), not a kernel
  SmallVector<char, 0> bitcode;
  /// The kernel uses nothing the program defines (only external functions:
  /// libm, the allocator), so its object depends on its MLIR alone and may
  /// be kept under its MLIR key.
  bool selfContained = false;
  /// The object found by takeCachedKernels (no bitcode then).
  std::optional<std::string> found;
  std::string key;       // the cache key
  std::string object;    // the object file, once compiled or found
  std::string error;
};

/// Removes the declarations nothing uses and orders functions and globals
/// by name, so that a unit's bitcode depends on its code only.
void canonicalizeUnit(llvm::Module &m) {
  for (llvm::Function &f : llvm::make_early_inc_range(m))
    if (f.isDeclaration() && f.use_empty())
      f.eraseFromParent();
  for (llvm::GlobalVariable &g : llvm::make_early_inc_range(m.globals()))
    if (g.isDeclaration() && g.use_empty())
      g.eraseFromParent();
  SmallVector<llvm::Function *> functions;
  for (llvm::Function &f : m)
    functions.push_back(&f);
  llvm::sort(functions, [](llvm::Function *a, llvm::Function *b) {
    return a->getName() < b->getName();
  });
  for (llvm::Function *f : functions) {
    f->removeFromParent();
    m.getFunctionList().push_back(f);
  }
  SmallVector<llvm::GlobalVariable *> globals;
  for (llvm::GlobalVariable &g : m.globals())
    globals.push_back(&g);
  llvm::sort(globals, [](llvm::GlobalVariable *a, llvm::GlobalVariable *b) {
    return a->getName() < b->getName();
  });
  for (llvm::GlobalVariable *g : globals) {
    g->removeFromParent();
    m.insertGlobalVariable(g);
  }
  m.setModuleIdentifier("shardx");
  m.setSourceFileName("shardx");
}

void writeBitcode(const llvm::Module &m, SmallVectorImpl<char> &out) {
  llvm::raw_svector_ostream os(out);
  llvm::WriteBitcodeToFile(m, os);
}

/// Splits `module` into a unit per kernel and one for the rest (first).
/// Kernels become external hidden symbols of their units; the host unit
/// declares them, each declaration alike whether the kernel was lowered or
/// found in the cache (`found`, declarations already), so that the host
/// unit does not depend on which kernels the cache held. A local symbol a
/// kernel uses becomes hidden and external.
SmallVector<Unit> splitIntoUnits(llvm::Module &module,
                                 const mlir::shardx::CachedKernels *found) {
  SmallVector<llvm::Function *> kernels;
  for (llvm::Function &f : module)
    if (isKernel(f))
      kernels.push_back(&f);
  SmallVector<Unit> units(1);
  units[0].name = "host";
  units[0].host = true;
  for (llvm::Function *kernel : kernels) {
    if (kernel->isDeclaration()) {
      Unit &u = units.emplace_back();
      u.name = kernel->getName().str();
      if (found && found->objects.contains(u.name))
        u.found = found->objects.lookup(u.name);
      else
        u.error = "the kernel has no body and no object in the kernel cache";
      continue;
    }
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> unit = llvm::CloneModule(
        module, map,
        [&](const llvm::GlobalValue *gv) { return gv == kernel; });
    canonicalizeUnit(*unit);
    Unit &u = units.emplace_back();
    u.name = kernel->getName().str();
    u.selfContained = unit->global_empty();
    for (llvm::GlobalValue &gv : unit->global_values()) {
      if (!gv.isDeclaration())
        continue;
      llvm::GlobalValue *original = module.getNamedValue(gv.getName());
      if (!original || !original->isDeclaration() ||
          !isa<llvm::Function>(original))
        u.selfContained = false;
      if (original && original->hasLocalLinkage()) {
        original->setLinkage(llvm::GlobalValue::ExternalLinkage);
        original->setVisibility(llvm::GlobalValue::HiddenVisibility);
      }
    }
    writeBitcode(*unit, u.bitcode);
  }
  for (llvm::Function *kernel : kernels) {
    kernel->deleteBody();
    kernel->setAttributes(llvm::AttributeList());
    kernel->addFnAttr(llvm::Attribute::NoInline);
    kernel->setLinkage(llvm::GlobalValue::ExternalLinkage);
    kernel->setVisibility(llvm::GlobalValue::HiddenVisibility);
  }
  canonicalizeUnit(module);
  writeBitcode(module, units[0].bitcode);
  return units;
}

/// Writes an object file; false (and `error`) when it cannot.
bool writeObject(StringRef path, StringRef bytes, std::string &error) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << bytes;
    os.close();
    if (!os.has_error())
      return true;
    ec = os.error();
    os.clear_error();
  }
  error = ("cannot write '" + path + "': " + ec.message()).str();
  return false;
}

/// The number of threads compiling units: $SHARDX_COMPILE_JOBS, else every
/// core this process may run on.
unsigned compileJobs() {
  if (const char *env = std::getenv("SHARDX_COMPILE_JOBS"); env && *env) {
    unsigned n = 0;
    if (!StringRef(env).getAsInteger(10, n) && n > 0)
      return n;
  }
  return llvm::hardware_concurrency().compute_thread_count();
}

/// Finds or compiles every unit's object (in parallel); objects not kept
/// by the cache go to `scratch`. Reports progress as units complete.
LogicalResult compileUnits(MutableArrayRef<Unit> units, const TargetSpec &spec,
                           const mlir::shardx::ObjectCache &cache,
                           const mlir::shardx::CachedKernels *found,
                           StringRef scratch,
                           const mlir::shardx::CompileOptions &options) {
  std::string specKey = spec.key();
  SmallVector<Unit *> todo;
  for (Unit &u : units) {
    // Every object the link reads is a private file: another process may
    // evict the cache's copy meanwhile.
    u.object = (scratch + "/" + u.name + ".o").str();
    if (!u.error.empty())
      continue;
    if (u.found) {
      // Found by its MLIR before lowering (takeCachedKernels).
      if (!writeObject(u.object, *u.found, u.error))
        continue;
      if (options.stats)
        ++options.stats->cachedUnits;
      continue;
    }
    // A kernel that needs nothing from the program is kept under its MLIR
    // key, which the next compile looks up before lowering it; other units
    // under a hash of their bitcode.
    if (found && u.selfContained && found->keys.contains(u.name))
      u.key = found->keys.lookup(u.name);
    else
      u.key = mlir::shardx::sha256Hex(
          specKey + "|" + StringRef(u.bitcode.data(), u.bitcode.size()).str());
    std::optional<std::string> hit = cache.lookup(u.key);
    if (hit && writeObject(u.object, *hit, u.error)) {
      if (options.stats)
        ++options.stats->cachedUnits;
    } else {
      u.error.clear(); // unreadable or unwritable: compiled instead
      todo.push_back(&u);
    }
  }
  if (options.stats) {
    options.stats->units = units.size();
    options.stats->compiledUnits = todo.size();
  }
  std::mutex mutex;
  std::atomic<unsigned> done{0};
  auto compileOne = [&](Unit &u) {
    llvm::LLVMContext context;
    llvm::Expected<std::unique_ptr<llvm::Module>> module =
        llvm::parseBitcodeFile(
            llvm::MemoryBufferRef(StringRef(u.bitcode.data(), u.bitcode.size()),
                                  u.name),
            context);
    if (!module) {
      u.error = "cannot read back the LLVM IR: " +
                llvm::toString(module.takeError());
      return;
    }
    // The host code is compiled fast (optimize), the kernels at the
    // level asked for.
    unsigned codegenLevel = u.host ? 0 : spec.optLevel;
    std::unique_ptr<llvm::TargetMachine> tm =
        makeTargetMachine(spec, codegenLevel, u.error);
    if (!tm)
      return;
    SmallVector<char, 0> object;
    u.error = optimize(**module, *tm, spec.optLevel, u.host);
    if (u.error.empty())
      u.error = emitObject(**module, *tm, object);
    if (!u.error.empty())
      return;
    StringRef bytes(object.data(), object.size());
    if (!writeObject(u.object, bytes, u.error))
      return;
    // Kept for later compiles; a failed store only costs a recompile then.
    std::string storeError;
    (void)cache.store(u.key, bytes, storeError);
    unsigned n = ++done;
    if (options.progress) {
      std::lock_guard<std::mutex> lock(mutex);
      options.progress(n, todo.size());
    }
  };
  unsigned jobs = std::min<unsigned>(compileJobs(), std::max<size_t>(todo.size(), 1));
  if (jobs <= 1) {
    for (Unit *u : todo)
      compileOne(*u);
  } else {
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency(jobs));
    // The host unit is the largest: start it first.
    for (Unit *u : todo)
      pool.async([&, u] { compileOne(*u); });
    pool.wait();
  }
  bool ok = true;
  for (Unit &u : units)
    if (!u.error.empty()) {
      llvm::errs() << "error: compiling " << u.name << ": " << u.error << "\n";
      ok = false;
    }
  return success(ok);
}

/// The module's attributes that may change how a function lowers (data
/// layout, target), printed: part of a kernel's MLIR key.
std::string loweringAttributes(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (NamedAttribute attr : module->getAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name.starts_with("dlti.") || name.starts_with("llvm."))
      os << name << "=" << attr.getValue() << ";";
  }
  return text;
}

} // namespace

LogicalResult mlir::shardx::takeCachedKernels(ModuleOp module,
                                              const CompileOptions &options,
                                              CachedKernels &found) {
  if (!options.kernelCache || options.emit != "so" || options.optLevel > 3)
    return success();
  FailureOr<TargetSpec> spec = targetSpec(options.cpu, options.optLevel);
  if (failed(spec))
    return failure();
  // An unusable directory is emitArtifact's warning (it opens it again).
  std::string error;
  ObjectCache cache = ObjectCache::fromEnvironment(error);
  if (!cache.isEnabled())
    return success();
  // The kernel ABI is part of the key: "ptr-args" since a kernel takes its
  // statically shaped buffers as pointers (shardx-kernel-pointer-args), so
  // an object compiled for descriptor arguments is never linked.
  std::string prefix = spec->key() + "|mlir kernel|abi ptr-args|" +
                       loweringAttributes(module) + "|";
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal() || !fn.getName().starts_with(kKernelPrefix))
      continue;
    // The name too: it is the symbol the object defines.
    std::string key =
        sha256Hex(prefix + fn.getName().str() + "|" + canonicalKernelText(fn));
    if (std::optional<std::string> object = cache.lookup(key)) {
      found.objects[fn.getName()] = std::move(*object);
      fn.eraseBody();
    } else {
      found.keys[fn.getName()] = std::move(key);
    }
  }
  return success();
}

/// Puts the finished artifact `partial` at `output`: a rename, so that a
/// reader never sees a half-written file, except where `output` exists and
/// is not a regular file (`-o /dev/null`, a FIFO): there its bytes are
/// written into it and `partial` removed. A rename over /dev/null, as root,
/// replaced the device with the artifact, and every later writer of
/// /dev/null wrote into a file.
static LogicalResult moveIntoPlace(StringRef partial, StringRef output) {
  llvm::sys::fs::file_status status;
  bool special = !llvm::sys::fs::status(output, status) &&
                 llvm::sys::fs::exists(status) &&
                 status.type() != llvm::sys::fs::file_type::regular_file;
  if (!special) {
    if (auto err = llvm::sys::fs::rename(partial, output)) {
      llvm::errs() << "error: " << output << ": " << err.message() << "\n";
      return failure();
    }
    return success();
  }
  auto bytes = llvm::MemoryBuffer::getFile(partial, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  std::error_code ec = bytes.getError();
  if (!ec) {
    llvm::raw_fd_ostream out(output, ec);
    if (!ec) {
      out << (*bytes)->getBuffer();
      out.close();
      ec = out.error();
    }
  }
  llvm::sys::fs::remove(partial);
  if (ec) {
    llvm::errs() << "error: " << output << ": " << ec.message() << "\n";
    return failure();
  }
  return success();
}

LogicalResult mlir::shardx::emitArtifact(ModuleOp module,
                                         const CompileOptions &options,
                                         ArrayRef<std::string> libraries,
                                         const CachedKernels *cached) {
  auto info = module->getAttrOfType<StringAttr>(kProgramInfoAttr);
  if (!info)
    return module.emitError("no program description ('")
           << kProgramInfoAttr << "': run shardx-record-program-info first)";
  std::string json = info.getValue().str();
  module->removeAttr(kProgramInfoAttr);
  addProgramInfo(module, json);
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
  if (options.optLevel > 3) {
    llvm::errs() << "error: optimization level " << options.optLevel
                 << " is not one of 0, 1, 2, 3\n";
    return failure();
  }
  if (options.emit != "so" && options.emit != "obj" && options.emit != "llvm") {
    llvm::errs() << "error: unknown --emit kind '" << options.emit << "'\n";
    return failure();
  }
  FailureOr<TargetSpec> spec = targetSpec(options.cpu, options.optLevel);
  if (failed(spec))
    return failure();

  TimingScope translateTiming =
      nestTiming(options.timing, "translate to LLVM IR");
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
  // Kernels live in units of their own: hidden (not exported), never
  // inlined into the host code.
  for (llvm::Function &f : *llvmModule) {
    if (f.isDeclaration() || f.getName().starts_with("_mlir_ciface_") ||
        f.getName().starts_with("shardx_entry_"))
      continue;
    if (isKernel(f)) {
      f.setLinkage(llvm::GlobalValue::ExternalLinkage);
      f.setVisibility(llvm::GlobalValue::HiddenVisibility);
      f.addFnAttr(llvm::Attribute::NoInline);
    } else {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
    }
  }
  translateTiming.stop();

  if (options.emit != "so") {
    // One module, one output: LLVM IR or a single object file.
    std::string error;
    std::unique_ptr<llvm::TargetMachine> tm =
        makeTargetMachine(*spec, spec->optLevel, error);
    if (!tm) {
      llvm::errs() << "error: " << error << "\n";
      return failure();
    }
    SmallVector<char, 0> object;
    error = optimize(*llvmModule, *tm, options.optLevel, /*host=*/false);
    if (error.empty() && options.emit == "obj")
      error = emitObject(*llvmModule, *tm, object);
    if (!error.empty()) {
      llvm::errs() << "error: " << error << "\n";
      return failure();
    }
    llvm::ToolOutputFile out(options.outputPath, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "error: " << options.outputPath << ": " << ec.message()
                   << "\n";
      return failure();
    }
    if (options.emit == "llvm")
      llvmModule->print(out.os(), nullptr);
    else
      out.os() << StringRef(object.data(), object.size());
    out.keep();
    return success();
  }

  TimingScope splitTiming = nestTiming(options.timing, "split into units");
  SmallVector<Unit> units = splitIntoUnits(*llvmModule, cached);
  llvmModule.reset();
  splitTiming.stop();

  std::string cacheError;
  ObjectCache cache = options.kernelCache ? ObjectCache::fromEnvironment(cacheError)
                                          : ObjectCache();
  if (!cacheError.empty())
    llvm::errs() << "warning: " << cacheError
                 << "; compiling without the kernel cache\n";
  SmallString<128> scratch;
  if (auto err = llvm::sys::fs::createUniqueDirectory("shardx-objects", scratch)) {
    llvm::errs() << "error: cannot create a temporary directory: "
                 << err.message() << "\n";
    return failure();
  }
  llvm::scope_exit removeScratch(
      [&] { llvm::sys::fs::remove_directories(scratch); });
  TimingScope compileTiming = nestTiming(options.timing, "compile units");
  if (failed(compileUnits(units, *spec, cache, cached, scratch, options)))
    return failure();
  compileTiming.stop();

  // Write the artifact next to its final name and rename it into place, so a
  // failed link never leaves a file that looks valid.
  TimingScope linkTiming =
      nestTiming(options.timing, "link");
  SmallVector<std::string> objects;
  for (Unit &u : units)
    objects.push_back(u.object);
  SmallString<128> partial(options.outputPath);
  partial += ".partial";
  std::string sumError;
  if (failed(linkSharedObject(objects, partial, libraries)) ||
      !::shardx::exec::appendChecksum(partial.str().str(), sumError)) {
    if (!sumError.empty())
      llvm::errs() << "error: " << sumError << "\n";
    llvm::sys::fs::remove(partial);
    return failure();
  }
  if (failed(moveIntoPlace(partial, options.outputPath)))
    return failure();
  linkTiming.stop();
  unsigned evicted = cache.evict();
  if (options.stats)
    options.stats->evicted = evicted;
  return success();
}

std::string mlir::shardx::compilerBuildId() {
  // Every archive an artifact of either target links, each once.
  std::string id = "shardx-build-1|" + buildIdentity();
  llvm::StringSet<> stamped;
  for (bool cuda : {false, true})
    for (const std::string &lib : runtimeLibraries(cuda))
      if (StringRef(lib).ends_with(".a") && stamped.insert(lib).second)
        id += "|" + fileStamp(lib);
  return id;
}
