//===- OutlineKernels.cpp - One function per kernel, deduplicated ---------===//
//
// Part of ShardX.
//
// `shardx-outline-kernels` (after bufferization, on buffers): every linalg
// op, a fused loop nest, becomes a call of its own kernel function, as
// IREE's dispatch regions and inductor's kernels do. The kernel takes the
// op's buffers and scalars (each distinct value once, so two operands on one
// buffer stay one argument; a strided view's offset dynamic, so views at
// different places of one buffer share a kernel) and clones the constants
// it uses, so its body
// says everything about the computation: shapes, strides, element types,
// constants and which operands alias. Structurally identical kernels (the
// same printed IR) are one function, named after a hash of that IR, so the
// twelve layers of a model call one set of kernels and a kernel keeps its
// name, and its cache entry (lib/Compiler/Artifact.cpp), from program to
// program.
//
//   %a = memref.alloc() : memref<16x64xf32>
//   linalg.generic {...} ins(%x : memref<16x64xf32>) outs(%a : ...) { exp }
// becomes
//   call @shardx_kernel_3f2a...(%x, %a) : (memref<16x64xf32>, ...) -> ()
//   func.func private @shardx_kernel_3f2a...(%arg0: ..., %arg1: ...) {
//     linalg.generic {...} ins(%arg0 : ...) outs(%arg1 : ...) { exp }
//   }
//
//===----------------------------------------------------------------------===//

#include "ObjectCache.h"
#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;

std::string mlir::shardx::canonicalKernelText(Operation *kernel) {
  std::string text;
  llvm::raw_string_ostream os(text);
  // Every flag that decides what is printed is set here, none taken from
  // the command line (an elided constant would merge distinct kernels).
  OpPrintingFlags flags;
  flags.printGenericOpForm()
      .useLocalScope()
      .enableDebugInfo(false)
      .elideLargeElementsAttrs(std::numeric_limits<int64_t>::max())
      .elideLargeResourceString(std::numeric_limits<int64_t>::max());
  auto symbol = cast<SymbolOpInterface>(kernel);
  std::string name = symbol.getName().str();
  symbol.setName(StringAttr::get(kernel->getContext(), "k"));
  kernel->print(os, flags);
  symbol.setName(StringAttr::get(kernel->getContext(), name));
  return text;
}

Type mlir::shardx::kernelArgType(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  if (!memref)
    return type;
  auto strided = dyn_cast<StridedLayoutAttr>(memref.getLayout());
  if (!strided || ShapedType::isDynamic(strided.getOffset()))
    return type;
  auto layout = StridedLayoutAttr::get(type.getContext(), ShapedType::kDynamic,
                                       strided.getStrides());
  return MemRefType::get(memref.getShape(), memref.getElementType(), layout,
                         memref.getMemorySpace());
}

namespace {

std::string hashName(StringRef text) {
  return (mlir::shardx::kKernelPrefix +
          StringRef(mlir::shardx::sha256Hex(text)).take_front(16))
      .str();
}

} // namespace

FailureOr<mlir::shardx::OutlineStats>
mlir::shardx::outlineKernels(ModuleOp module) {
  SmallVector<linalg::LinalgOp> ops;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal() || fn.getName().starts_with(kKernelPrefix))
      continue;
    fn.walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
  }
  OutlineStats stats;
  llvm::StringMap<func::FuncOp> kernels; // canonical text -> kernel
  for (auto existing : module.getOps<func::FuncOp>())
    if (existing.getName().starts_with(kKernelPrefix) && !existing.isExternal())
      kernels[canonicalKernelText(existing)] = existing;
  SymbolTable symbols(module);
  OpBuilder b(module.getContext());
  for (linalg::LinalgOp op : ops) {
    // Arguments: each distinct non-constant value the op reads, its
    // operands first, then the values its body uses from above.
    llvm::SetVector<Value> args;
    llvm::SetVector<Operation *> constants;
    auto consider = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (def && def->hasTrait<OpTrait::ConstantLike>() &&
          def->getNumResults() == 1)
        constants.insert(def);
      else
        args.insert(v);
    };
    for (Value v : op->getOperands())
      consider(v);
    llvm::SetVector<Value> above;
    getUsedValuesDefinedAbove(op->getRegions(), above);
    for (Value v : above)
      consider(v);

    Location loc = op.getLoc();
    SmallVector<Type> argTypes;
    for (Value v : args)
      argTypes.push_back(mlir::shardx::kernelArgType(v.getType()));
    b.setInsertionPointToEnd(module.getBody());
    auto kernel = func::FuncOp::create(b, loc, kKernelPrefix,
                                       b.getFunctionType(argTypes, {}));
    kernel.setPrivate();
    Block *entry = kernel.addEntryBlock();
    IRMapping mapping;
    for (auto [v, arg] : llvm::zip(args, entry->getArguments()))
      mapping.map(v, arg);
    b.setInsertionPointToStart(entry);
    for (Operation *c : constants)
      b.clone(*c, mapping);
    b.clone(*op, mapping);
    func::ReturnOp::create(b, loc);
    ++stats.outlined;

    std::string text = canonicalKernelText(kernel);
    auto [it, inserted] = kernels.try_emplace(text, kernel);
    if (inserted) {
      std::string name = hashName(text);
      // Distinct kernels whose names collide (a 64-bit hash) get a suffix.
      for (unsigned n = 1; symbols.lookup(name); ++n)
        name = hashName(text) + "_" + std::to_string(n);
      kernel.setName(name);
      symbols.insert(kernel);
      ++stats.unique;
    } else {
      kernel.erase();
    }
    b.setInsertionPoint(op);
    SmallVector<Value> operands;
    for (auto [v, type] : llvm::zip(args, argTypes))
      operands.push_back(v.getType() == type
                             ? v
                             : memref::CastOp::create(b, loc, type, v));
    func::CallOp::create(b, loc, it->second, operands);
    op->erase();
  }
  return stats;
}

namespace mlir::shardx {
#define GEN_PASS_DEF_OUTLINEKERNELSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct OutlineKernelsPass
    : shardx::impl::OutlineKernelsPassBase<OutlineKernelsPass> {
  OutlineKernelsPass() = default;
  explicit OutlineKernelsPass(shardx::OutlineStats *stats) : stats(stats) {}
  void runOnOperation() override {
    FailureOr<shardx::OutlineStats> done = shardx::outlineKernels(getOperation());
    if (failed(done))
      return signalPassFailure();
    if (stats) {
      stats->outlined += done->outlined;
      stats->unique += done->unique;
    }
  }
  shardx::OutlineStats *stats = nullptr;
};

} // namespace

std::unique_ptr<Pass>
mlir::shardx::createOutlineKernelsPass(OutlineStats *stats) {
  return std::make_unique<OutlineKernelsPass>(stats);
}
