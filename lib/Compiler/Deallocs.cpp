//===- Deallocs.cpp - Free each buffer after its last use ------------------===//
//
// Part of ShardX.
//
// `shardx-place-deallocs` (after bufferization): frees each buffer of a
// program function right after its last use, instead of MLIR's
// ownership-based deallocation, which frees every buffer of a block at the
// block's end and then simplifies its deallocations.
//
// A train step is one straight-line function, so the ownership-based pass
// put one `bufferization.dealloc` of every buffer at its end, retaining the
// results. That had two costs. Memory: every temporary of the step was
// alive at once (a GPT-2-small step held about 70 GB of an H200). Time:
// `buffer-deallocation-simplification` compares the buffers of that one
// dealloc pairwise, 5.4 s of a 32-layer GPT's 11 s compile on 2 cores.
//
// Here, for each `memref.alloc` of a function's entry block, its users are
// followed through every result that may hold on to the buffer (views,
// casts, transposes, reshapes, a pointer taken, a collective's `*_start`
// request, whose wait still reads the buffer; not a loaded value, a size
// or a stride), and the buffer is freed after the last of them in the
// block. A
// buffer that a function returns, directly or through an alias, is not
// freed: its caller owns it (the executor frees results after copying
// them out). As under the ownership-based pass, a function returns only
// buffers the caller may free: a returned constant, argument or buffer
// returned twice is copied into a fresh allocation first.
//
// A call of a function of the module returns fresh buffers the caller owns
// and frees like its own allocations. Functions this does not cover (a
// buffer allocated in a nested region, an external call that returns a
// buffer, a deallocation already there) make the caller fall back to the
// ownership-based pipeline for the whole module.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_PLACEDEALLOCSPASS
#define GEN_PASS_DEF_DEALLOCATEBUFFERSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// Whether `op` calls a function of the module whose buffer results are
/// identity-layout memrefs: placeInFunction makes each a fresh allocation
/// (ownReturnedBuffers), which the caller owns and frees.
bool ownedCallResults(Operation *op) {
  auto call = dyn_cast<func::CallOp>(op);
  if (!call)
    return false;
  auto callee =
      SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(op, call.getCalleeAttr());
  if (!callee || callee.isExternal())
    return false;
  return llvm::all_of(op->getResultTypes(), [](Type t) {
    auto m = dyn_cast<BaseMemRefType>(t);
    return !m || (isa<MemRefType>(m) && cast<MemRefType>(m).getLayout().isIdentity());
  });
}

/// Why `func` is not covered, or empty.
std::string unsupported(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return "it has several blocks";
  std::string why;
  Block *entry = &func.getBody().front();
  func.walk([&](Operation *op) {
    if (!why.empty())
      return WalkResult::interrupt();
    if (isa<memref::DeallocOp, bufferization::DeallocOp>(op))
      why = "it frees a buffer already";
    else if (isa<memref::AllocOp>(op) && op->getBlock() != entry)
      why = "it allocates a buffer in a nested region";
    else if (isa<memref::ReallocOp, bufferization::CloneOp>(op))
      why = "it reallocates or clones a buffer";
    else if (op->getNumRegions() && !isa<func::FuncOp>(op) &&
             llvm::any_of(op->getResultTypes(),
                          [](Type t) { return isa<BaseMemRefType>(t); }))
      why = "a region op returns a buffer";
    else if (auto call = dyn_cast<CallOpInterface>(op);
             call && !ownedCallResults(op) &&
             llvm::any_of(op->getResultTypes(), [](Type t) {
               return isa<BaseMemRefType>(t);
             }))
      why = "a call returns a buffer";
    return WalkResult::advance();
  });
  return why;
}

/// Whether the results of `user`, which reads a buffer, can hold on to it:
/// not a loaded value, a size or a stride (copies of what the buffer says).
bool resultsMayHoldBuffer(Operation *user, Value result) {
  if (isa<memref::LoadOp, memref::DimOp, memref::RankOp>(user))
    return false;
  if (auto meta = dyn_cast<memref::ExtractStridedMetadataOp>(user))
    return result == meta.getBaseBuffer();
  return true;
}

/// The buffer `v` is a view of: through views, casts and reshapes to an
/// allocation, a get_global, a block argument or another op's result.
Value rootBuffer(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto view = dyn_cast<ViewLikeOpInterface>(def))
      v = view.getViewSource();
    else if (auto cast = dyn_cast<memref::CastOp>(def))
      v = cast.getSource();
    else
      break;
  }
  return v;
}

/// Makes every returned buffer one the caller may free, as the
/// ownership-based pass does: a returned constant (get_global), argument
/// or buffer returned twice is copied into a fresh allocation.
void ownReturnedBuffers(func::FuncOp func) {
  llvm::SmallPtrSet<Value, 8> claimed;
  func.walk([&](func::ReturnOp ret) {
    OpBuilder b(ret);
    for (OpOperand &operand : ret->getOpOperands()) {
      auto type = dyn_cast<MemRefType>(operand.get().getType());
      if (!type)
        continue;
      Value root = rootBuffer(operand.get());
      Operation *def = root.getDefiningOp();
      if (def && (isa<memref::AllocOp>(def) || ownedCallResults(def)) &&
          claimed.insert(root).second)
        continue;
      // A strided view cannot be copied into its own type (function
      // results have identity layouts after bufferization; the executor
      // frees a buffer two results share once).
      if (!type.getLayout().isIdentity())
        continue;
      Location loc = ret.getLoc();
      SmallVector<Value> sizes;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (type.isDynamicDim(d))
          sizes.push_back(memref::DimOp::create(b, loc, operand.get(), d));
      Value copy = memref::AllocOp::create(
          b, loc, MemRefType::get(type.getShape(), type.getElementType()),
          sizes);
      memref::CopyOp::create(b, loc, operand.get(), copy);
      operand.set(copy);
    }
  });
}

void placeInFunction(func::FuncOp func) {
  ownReturnedBuffers(func);
  Block *entry = &func.getBody().front();
  llvm::DenseMap<Operation *, unsigned> position;
  unsigned n = 0;
  for (Operation &op : *entry)
    position[&op] = n++;
  // The buffers the function owns: its allocations and the buffer results
  // of calls of the module's functions.
  SmallVector<Value> allocs;
  for (Operation &op : *entry) {
    if (isa<memref::AllocOp>(op))
      allocs.push_back(op.getResult(0));
    else if (ownedCallResults(&op))
      for (Value r : op.getResults())
        if (isa<BaseMemRefType>(r.getType()))
          allocs.push_back(r);
  }
  for (Value alloc : allocs) {
    // Every op reached from the buffer through results that may hold it:
    // views, casts, transposes, pointers taken, a collective's request.
    Operation *last = alloc.getDefiningOp();
    bool returned = false;
    SmallVector<Operation *> work(alloc.getUsers().begin(),
                                  alloc.getUsers().end());
    llvm::SmallPtrSet<Operation *, 16> seen;
    while (!work.empty()) {
      Operation *user = work.pop_back_val();
      if (!seen.insert(user).second)
        continue;
      if (isa<func::ReturnOp>(user)) {
        returned = true;
        break;
      }
      if (Operation *at = entry->findAncestorOpInBlock(*user);
          at && position.lookup(at) > position.lookup(last))
        last = at;
      // A call of a module function reads the buffer and returns fresh
      // ones (ownReturnedBuffers): its results never hold this buffer.
      if (ownedCallResults(user))
        continue;
      for (Value result : user->getResults())
        if (resultsMayHoldBuffer(user, result))
          for (Operation *next : result.getUsers())
            work.push_back(next);
    }
    if (returned)
      continue;
    OpBuilder b(func.getContext());
    b.setInsertionPointAfter(last);
    memref::DeallocOp::create(b, alloc.getLoc(), alloc);
  }
}

struct PlaceDeallocsPass
    : shardx::impl::PlaceDeallocsPassBase<PlaceDeallocsPass> {
  void runOnOperation() override {
    std::string why;
    if (!shardx::placeDeallocs(getOperation(), &why)) {
      getOperation().emitError("shardx-place-deallocs: ") << why;
      signalPassFailure();
    }
  }
};

/// After its last use where placeDeallocs can, else MLIR's ownership-based
/// deallocation; either way the bufferization ops are lowered to memref.
struct DeallocateBuffersPass
    : shardx::impl::DeallocateBuffersPassBase<DeallocateBuffersPass> {
  LogicalResult initialize(MLIRContext *) override {
    // The passes of `owned` itself: text anchored on `builtin.module(...)`
    // would nest a second module pipeline, which finds no module inside
    // the module and runs nothing.
    return parsePassPipeline(
        "ownership-based-buffer-deallocation,canonicalize,"
        "buffer-deallocation-simplification,"
        "bufferization-lower-deallocations,"
        "convert-bufferization-to-memref,cse,canonicalize",
        owned);
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    DeallocateBuffersPassBase::getDependentDialects(registry);
    owned.getDependentDialects(registry);
  }
  void runOnOperation() override {
    // A copy of a buffer onto itself does nothing but move its bytes:
    // one-shot bufferization writes one for an insert_slice of a slice
    // computed in place (a grouped matmul's rows, each loop iteration),
    // and the CSE after it merges the two views only after the
    // canonicalization that folds such copies has run.
    getOperation().walk([](memref::CopyOp copy) {
      if (copy.getSource() == copy.getTarget())
        copy.erase();
    });
    if (shardx::placeDeallocs(getOperation()))
      return;
    if (failed(runPipeline(owned, getOperation())))
      signalPassFailure();
  }
  OpPassManager owned{"builtin.module"};
};

} // namespace

bool mlir::shardx::placeDeallocs(ModuleOp module, std::string *why) {
  SmallVector<func::FuncOp> funcs;
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    std::string reason = unsupported(func);
    if (!reason.empty()) {
      if (why)
        *why = "@" + func.getSymName().str() + ": " + reason;
      return false;
    }
    funcs.push_back(func);
  }
  for (func::FuncOp func : funcs)
    placeInFunction(func);
  return true;
}
