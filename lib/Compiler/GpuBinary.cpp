//===- GpuBinary.cpp - The cuda target's kernels as a fat binary ----------===//
//
// Part of ShardX.
//
// gpu-module-to-binary{format=isa} leaves the kernels as PTX, which the
// driver compiles at an artifact's first call: seconds for a GPT step's
// kernels, on every machine that has not cached them, and on a GPU host that
// is the time to its first step. Here the CUDA toolkit's ptxas compiles the
// PTX for the target chip ahead of time, and fatbinary packs that code with
// the PTX into one fat binary, the form nvcc embeds: the driver loads the
// chip's code as it is and compiles the PTX only for another GPU.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;
using namespace mlir::shardx;

LogicalResult mlir::shardx::checkGpuBinaryKind(StringRef kind) {
  if (kind == "auto" || kind == "fatbin" || kind == "ptx")
    return success();
  llvm::errs() << "error: unknown --gpu-binary '" << kind
               << "' (auto, fatbin, ptx)\n";
  return failure();
}

FailureOr<std::optional<CudaTools>>
mlir::shardx::findCudaTools(StringRef libdevice, std::string &error) {
  auto beside = [](StringRef ptxas) {
    SmallString<128> fatbinary = llvm::sys::path::parent_path(ptxas);
    llvm::sys::path::append(fatbinary, "fatbinary");
    return CudaTools{ptxas.str(), std::string(fatbinary)};
  };
  auto usable = [](const CudaTools &tools) {
    return llvm::sys::fs::can_execute(tools.ptxas) &&
           llvm::sys::fs::can_execute(tools.fatbinary);
  };
  // $SHARDX_PTXAS names the toolkit: an error when it has no such tools.
  if (const char *env = std::getenv("SHARDX_PTXAS"); env && *env) {
    CudaTools tools = beside(env);
    if (usable(tools))
      return std::optional(tools);
    error = "SHARDX_PTXAS=" + std::string(env) +
            " is not an executable ptxas with fatbinary beside it";
    return failure();
  }
  // The toolkit of libdevice (<root>/nvvm/libdevice/libdevice.10.bc), then
  // the PATH's.
  SmallString<128> ptxas = libdevice;
  llvm::sys::fs::make_absolute(ptxas);
  for (int i = 0; i < 3; ++i)
    llvm::sys::path::remove_filename(ptxas);
  llvm::sys::path::append(ptxas, "bin", "ptxas");
  if (usable(beside(ptxas)))
    return std::optional(beside(ptxas));
  if (llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("ptxas"))
    if (usable(beside(*found)))
      return std::optional(beside(*found));
  return std::optional<CudaTools>();
}

namespace {

/// A temporary file that is removed with this object.
struct TempFile {
  SmallString<128> path;
  llvm::FileRemover remover;
  LogicalResult create(StringRef suffix) {
    if (llvm::sys::fs::createTemporaryFile("shardx-kernels", suffix, path))
      return failure();
    remover.setFile(path);
    return success();
  }
};

/// Runs `args` (args[0] the program), its standard error into `log`; the
/// first lines of that error (or why it did not start) on failure.
LogicalResult runTool(ArrayRef<std::string> args, StringRef log,
                      std::string &error) {
  SmallVector<StringRef> refs(args.begin(), args.end());
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log),
                                          StringRef(log)};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(args[0], refs, std::nullopt, redirects,
                                     /*SecondsToWait=*/0, /*MemoryLimit=*/0,
                                     &message);
  if (rc == 0)
    return success();
  error = llvm::sys::path::filename(args[0]).str() + " failed";
  if (!message.empty())
    error += ": " + message;
  if (auto text = llvm::MemoryBuffer::getFile(log)) {
    StringRef output = (*text)->getBuffer().trim();
    if (!output.empty())
      error += ":\n" + output.take_front(2000).str();
  }
  return failure();
}

} // namespace

LogicalResult mlir::shardx::embedKernelFatbin(ModuleOp module, StringRef chip,
                                              const CudaTools &tools,
                                              std::string &error) {
  auto binary = module.lookupSymbol<gpu::BinaryOp>(kKernelModule);
  if (!binary)
    return success();
  auto fail = [&](const Twine &message) {
    error = message.str();
    return failure();
  };
  if (binary.getObjects().size() != 1)
    return fail("expected one object in the kernel binary");
  auto object = cast<gpu::ObjectAttr>(binary.getObjects()[0]);
  if (object.getFormat() != gpu::CompilationTarget::Assembly)
    return fail("expected the kernels as PTX");
  // fatbinary's sm= takes the chip without "sm_" (90, 90a).
  StringRef arch = chip;
  if (!arch.consume_front("sm_"))
    return fail("'" + chip + "' is not an sm_ chip");

  TempFile ptx, cubin, fatbin, ptxasLog, fatbinaryLog;
  if (failed(ptx.create("ptx")) || failed(cubin.create("cubin")) ||
      failed(fatbin.create("fatbin")) || failed(ptxasLog.create("log")) ||
      failed(fatbinaryLog.create("log")))
    return fail("cannot create temporary files for ptxas");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(ptx.path, ec);
    if (!ec)
      os << object.getObject().getValue();
    os.close();
    if (ec || os.has_error()) {
      os.clear_error();
      return fail("cannot write " + ptx.path);
    }
  }
  if (failed(runTool({tools.ptxas, "-arch=" + chip.str(), ptx.path.str().str(),
                      "-o", cubin.path.str().str()},
                     ptxasLog.path, error)) ||
      failed(runTool({tools.fatbinary, "--create=" + fatbin.path.str().str(),
                      "-64",
                      "--image3=kind=elf,sm=" + arch.str() +
                          ",file=" + cubin.path.str().str(),
                      "--image3=kind=ptx,sm=" + arch.str() +
                          ",file=" + ptx.path.str().str()},
                     fatbinaryLog.path, error)))
    return failure();
  auto bytes = llvm::MemoryBuffer::getFile(fatbin.path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bytes)
    return fail("cannot read " + fatbin.path);
  MLIRContext *ctx = module.getContext();
  auto fat = gpu::ObjectAttr::get(ctx, object.getTarget(),
                                  gpu::CompilationTarget::Fatbin,
                                  StringAttr::get(ctx, (*bytes)->getBuffer()),
                                  object.getProperties(), object.getKernels());
  binary.setObjectsAttr(ArrayAttr::get(ctx, {fat}));
  return success();
}
