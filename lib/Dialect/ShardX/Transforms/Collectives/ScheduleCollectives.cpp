//===- ScheduleCollectives.cpp - Overlap collectives with compute ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Splits each all-reduce, all-gather and reduce-scatter into its start
// (shardx.all_reduce_start, ...) and a shardx.wait and schedules the pair in
// its block: the wait as late as its first use
// allows, the start (with the pure ops computing its operand) as early as
// its operand allows, under a bound on the bytes in flight. XLA's
// latency-hiding scheduler and PyTorch DDP's overlap of gradient all-reduces
// with the rest of backward do the same job; here the whole program is
// known, so the moves are plain dependence checks.
//
//===----------------------------------------------------------------------===//

#include "Collectives/Schedule.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <deque>

namespace mlir::shardx {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVESPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// The bytes of a tensor as the runtime stores it (one byte at least per
/// element).
int64_t byteSize(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() ||
      !tensor.getElementType().isIntOrFloat())
    return 0;
  return tensor.getNumElements() *
         std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
}

/// The ancestor of `op` in `block`, or null.
Operation *ancestorIn(Block &block, Operation *op) {
  return block.findAncestorOpInBlock(*op);
}

/// The last op of `block` that defines one of `op`'s operands (or a value
/// used inside its regions), or null when all come from outside the block.
Operation *lastProducerIn(Block &block, Operation *op) {
  Operation *last = nullptr;
  auto visit = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return;
    def = ancestorIn(block, def);
    if (!def || def == op)
      return;
    if (!last || last->isBeforeInBlock(def))
      last = def;
  };
  op->walk([&](Operation *inner) {
    for (Value v : inner->getOperands())
      visit(v);
  });
  return last;
}

/// Moves `op` before `pos` in its own block. Unlike Operation::moveBefore,
/// which splices and so invalidates the order of the whole block (the next
/// isBeforeInBlock then renumbers every op: quadratic over a pass of
/// moves), the op is taken out and inserted again, and only it is
/// numbered again, in the gap its new neighbours leave.
void moveWithinBlock(Operation *op, Block::iterator pos) {
  Block *block = op->getBlock();
  if (pos != block->end() && &*pos == op)
    return;
  op->remove();
  block->getOperations().insert(pos, op);
}

/// Moves `op` to just after `after`, or to the start of the block when
/// `after` is null, unless that is not earlier than where it is.
void hoistAfter(Operation *op, Operation *after) {
  Block *block = op->getBlock();
  if (!after) {
    moveWithinBlock(op, block->begin());
    return;
  }
  if (after->isBeforeInBlock(op))
    moveWithinBlock(op, std::next(after->getIterator()));
}

/// Whether `op` may move freely within its block (no memory effects, no
/// regions: packing copies, reshapes, constants, empty tensors).
bool isMovable(Operation *op) {
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         !op->hasTrait<OpTrait::IsTerminator>();
}

/// Hoists `op` as early as its operands allow, first hoisting the movable
/// ops of the block that compute them.
void hoistWithProducers(Block &block, Operation *op,
                        DenseSet<Operation *> &done) {
  if (!done.insert(op).second)
    return;
  for (Value v : op->getOperands())
    if (Operation *def = v.getDefiningOp();
        def && def->getBlock() == &block && isMovable(def))
      hoistWithProducers(block, def, done);
  if (op->getBlock() == &block && isMovable(op))
    hoistAfter(op, lastProducerIn(block, op));
}

/// Whether `op` starts an asynchronous collective.
bool isStart(Operation *op) {
  return isa<AllReduceStartOp, AllGatherStartOp, ReduceScatterStartOp>(op);
}

/// The bytes a collective holds while in flight: the larger of its operand
/// and result (the gathered whole of an all_gather, the reduced whole of a
/// reduce_scatter).
int64_t collectiveBytes(Operation *op) {
  return std::max(byteSize(op->getOperand(0).getType()),
                  byteSize(op->getResult(0).getType()));
}

/// `op` -> its start + wait, in place.
template <typename StartOp> void replaceBySplit(Operation *op, OpBuilder &b) {
  b.setInsertionPoint(op);
  OperationState state(op->getLoc(), StartOp::getOperationName());
  state.addOperands(op->getOperands());
  state.addTypes(op->getResultTypes());
  state.addAttributes(op->getAttrs());
  Operation *start = b.create(state);
  auto wait = WaitOp::create(b, op->getLoc(), op->getResult(0).getType(),
                             start->getResult(0));
  op->getResult(0).replaceAllUsesWith(wait.getResult());
  op->erase();
}

/// Splits one collective; false for ops that have no start form.
bool split(Operation *op, OpBuilder &b) {
  if (isa<AllReduceOp>(op))
    replaceBySplit<AllReduceStartOp>(op, b);
  else if (isa<AllGatherOp>(op))
    replaceBySplit<AllGatherStartOp>(op, b);
  else if (isa<ReduceScatterOp>(op))
    replaceBySplit<ReduceScatterStartOp>(op, b);
  else
    return false;
  return true;
}

void sinkToFirstUse(Block &block, WaitOp wait) {
  Operation *first = nullptr;
  for (Operation *user : wait->getUsers()) {
    Operation *at = ancestorIn(block, user);
    if (at && (!first || at->isBeforeInBlock(first)))
      first = at;
  }
  if (!first && block.mightHaveTerminator())
    first = block.getTerminator();
  moveWithinBlock(wait, first ? first->getIterator() : block.end());
}

/// Walks the block in order; a start that would put more than
/// `maxBytesInFlight` in flight first waits for the oldest ones.
void boundBytesInFlight(Block &block, int64_t maxBytesInFlight) {
  std::deque<std::pair<Operation *, int64_t>> inFlight;
  int64_t bytes = 0;
  // A snapshot: the walk moves waits it has passed over.
  SmallVector<Operation *> ops =
      llvm::map_to_vector(block, [](Operation &op) { return &op; });
  for (Operation *op : ops) {
    if (auto wait = dyn_cast<WaitOp>(op)) {
      auto it = llvm::find_if(inFlight, [&](auto &entry) {
        return entry.first->getResult(0) == wait.getPending();
      });
      if (it != inFlight.end()) {
        bytes -= it->second;
        inFlight.erase(it);
      }
      continue;
    }
    if (!isStart(op))
      continue;
    int64_t size = collectiveBytes(op);
    while (!inFlight.empty() && bytes + size > maxBytesInFlight) {
      auto [oldest, oldestBytes] = inFlight.front();
      inFlight.pop_front();
      bytes -= oldestBytes;
      moveWithinBlock(*oldest->getUsers().begin(), op->getIterator());
    }
    inFlight.emplace_back(op, size);
    bytes += size;
  }
}

void scheduleBlock(Block &block, int64_t maxBytesInFlight) {
  SmallVector<WaitOp> waits;
  SmallVector<Operation *> starts;
  for (Operation &op : block) {
    if (auto wait = dyn_cast<WaitOp>(op))
      waits.push_back(wait);
    if (isStart(&op))
      starts.push_back(&op);
  }
  // Waits as late as their first use (last wait first, so that a wait
  // never passes one that its user follows).
  for (WaitOp wait : llvm::reverse(waits))
    sinkToFirstUse(block, wait);
  // Starts as early as their operands allow, staying in program order
  // among themselves (the order every rank issues them in).
  DenseSet<Operation *> done;
  Operation *previous = nullptr;
  for (Operation *start : starts) {
    for (Value v : start->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && def->getBlock() == &block && isMovable(def))
        hoistWithProducers(block, def, done);
    Operation *after = lastProducerIn(block, start);
    if (previous && (!after || after->isBeforeInBlock(previous)))
      after = previous;
    hoistAfter(start, after);
    previous = start;
  }
  boundBytesInFlight(block, maxBytesInFlight);
}

//===----------------------------------------------------------------------===//
// The model behind print-schedule and shardx-print-plan
//===----------------------------------------------------------------------===//

/// The alpha-beta time of the collective `op` (ring: each rank moves
/// (n - 1) / n of the whole for an all-gather or reduce-scatter, twice that
/// for an all-reduce), at the mesh model's cost of its group.
double collectiveUs(CollectiveOpInterface op,
                    SymbolTableCollection &symbolTable) {
  MeshOp mesh = lookupMesh(op.getOperation(), op.getMeshAttr(), &symbolTable);
  if (!mesh)
    return 0;
  MeshSpec spec = getMeshSpec(mesh);
  ArrayRef<int64_t> axes = op.getAxes();
  if (!spec.hasAxes(axes))
    return 0;
  Operation *operation = op.getOperation();
  Step::Kind kind = isa<AllReduceOp, AllReduceStartOp>(operation)
                        ? Step::Kind::AllReduce
                    : isa<AllGatherOp, AllGatherStartOp>(operation)
                        ? Step::Kind::AllGather
                        : Step::Kind::ReduceScatter;
  double bytes =
      lowerBoundBytes(kind, spec.groupSize(axes), collectiveBytes(operation));
  return spec.groupCost(axes).timeUs(bytes);
}

/// The compute time of `op`: its loop iterations (structured ops) or its
/// result elements (copies, inserts, extracts) at `computeRate`.
double computeUs(Operation *op, double computeRate) {
  if (computeRate <= 0)
    return 0;
  double iterations = 0;
  op->walk([&](Operation *inner) {
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(inner)) {
      double n = 1;
      for (int64_t range : linalgOp.getStaticLoopRanges())
        n *= ShapedType::isDynamic(range) ? 1 : range;
      iterations += n;
    } else if (isa<tensor::InsertSliceOp, tensor::ExtractSliceOp>(inner)) {
      iterations += byteSize(inner->getResult(0).getType()) / 4.0;
    }
  });
  return iterations * 1e6 / computeRate;
}

/// The name the summary gives a start op.
StringRef startName(Operation *op) { return op->getName().stripDialect(); }

struct ScheduleCollectivesPass
    : public mlir::shardx::impl::ScheduleCollectivesPassBase<
          ScheduleCollectivesPass> {
  using ScheduleCollectivesPassBase::ScheduleCollectivesPassBase;

  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    DenseMap<Operation *, Timeline> before;
    if (printSchedule)
      getOperation()->walk([&](func::FuncOp fn) {
        before[fn] = modelSchedule(fn, symbolTable, computeRate);
      });
    bool changed = scheduleCollectives(getOperation(), maxBytesInFlight);
    if (printSchedule)
      getOperation()->walk([&](func::FuncOp fn) {
        InFlightDiagnostic diag = emitRemark(fn.getLoc());
        describeSchedule(fn, before[fn],
                         modelSchedule(fn, symbolTable, computeRate), diag);
      });
    if (!changed)
      markAllAnalysesPreserved();
  }
};

} // namespace

bool mlir::shardx::scheduleCollectives(Operation *root,
                                       int64_t maxBytesInFlight) {
  SmallVector<Operation *> collectives;
  root->walk([&](Operation *op) {
    if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op))
      collectives.push_back(op);
  });
  if (collectives.empty())
    return false;
  SetVector<Block *> blocks;
  OpBuilder b(root->getContext());
  for (Operation *op : collectives) {
    blocks.insert(op->getBlock());
    split(op, b);
  }
  for (Block *block : blocks)
    scheduleBlock(*block, maxBytesInFlight);
  return true;
}

/// One rank's timeline of `fn`'s body: compute runs in program order; a
/// collective (or a start) runs on one communication channel in the order
/// issued, from when it is issued; a synchronous collective or a wait
/// blocks compute until its collective ends.
Timeline mlir::shardx::modelSchedule(func::FuncOp fn,
                                     SymbolTableCollection &symbolTable,
                                     double computeRate) {
  Timeline t;
  if (fn.isExternal())
    return t;
  double now = 0, channelFree = 0;
  DenseMap<Value, double> endOf;
  for (Operation &op : fn.getFunctionBody().front()) {
    if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op) || isStart(&op)) {
      double us = collectiveUs(cast<CollectiveOpInterface>(op), symbolTable);
      double end = std::max(now, channelFree) + us;
      channelFree = end;
      t.communication += us;
      ++t.collectives;
      if (isStart(&op)) {
        ++t.asyncCollectives;
        endOf[op.getResult(0)] = end;
        continue;
      }
      t.exposed += end - now;
      now = end;
      continue;
    }
    if (auto wait = dyn_cast<WaitOp>(op)) {
      double end = endOf.lookup(wait.getPending());
      if (end > now) {
        t.exposed += end - now;
        now = end;
      }
      continue;
    }
    now += computeUs(&op, computeRate);
  }
  return t;
}

void mlir::shardx::describeSchedule(func::FuncOp fn, const Timeline &before,
                                    const Timeline &after,
                                    InFlightDiagnostic &diag) {
  diag << "schedule of @" << fn.getName() << ": " << after.collectives
       << " collectives (" << after.asyncCollectives << " async), "
       << llvm::formatv("{0:F3}", after.communication)
       << " us communication; exposed "
       << llvm::formatv("{0:F3}", before.exposed) << " us before, "
       << llvm::formatv("{0:F3}", after.exposed) << " us after scheduling";
  if (fn.isExternal())
    return;
  for (Operation &op : fn.getFunctionBody().front()) {
    if (!isStart(&op))
      continue;
    diag << "\n  " << startName(&op) << " of " << collectiveBytes(&op)
         << " bytes";
    // A bucket's operand is its members inserted into a flat buffer.
    int64_t members = 0;
    Value v = op.getOperand(0);
    while (auto insert = v.getDefiningOp<tensor::InsertSliceOp>()) {
      ++members;
      v = insert.getDest();
    }
    if (members > 1)
      diag << " (bucket of " << members << ")";
  }
}
