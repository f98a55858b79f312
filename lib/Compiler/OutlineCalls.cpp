//===- OutlineCalls.cpp - Inlined region calls back into calls ------------===//
//
// Part of ShardX.
//
// `shardx-outline-calls` (the first pass of the cpu code generation, on the
// local program): the SPMD pipeline inlines every call of a traced region
// (a transformer layer, an optimizer update) before propagation, so that
// propagation and localization see one body. shardx-inline-calls marks the
// location of each call it inlines (a FusedLoc with metadata
// "shardx.call.<k>"), and the inliner wraps the location of every op it
// clones in the call's, so each op of the local program still says which
// call it came from. Here each maximal run of consecutive ops of one call
// becomes a candidate function; candidates with the same printed body are
// one function, called once per run. Code generation then lowers each layer
// once, however deep the model is.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/xxhash.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_OUTLINECALLSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kMarkPrefix = "shardx.call.";

/// The call mark of a FusedLoc made by shardx-inline-calls, or -1.
int64_t markOf(FusedLoc fused) {
  auto name = dyn_cast_or_null<StringAttr>(fused.getMetadata());
  if (!name || !name.getValue().starts_with(kMarkPrefix))
    return -1;
  int64_t k;
  if (name.getValue().drop_front(kMarkPrefix.size()).getAsInteger(10, k))
    return -1;
  return k;
}

/// The call an op's location says it was inlined from: -1 for none, -2
/// for several (an op that merges the ops of two calls).
int64_t callOf(Location loc) {
  int64_t found = -1;
  loc->walk([&](Location inner) {
    auto fused = dyn_cast<FusedLoc>(inner);
    if (!fused)
      return WalkResult::advance();
    int64_t k = markOf(fused);
    if (k < 0)
      return WalkResult::advance();
    if (found >= 0 && found != k) {
      found = -2;
      return WalkResult::interrupt();
    }
    found = k;
    return WalkResult::advance();
  });
  return found;
}

bool isConstant(Operation *op) {
  return op->getNumOperands() == 0 && op->getNumRegions() == 0 &&
         op->hasTrait<OpTrait::ConstantLike>();
}

/// Whether `op` is made again wherever it is used rather than passed: a
/// constant, or an empty tensor or a fill (on tensors) of such ops. CSE
/// shares one zero-filled accumulator or empty destination between all the
/// layers; passed to a layer's function, a fill would no longer be seen
/// there (a GEMM accumulates into a copy of it, beta = 1, and a reduction
/// writes into the caller's buffer).
bool isRematerializable(Operation *op) {
  if (isConstant(op))
    return true;
  if (!isa<tensor::EmptyOp, linalg::FillOp>(op) || op->getNumResults() != 1 ||
      !isa<RankedTensorType>(op->getResult(0).getType()))
    return false;
  return llvm::all_of(op->getOperands(), [&](Value operand) {
    Operation *def = operand.getDefiningOp();
    return def && def->getBlock() == op->getBlock() && isRematerializable(def);
  });
}

/// Adds `op` to `ops` after the ops its operands need (rematerializable).
void addRematerialized(Operation *op, llvm::SetVector<Operation *> &ops) {
  if (ops.contains(op))
    return;
  for (Value operand : op->getOperands())
    addRematerialized(operand.getDefiningOp(), ops);
  ops.insert(op);
}

/// One run of consecutive ops of one call, and what it reads and returns.
struct Run {
  SmallVector<Operation *> ops;
  llvm::SetVector<Value> inputs;
  /// Rematerializable ops outside the run that it reads, operands first.
  llvm::SetVector<Operation *> constants;
  SmallVector<Value> outputs;
  /// Ops left out of the run that go after its call.
  SmallVector<Operation *> sunk;
  func::FuncOp body;
  llvm::hash_code hash;
};

/// Whether `use` is by an op outside `inRun` (ops of one block).
bool isOutside(OpOperand &use,
               const llvm::SmallPtrSetImpl<Operation *> &inRun) {
  Operation *top = use.getOwner();
  Block *block = use.get().getParentBlock();
  while (top && top->getBlock() != block)
    top = top->getParentOp();
  return !top || !inRun.contains(top);
}

bool isUsedOutside(Value value,
                   const llvm::SmallPtrSetImpl<Operation *> &inRun) {
  return llvm::any_of(value.getUses(),
                      [&](OpOperand &use) { return isOutside(use, inRun); });
}

/// The values `run` reads from outside it (rematerializable ones apart) and
/// the results it defines that are used after it (rematerializable ones
/// apart: replaceRun makes those again after the call).
void collectInterface(Run &run) {
  llvm::SmallPtrSet<Operation *, 32> inRun(run.ops.begin(), run.ops.end());
  for (Operation *op : run.ops) {
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands()) {
        Operation *def = operand.getDefiningOp();
        Operation *top = nullptr;
        if (def) {
          top = def;
          while (top && !inRun.contains(top) &&
                 top->getBlock() != op->getBlock())
            top = top->getParentOp();
        } else {
          Operation *owner =
              cast<BlockArgument>(operand).getOwner()->getParentOp();
          top = owner;
          while (top && top->getBlock() != op->getBlock())
            top = top->getParentOp();
        }
        // Defined inside one of the run's ops (a block argument of a body,
        // an op of a body), or by an op of the run.
        if (top && inRun.contains(top))
          continue;
        if (def && def->getBlock() == op->getBlock() && isRematerializable(def))
          addRematerialized(def, run.constants);
        else
          run.inputs.insert(operand);
      }
    });
  }
  for (Operation *op : run.ops) {
    if (isRematerializable(op))
      continue;
    for (Value result : op->getResults())
      if (isUsedOutside(result, inRun))
        run.outputs.push_back(result);
  }
}

bool isStart(Operation *op) {
  StringRef name = op->getName().getStringRef();
  return name.starts_with("shardx.") && name.ends_with("_start");
}

/// Leaves out of `run` the ops whose place in the program differs from call
/// to call, so that the calls' bodies are the same:
/// - shardx-bucket-collectives packs the gradients of several layers in one
///   buffer, each at its own offset: inserts into a buffer made outside the
///   run (or into such an insert) move after the call, extracts from one
///   stay before it;
/// - an asynchronous collective started in the run and waited on after it
///   (shardx-schedule-collectives) starts after the call, and a wait in the
///   run on one started before it stays before the call: a start's result
///   goes to its wait only.
void dropPlacedOps(Run &run) {
  llvm::SmallPtrSet<Operation *, 32> inRun(run.ops.begin(), run.ops.end());
  auto outside = [&](Value v) {
    Operation *def = v.getDefiningOp();
    return !def || !inRun.contains(def);
  };
  // The largest set of inserts and starts that can all move after the call:
  // each reads no op of the run that stays, and no op of the run that stays
  // reads it.
  llvm::SmallPtrSet<Operation *, 16> sunk;
  for (Operation *op : run.ops)
    if (isa<tensor::InsertSliceOp>(op) || isStart(op))
      sunk.insert(op);
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : run.ops) {
      if (!sunk.contains(op))
        continue;
      bool ok = llvm::all_of(op->getUsers(), [&](Operation *user) {
        return !inRun.contains(user) || sunk.contains(user);
      });
      if (auto insert = dyn_cast<tensor::InsertSliceOp>(op)) {
        Operation *dest = insert.getDest().getDefiningOp();
        ok = ok && (outside(insert.getDest()) || sunk.contains(dest));
      }
      if (!ok) {
        sunk.erase(op);
        changed = true;
      }
    }
  }
  SmallVector<Operation *> kept;
  for (Operation *op : run.ops) {
    if (sunk.contains(op)) {
      run.sunk.push_back(op);
      continue;
    }
    if (auto extract = dyn_cast<tensor::ExtractSliceOp>(op))
      if (outside(extract.getSource()))
        continue;
    if (op->getName().getStringRef() == "shardx.wait" &&
        outside(op->getOperand(0)))
      continue;
    kept.push_back(op);
  }
  run.ops = std::move(kept);
}

/// A hash of what `run`'s function would hold: each op's name, attributes,
/// properties and result types, and where its operands come from (an input
/// by position, an op of the run by order, a constant by content). Runs with
/// the same body have the same hash; buildBody's functions are compared
/// before a group shares one.
llvm::hash_code bodyHash(const Run &run) {
  DenseMap<Value, llvm::hash_code> ids;
  for (auto [i, v] : llvm::enumerate(run.inputs))
    ids[v] = llvm::hash_combine(1, i);
  auto ignore = OperationEquivalence::ignoreHashValue;
  auto id = [&](Value v) { return ids.lookup(v); };
  for (Operation *c : run.constants) {
    llvm::hash_code content = OperationEquivalence::computeHash(
        c, id, ignore, OperationEquivalence::IgnoreLocations);
    for (Value v : c->getResults())
      ids[v] = llvm::hash_combine(2, content);
  }
  unsigned next = 0;
  llvm::hash_code hash =
      llvm::hash_combine(run.inputs.size(), run.outputs.size());
  for (Operation *op : run.ops) {
    op->walk<WalkOrder::PreOrder>([&](Operation *nested) {
      hash = llvm::hash_combine(
          hash, OperationEquivalence::computeHash(
                    nested, id, ignore, OperationEquivalence::IgnoreLocations));
      for (Value result : nested->getResults())
        ids[result] = llvm::hash_combine(3, next++);
      for (Region &region : nested->getRegions())
        for (Block &block : region)
          for (BlockArgument arg : block.getArguments()) {
            ids[arg] = llvm::hash_combine(4, next++);
            hash = llvm::hash_combine(hash, arg.getType());
          }
    });
  }
  for (Value v : run.outputs)
    hash = llvm::hash_combine(hash, ids.lookup(v));
  return hash;
}

/// Values a call passes as they are: tensors and scalars (an async
/// collective's handle stays in the function that waits on it).
bool passable(ArrayRef<Value> values) {
  return llvm::all_of(values, [](Value v) {
    Type t = v.getType();
    return isa<RankedTensorType, IntegerType, FloatType, IndexType>(t);
  });
}

/// The candidate function of `run`, inserted before `before`.
func::FuncOp buildBody(Run &run, OpBuilder &builder, Operation *before) {
  SmallVector<Type> inputTypes, outputTypes;
  for (Value v : run.inputs)
    inputTypes.push_back(v.getType());
  for (Value v : run.outputs)
    outputTypes.push_back(v.getType());
  builder.setInsertionPoint(before);
  Location loc = builder.getUnknownLoc();
  auto func = func::FuncOp::create(
      builder, loc, "c", builder.getFunctionType(inputTypes, outputTypes));
  func.setPrivate();
  Block *block = func.addEntryBlock();
  IRMapping map;
  for (auto [value, arg] : llvm::zip(run.inputs, block->getArguments()))
    map.map(value, arg);
  OpBuilder inner = OpBuilder::atBlockEnd(block);
  for (Operation *c : run.constants)
    if (isConstant(c))
      inner.clone(*c, map);
  // The other rematerialized ops (empty tensors, fills) are made again
  // right before each reader, as shardx-split-shared-empty-tensors does in
  // the inlined program: a zero fill right before a GEMM is its beta = 0.
  SmallVector<Operation *> made;
  std::function<void(Value)> remake = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (map.contains(v) || !def || !run.constants.contains(def))
      return;
    for (Value operand : def->getOperands())
      remake(operand);
    // A mapping of its own: cloning the region of a fill again with `map`
    // would reuse the block arguments of the first clone.
    IRMapping operands;
    for (Value operand : def->getOperands())
      operands.map(operand, map.lookup(operand));
    map.map(def->getResults(), inner.clone(*def, operands)->getResults());
    made.push_back(def);
  };
  for (Operation *op : run.ops) {
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        remake(operand);
    });
    inner.clone(*op, map);
    for (Operation *def : made)
      for (Value v : def->getResults())
        map.erase(v);
    made.clear();
  }
  SmallVector<Value> results;
  for (Value v : run.outputs)
    results.push_back(map.lookup(v));
  func::ReturnOp::create(inner, loc, results);
  return func;
}

/// Gives each reader of a transpose or a chunk in another call (or outside
/// any) a copy of its own, right before it and marked as it is: in the
/// inlined program both are free (a transpose folds into the GEMM that
/// reads it, as a transposed operand; a chunk is a view), but a call that
/// returned one would materialize it (a transposed copy, a copy of a
/// strided view), and its reader's function would read that copy. The
/// reader's call now takes the transpose's or chunk's operand instead.
void sinkViews(func::FuncOp func) {
  Block &block = func.getBody().front();
  SmallVector<Operation *> views;
  for (Operation &op : block.without_terminator())
    if (isa<linalg::TransposeOp, mlir::shardx::ChunkOp>(op) &&
        op.getNumResults() == 1 &&
        isa<RankedTensorType>(op.getResult(0).getType()))
      views.push_back(&op);
  OpBuilder builder(func.getContext());
  // Last first: a chunk's readers include the transposes copied before it.
  for (Operation *view : llvm::reverse(views)) {
    int64_t call = callOf(view->getLoc());
    DenseMap<Operation *, Value> copies;
    for (OpOperand &use :
         llvm::make_early_inc_range(view->getResult(0).getUses())) {
      Operation *reader = block.findAncestorOpInBlock(*use.getOwner());
      if (!reader || reader->hasTrait<OpTrait::IsTerminator>() ||
          callOf(reader->getLoc()) == call)
        continue;
      Value &copy = copies[reader];
      if (!copy) {
        builder.setInsertionPoint(reader);
        Operation *clone = builder.clone(*view);
        clone->setLoc(reader->getLoc());
        copy = clone->getResult(0);
      }
      use.set(copy);
    }
    if (view->use_empty())
      view->erase();
  }
}

/// Drops the marks of shardx-inline-calls from every location in `module`.
void dropMarks(ModuleOp module) {
  AttrTypeReplacer replacer;
  replacer.addReplacement([](FusedLoc fused) -> std::optional<Location> {
    if (markOf(fused) < 0)
      return std::nullopt;
    ArrayRef<Location> locs = fused.getLocations();
    if (locs.size() == 1)
      return locs.front();
    return FusedLoc::get(fused.getContext(), locs);
  });
  module->walk([&](Operation *op) {
    op->setLoc(cast<LocationAttr>(replacer.replace(op->getLoc())));
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setLoc(cast<LocationAttr>(replacer.replace(arg.getLoc())));
  });
}

struct OutlineCallsPass
    : mlir::shardx::impl::OutlineCallsPassBase<OutlineCallsPass> {
  using OutlineCallsPassBase::OutlineCallsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool marked = false;
    module->walk([&](Operation *op) {
      if (callOf(op->getLoc()) != -1) {
        marked = true;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (!marked)
      return markAllAnalysesPreserved();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs)
      if (!func.isExternal() && func.getBody().hasOneBlock())
        outlineRuns(func, symbols);
    dropMarks(module);
  }

  /// The call results that replaced the outputs of runs already outlined,
  /// and those runs (their ops are erased at the end).
  DenseMap<Value, Value> replaced;
  SmallVector<Run *> done;

  void outlineRuns(func::FuncOp func, SymbolTable &symbols) {
    sinkViews(func);
    // Maximal runs of ops of one call; constants neither join nor cut one.
    std::vector<Run> runs;
    int64_t current = -1;
    for (Operation &op : func.getBody().front().without_terminator()) {
      if (isConstant(&op))
        continue;
      int64_t k = callOf(op.getLoc());
      if (k < 0) {
        current = -1;
        continue;
      }
      if (k != current)
        runs.emplace_back();
      current = k;
      runs.back().ops.push_back(&op);
    }
    for (Run &run : runs)
      dropPlacedOps(run);
    // A run whose ops all stayed outside (e.g. only bucket extracts) is empty
    // whatever `min-ops` says.
    llvm::erase_if(runs, [&](const Run &run) {
      return run.ops.empty() || run.ops.size() < minOps;
    });
    if (runs.empty())
      return;
    OpBuilder builder(func.getContext());
    llvm::erase_if(runs, [](Run &run) {
      collectInterface(run);
      return !passable(run.inputs.getArrayRef()) || !passable(run.outputs);
    });
    llvm::MapVector<size_t, SmallVector<Run *>> groups;
    for (Run &run : runs)
      groups[static_cast<size_t>(bodyHash(run))].push_back(&run);
    for (auto &[hash, members] : groups) {
      if (members.size() < 2)
        continue;
      // Inputs another group's runs returned are now their calls' results.
      for (Run *run : members) {
        llvm::SetVector<Value> inputs;
        for (Value v : run->inputs)
          inputs.insert(replaced.lookup_or(v, v));
        run->inputs = std::move(inputs);
      }
      func::FuncOp callee = buildBody(*members.front(), builder, func);
      SmallVector<Run *> same;
      for (Run *run : members) {
        if (run != members.front()) {
          func::FuncOp body = buildBody(*run, builder, func);
          // The printed bodies where upstream's comparison says no (it
          // does for some bodies whose printed forms are the same).
          bool equal = OperationEquivalence::isRegionEquivalentTo(
                           &callee.getBody(), &body.getBody(),
                           OperationEquivalence::IgnoreLocations) ||
                       mlir::shardx::canonicalKernelText(callee) ==
                           mlir::shardx::canonicalKernelText(body);
          body.erase();
          if (!equal)
            continue; // a hash collision: that run stays inline
        }
        same.push_back(run);
      }
      if (same.size() < 2) {
        callee.erase();
        continue;
      }
      // Named by its printed body: the same layer has the same name in
      // every program.
      llvm::SmallString<32> name;
      llvm::raw_svector_ostream(name)
          << mlir::shardx::kCallPrefix
          << llvm::format_hex_no_prefix(
                 llvm::xxh3_64bits(mlir::shardx::canonicalKernelText(callee)),
                 16);
      callee.setName(name);
      symbols.insert(callee);
      for (Run *run : same)
        replaceRun(*run, callee, builder);
    }
    for (Run *run : done)
      for (Operation *op : run->ops)
        op->dropAllReferences();
    for (Run *run : done)
      for (Operation *op : run->ops) {
        op->dropAllUses();
        op->erase();
      }
    done.clear();
    replaced.clear();
  }

  /// The run's ops become one call of `callee`, after the run's last op.
  void replaceRun(Run &run, func::FuncOp callee, OpBuilder &builder) {
    Operation *last = run.ops.back();
    builder.setInsertionPointAfter(last);
    // An input a run of this group returned is now that run's call's.
    SmallVector<Value> operands;
    for (Value v : run.inputs)
      operands.push_back(replaced.lookup_or(v, v));
    auto call = func::CallOp::create(builder, last->getLoc(), callee, operands);
    for (auto [old, now] : llvm::zip(run.outputs, call.getResults())) {
      old.replaceAllUsesWith(now);
      replaced[old] = now;
    }
    Operation *after = call;
    // Rematerializable results read after the run (an empty tensor or a
    // fill that CSE shares with later ops) are made again after the call.
    llvm::SmallPtrSet<Operation *, 32> inRun(run.ops.begin(), run.ops.end());
    IRMapping remade;
    for (Operation *op : run.ops) {
      if (!isRematerializable(op) || !isUsedOutside(op->getResult(0), inRun))
        continue;
      llvm::SetVector<Operation *> needed;
      addRematerialized(op, needed);
      for (Operation *def : needed) {
        if (isConstant(def) || remade.contains(def->getResult(0)))
          continue;
        builder.setInsertionPointAfter(after);
        after = builder.clone(*def, remade);
      }
      Value now = remade.lookup(op->getResult(0));
      op->getResult(0).replaceUsesWithIf(
          now, [&](OpOperand &use) { return isOutside(use, inRun); });
    }
    for (Operation *op : run.sunk) {
      op->moveAfter(after);
      after = op;
    }
    // Erased after every group is done: until then `replaced` and the
    // inputs of other runs may name these ops' results.
    done.push_back(&run);
  }
};

} // namespace
