//===- ScheduleCollectives.cpp - Overlap collectives with compute ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Splits each all-reduce into shardx.all_reduce_start and shardx.wait and
// schedules the pair in its block: the wait as late as its first use
// allows, the start (with the pure ops computing its operand) as early as
// its operand allows, under a bound on the bytes in flight. XLA's
// latency-hiding scheduler and PyTorch DDP's overlap of gradient all-reduces
// with the rest of backward do the same job; here the whole program is
// known, so the moves are plain dependence checks.
//
//===----------------------------------------------------------------------===//

#include "ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

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

/// Moves `op` to just after `after`, or to the start of the block when
/// `after` is null, unless that is not earlier than where it is.
void hoistAfter(Operation *op, Operation *after) {
  Block *block = op->getBlock();
  if (!after) {
    if (&block->front() != op)
      op->moveBefore(&block->front());
    return;
  }
  if (after->isBeforeInBlock(op))
    op->moveAfter(after);
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

/// The modeled times of a function's top-level block (microseconds);
/// collectives in nested regions are left out.
struct Timeline {
  double communication = 0;
  double exposed = 0;
  int64_t collectives = 0;
  int64_t asyncCollectives = 0;
};

struct ScheduleCollectivesPass
    : public mlir::shardx::impl::ScheduleCollectivesPassBase<
          ScheduleCollectivesPass> {
  using ScheduleCollectivesPassBase::ScheduleCollectivesPassBase;

  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    DenseMap<Operation *, Timeline> before;
    if (printSchedule)
      getOperation()->walk([&](func::FuncOp fn) {
        before[fn] = model(fn, symbolTable);
      });
    SmallVector<AllReduceOp> allReduces;
    getOperation()->walk([&](AllReduceOp op) { allReduces.push_back(op); });
    if (allReduces.empty() && !printSchedule)
      return markAllAnalysesPreserved();
    DenseSet<Block *> blocks;
    for (AllReduceOp op : allReduces) {
      blocks.insert(op->getBlock());
      split(op);
    }
    for (Block *block : blocks)
      schedule(*block);
    if (printSchedule)
      getOperation()->walk([&](func::FuncOp fn) {
        report(fn, before[fn], model(fn, symbolTable));
      });
  }

  /// all_reduce -> all_reduce_start + wait, in place.
  void split(AllReduceOp op) {
    OpBuilder b(op);
    auto start = AllReduceStartOp::create(
        b, op.getLoc(), op.getType(), op.getInput(), op.getMeshAttr(),
        op.getAxesAttr(), op.getReductionAttr());
    auto wait = WaitOp::create(b, op.getLoc(), op.getType(), start.getResult());
    op.getResult().replaceAllUsesWith(wait.getResult());
    op.erase();
  }

  void schedule(Block &block) {
    SmallVector<WaitOp> waits;
    SmallVector<AllReduceStartOp> starts;
    for (Operation &op : block) {
      if (auto wait = dyn_cast<WaitOp>(op))
        waits.push_back(wait);
      if (auto start = dyn_cast<AllReduceStartOp>(op))
        starts.push_back(start);
    }
    // Waits as late as their first use (last wait first, so that a wait
    // never passes one that its user follows).
    for (WaitOp wait : llvm::reverse(waits))
      sinkToFirstUse(block, wait);
    // Starts as early as their operands allow, staying in program order
    // among themselves (the order every rank issues them in).
    DenseSet<Operation *> done;
    Operation *previous = nullptr;
    for (AllReduceStartOp start : starts) {
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
    boundBytesInFlight(block);
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
    if (first)
      wait->moveBefore(first);
    else
      wait->moveBefore(&block, block.end());
  }

  /// Walks the block in order; a start that would put more than
  /// `maxBytesInFlight` in flight first waits for the oldest ones.
  void boundBytesInFlight(Block &block) {
    std::deque<std::pair<AllReduceStartOp, int64_t>> inFlight;
    int64_t bytes = 0;
    // A snapshot: the walk moves waits it has passed over.
    SmallVector<Operation *> ops = llvm::map_to_vector(
        block, [](Operation &op) { return &op; });
    for (Operation *op : ops) {
      if (auto wait = dyn_cast<WaitOp>(op)) {
        auto it = llvm::find_if(inFlight, [&](auto &entry) {
          return entry.first.getResult() == wait.getPending();
        });
        if (it != inFlight.end()) {
          bytes -= it->second;
          inFlight.erase(it);
        }
        continue;
      }
      auto start = dyn_cast<AllReduceStartOp>(op);
      if (!start)
        continue;
      int64_t size = byteSize(start.getType());
      while (!inFlight.empty() && bytes + size > maxBytesInFlight) {
        auto [oldest, oldestBytes] = inFlight.front();
        inFlight.pop_front();
        bytes -= oldestBytes;
        (*oldest->getUsers().begin())->moveBefore(start);
      }
      inFlight.emplace_back(start, size);
      bytes += size;
    }
  }

  //===--------------------------------------------------------------------===//
  // The model behind print-schedule
  //===--------------------------------------------------------------------===//

  /// The alpha-beta time of an all-reduce of `op`'s result (ring: each rank
  /// moves 2 (n - 1) / n of the bytes).
  double allReduceUs(Operation *op, SymbolTableCollection &symbolTable) {
    auto meshRef = op->getAttrOfType<FlatSymbolRefAttr>("mesh");
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
    MeshOp mesh = meshRef ? lookupMesh(op, meshRef, &symbolTable) : MeshOp();
    if (!mesh || !axes)
      return 0;
    ::shardx::MeshSpec spec = getMeshSpec(mesh);
    double latency = 0, bandwidth = 0;
    int64_t n = 1;
    for (int64_t axis : axes.asArrayRef()) {
      if (axis < 0 || axis >= static_cast<int64_t>(spec.shape.size()))
        return 0;
      ::shardx::AxisCost cost = spec.getCost(axis);
      latency = std::max(latency, cost.latencyUs);
      bandwidth = bandwidth == 0 ? cost.bandwidthGBps
                                 : std::min(bandwidth, cost.bandwidthGBps);
      n *= spec.shape[axis];
    }
    double bytes =
        ::shardx::lowerBoundBytes(::shardx::Step::Kind::AllReduce, n,
                                  byteSize(op->getResult(0).getType()));
    return latency + bytes / (bandwidth * 1e3);
  }

  /// The compute time of `op`: its loop iterations (structured ops) or its
  /// result elements (copies, inserts, extracts) at `computeRate`.
  double computeUs(Operation *op) {
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

  /// One rank's timeline of `fn`'s body: compute runs in program order; a
  /// collective (or a start) runs on one communication channel in the order
  /// issued, from when it is issued; a synchronous collective or a wait
  /// blocks compute until its collective ends.
  Timeline model(func::FuncOp fn, SymbolTableCollection &symbolTable) {
    Timeline t;
    if (fn.isExternal())
      return t;
    double now = 0, channelFree = 0;
    DenseMap<Value, double> endOf;
    for (Operation &op : fn.getFunctionBody().front()) {
      if (isa<AllReduceOp, AllReduceStartOp>(op)) {
        double us = allReduceUs(&op, symbolTable);
        double end = std::max(now, channelFree) + us;
        channelFree = end;
        t.communication += us;
        ++t.collectives;
        if (isa<AllReduceStartOp>(op)) {
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
      now += computeUs(&op);
    }
    return t;
  }

  void report(func::FuncOp fn, const Timeline &before,
              const Timeline &after) {
    InFlightDiagnostic diag = emitRemark(fn.getLoc());
    diag << "schedule of @" << fn.getName() << ": " << after.collectives
         << " all-reduces (" << after.asyncCollectives << " async), "
         << llvm::formatv("{0:F3}", after.communication)
         << " us communication; exposed "
         << llvm::formatv("{0:F3}", before.exposed) << " us before, "
         << llvm::formatv("{0:F3}", after.exposed) << " us after scheduling";
    if (fn.isExternal())
      return;
    for (auto op : fn.getFunctionBody().front().getOps<AllReduceStartOp>()) {
      diag << "\n  all_reduce_start of " << byteSize(op.getType())
           << " bytes";
      // A bucket's operand is its members inserted into a flat buffer.
      int64_t members = 0;
      Value v = op.getInput();
      while (auto insert = v.getDefiningOp<tensor::InsertSliceOp>()) {
        ++members;
        v = insert.getDest();
      }
      if (members > 1)
        diag << " (bucket of " << members << ")";
    }
  }
};

} // namespace
