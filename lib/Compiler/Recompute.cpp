//===- Recompute.cpp - Activation recomputation ---------------------------===//
//
// Part of ShardX.
//
// `shardx-recompute-activations`: forward values that the backward pass
// reads are computed again just before their first backward reader, so
// that the forward value dies after its last forward reader instead of
// living through the whole backward pass (activation checkpointing, as
// torch.utils.checkpoint and torchtitan's activation checkpointing do, but
// as a transformation of the traced step).
//
// The train-step phase of each op comes from its location: the importer
// writes `fused<"forward">[...]`, `fused<"backward">[...]` and
// `fused<"optimizer">[...]`. The pass runs on the local program on tensors
// after fusion (shardx-codegen-cpu/-cuda, before bufferization), so a
// recomputed op is one fused kernel, and no later CSE merges a copy with
// its original (the copies carry `shardx.recomputed`).
//
// Policies:
//   none       nothing changes;
//   selective  elementwise kernels (every loop parallel: activations,
//              masks, scalings, transposes, broadcasts) and reshapes are
//              recomputed; contraction and reduction results (matmuls,
//              softmax maxima and sums, norms' statistics) are kept, like
//              torchtitan's op-level selective checkpointing;
//   aggressive also contractions and reductions whose inputs the backward
//              pass keeps anyway (or recomputes cheaply from kept values):
//              the most recomputation that lengthens no value's life.
//              Each copied chain reads only values alive into the backward
//              pass without it, so no copy reaches back through another
//              contraction (latest contractions are chosen first).
//
// A copy reads the same values as its original and computes the same
// arithmetic in the same order, so the step's results are bit for bit the
// ones without recomputation. A forward op is copied only when every value
// it reads is kept alive until the backward pass anyway (a step input, a
// value the backward or optimizer reads, or another recomputed value), so
// recomputation never lengthens a value's life. Collectives (runtime calls)
// are never repeated.
//
// Under every policy, `none` included, the model's own activation
// checkpointing (torch.utils.checkpoint, non-reentrant) is honored: the
// importer maps the ops the checkpoint's backward recomputation traced onto
// the forward ops they repeat and marks those forward ops with the
// checkpoint's number (`fused<"shardx.checkpoint.K">` inside their forward
// location; python/shardx/importer/graph.py). Here, as eager PyTorch does,
// each marked value the backward pass reads is computed again before its
// first backward reader, from the checkpoint's inputs (values made outside
// checkpoint K, read as they are: they stay alive, as the checkpoint saves
// them) through copies of checkpoint K's ops. Ops a copy cannot repeat (a
// collective) keep their results alive instead. The copies run after the
// last CSE, so they are not merged back into the forward ops.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>

namespace mlir::shardx {
#define GEN_PASS_DEF_RECOMPUTEACTIVATIONSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using mlir::shardx::getTrainStepPhase;

namespace {

/// The attribute on every copy.
constexpr llvm::StringLiteral kRecomputed = "shardx.recomputed";

/// The number of the torch.utils.checkpoint call that recomputes `loc`'s op
/// (`fused<"shardx.checkpoint.K">` in it), or -1.
int64_t checkpointOf(Location loc) {
  int64_t number = -1;
  loc->walk([&](Location l) {
    auto fused = dyn_cast<FusedLoc>(l);
    auto tag = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                     : StringAttr();
    StringRef name = tag ? tag.getValue() : StringRef();
    if (!name.consume_front("shardx.checkpoint.") ||
        name.getAsInteger(10, number))
      return WalkResult::advance();
    return WalkResult::interrupt();
  });
  return number;
}

/// Whether `op` is cheap enough to compute twice under `selective`: a
/// linalg op whose loops are all parallel, a fill, a reshape or an empty
/// tensor.
bool isCheap(Operation *op) {
  if (isa<tensor::EmptyOp, tensor::ExpandShapeOp, tensor::CollapseShapeOp,
          linalg::FillOp>(op))
    return true;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && linalgOp.hasPureTensorSemantics() &&
         linalgOp.getNumLoops() == linalgOp.getNumParallelLoops();
}

/// Whether `op` may be computed twice at all: it has no side effects and
/// one region-free or linalg body, and it is not a call (collectives are
/// runtime calls and must run once).
bool isRepeatable(Operation *op) {
  if (isa<func::CallOp>(op) || op->hasTrait<OpTrait::IsTerminator>())
    return false;
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
    return linalgOp.hasPureTensorSemantics();
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         op->getNumResults() > 0;
}

class Recomputer {
public:
  Recomputer(func::FuncOp func, bool aggressive)
      : func(func), aggressive(aggressive) {}

  /// Copies the recomputable forward values before their first backward
  /// reader. Returns the number of ops copied.
  unsigned run();

private:
  bool isForward(Operation *op) {
    return op && op->getBlock() == &func.getBody().front() &&
           !op->hasAttr(kRecomputed) &&
           getTrainStepPhase(op->getLoc()) == "forward";
  }
  /// Whether `value` costs nothing to keep: a step input, a constant or an
  /// empty tensor (only the shape of an output; a copy gets its own buffer
  /// at bufferization).
  static bool isFree(Value value) {
    Operation *def = value.getDefiningOp();
    return !def || def->hasTrait<OpTrait::ConstantLike>() ||
           isa<tensor::EmptyOp>(def);
  }
  bool returned(Operation *op) {
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers())
        if (isa<func::ReturnOp>(user))
          return true;
    return false;
  }
  /// The cheap set: forward elementwise ops and reshapes whose inputs are
  /// free, kept (read late) or cheap themselves.
  bool cheapRecomputable(Operation *op);
  /// Pins the kept values a copy of expensive `op` reads, so that no
  /// expensive op that computes them is recomputed too.
  void pinLeaves(Operation *op);
  void chooseExpensive();
  Value copyOf(Value value, OpBuilder &builder);

  func::FuncOp func;
  bool aggressive;
  /// Values a backward or optimizer op, or the return, reads.
  llvm::DenseSet<Value> readLate;
  llvm::DenseMap<Operation *, bool> cheap;
  /// Contractions and reductions recomputed (`aggressive`).
  llvm::DenseSet<Operation *> expensive;
  /// Values that must stay kept: copies of expensive ops read them.
  llvm::DenseSet<Value> pinned;
  IRMapping copies;
  unsigned copied = 0;
};

bool Recomputer::cheapRecomputable(Operation *op) {
  auto it = cheap.find(op);
  if (it != cheap.end())
    return it->second;
  cheap[op] = false; // straight-line code has no cycles; this guards anyway
  bool ok = isForward(op) && isRepeatable(op) && isCheap(op) && !returned(op);
  for (Value operand : op->getOperands()) {
    if (!ok)
      break;
    if (isFree(operand))
      continue;
    Operation *def = operand.getDefiningOp();
    // A kept value, or a contraction `aggressive` recomputes from kept ones.
    if (readLate.contains(operand) || expensive.contains(def))
      continue;
    ok = def->getBlock() == op->getBlock() && cheapRecomputable(def);
  }
  cheap[op] = ok;
  return ok;
}

void Recomputer::pinLeaves(Operation *op) {
  for (Value operand : op->getOperands()) {
    Operation *def = operand.getDefiningOp();
    if (isFree(operand))
      continue;
    if (cheapRecomputable(def))
      pinLeaves(def);
    else
      pinned.insert(operand);
  }
}

/// `aggressive`: contractions and reductions whose inputs are kept anyway
/// (or cheap to recompute from kept values), latest first; a cheap value
/// the backward reads may then be recomputed through them. The kept values a chosen op's copy reads stay
/// kept (pinned), so a copied chain reaches back through at most one
/// expensive op: cheap copies, the expensive op, cheap copies of its
/// inputs, then values alive into the backward pass without it.
void Recomputer::chooseExpensive() {
  // Largest results first (the most memory a copy can free), later ops
  // first among equals.
  SmallVector<std::pair<int64_t, Operation *>> candidates;
  for (Operation &op : llvm::reverse(func.getBody().front())) {
    if (!isForward(&op) || !isRepeatable(&op) || isCheap(&op) || returned(&op))
      continue;
    int64_t bytes = 0;
    for (Value result : op.getResults())
      if (auto shaped = dyn_cast<ShapedType>(result.getType());
          shaped && shaped.hasStaticShape() &&
          shaped.getElementType().isIntOrFloat())
        bytes += shaped.getNumElements() *
                 ((shaped.getElementType().getIntOrFloatBitWidth() + 7) / 8);
    candidates.push_back({bytes, &op});
  }
  llvm::stable_sort(candidates, [](const auto &a, const auto &b) {
    return a.first > b.first;
  });
  for (auto [bytes, op] : candidates) {
    if (llvm::any_of(op->getResults(),
                     [&](Value r) { return pinned.contains(r); }))
      continue;
    bool ok = llvm::all_of(op->getOperands(), [&](Value operand) {
      if (isFree(operand) || cheapRecomputable(operand.getDefiningOp()))
        return true;
      Operation *def = operand.getDefiningOp();
      return readLate.contains(operand) && !expensive.contains(def);
    });
    if (!ok)
      continue;
    expensive.insert(op);
    pinLeaves(op);
  }
  // Cheap values that read a chosen op's result are recomputable now.
  cheap.clear();
}

Value Recomputer::copyOf(Value value, OpBuilder &builder) {
  if (Value done = copies.lookupOrNull(value))
    return done;
  Operation *def = value.getDefiningOp();
  if (!def || (!cheapRecomputable(def) && !expensive.contains(def)))
    return value;
  for (Value operand : def->getOperands())
    copies.map(operand, copyOf(operand, builder));
  Operation *copy = builder.clone(*def, copies);
  copy->setAttr(kRecomputed, builder.getUnitAttr());
  ++copied;
  return copies.lookup(value);
}

unsigned Recomputer::run() {
  if (!func.getBody().hasOneBlock())
    return 0; // the straight-line steps only
  Block &body = func.getBody().front();
  // The late readers: every op from the first backward one on that is not
  // itself forward (fused or merged ops may have lost their phase), and the
  // return.
  SmallVector<Operation *> backward;
  bool late = false;
  for (Operation &op : body) {
    StringRef phase = getTrainStepPhase(op.getLoc());
    late |= phase == "backward";
    if (!late || (phase == "forward" && !op.hasAttr(kRecomputed)))
      continue;
    backward.push_back(&op);
    for (Value operand : op.getOperands())
      readLate.insert(operand);
  }
  if (aggressive)
    chooseExpensive();
  for (Operation *op : backward) {
    OpBuilder builder(op);
    for (OpOperand &use : op->getOpOperands()) {
      Operation *def = use.get().getDefiningOp();
      if (isForward(def) &&
          (cheapRecomputable(def) || expensive.contains(def)))
        use.set(copyOf(use.get(), builder));
    }
  }
  return copied;
}

/// Maps `value`, when it is a fresh tensor a copy writes into (an empty
/// tensor, or a fill of one), to a new one at `builder`: one-shot
/// bufferization allocates a result where its empty tensor is, so a copy
/// writing into the forward op's would hold its buffer from the forward
/// pass on.
void copyFreshTensor(Value value, IRMapping &mapping, OpBuilder &builder) {
  Operation *def = value.getDefiningOp();
  if (!def || mapping.contains(value))
    return;
  if (auto fill = dyn_cast<linalg::FillOp>(def)) {
    Value out = fill.getOutputs()[0];
    if (!out.getDefiningOp<tensor::EmptyOp>())
      return;
    copyFreshTensor(out, mapping, builder);
  } else if (!isa<tensor::EmptyOp>(def)) {
    return;
  }
  builder.clone(*def, mapping);
}

/// torch.utils.checkpoint's recomputation (see the file comment): copies of
/// each checkpoint's marked forward ops before the first backward reader of
/// each marked value. Returns the number of ops copied.
unsigned recomputeCheckpoints(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return 0;
  Block &body = func.getBody().front();
  // The marked forward ops a copy can repeat, by checkpoint.
  DenseMap<Operation *, int64_t> checkpoint;
  for (Operation &op : body) {
    if (getTrainStepPhase(op.getLoc()) != "forward" || !isRepeatable(&op) ||
        llvm::any_of(op.getUsers(),
                     [](Operation *u) { return isa<func::ReturnOp>(u); }))
      continue;
    if (int64_t k = checkpointOf(op.getLoc()); k >= 0)
      checkpoint[&op] = k;
  }
  if (checkpoint.empty())
    return 0;
  // One mapping per checkpoint: a copy reads copies of its own
  // checkpoint's values and the originals of every other value.
  DenseMap<int64_t, IRMapping> copies;
  unsigned copied = 0;
  std::function<Value(Value, OpBuilder &)> copyOf = [&](Value value,
                                                        OpBuilder &builder) {
    Operation *def = value.getDefiningOp();
    auto it = def ? checkpoint.find(def) : checkpoint.end();
    if (it == checkpoint.end())
      return value;
    IRMapping &mapping = copies[it->second];
    if (Value done = mapping.lookupOrNull(value))
      return done;
    for (Value operand : def->getOperands()) {
      Operation *producer = operand.getDefiningOp();
      auto p = producer ? checkpoint.find(producer) : checkpoint.end();
      if (p != checkpoint.end() && p->second == it->second)
        copyOf(operand, builder);
      else
        copyFreshTensor(operand, mapping, builder);
    }
    Operation *copy = builder.clone(*def, mapping);
    copy->setAttr(kRecomputed, builder.getUnitAttr());
    ++copied;
    return mapping.lookup(value);
  };
  // The late readers: every op from the first backward one on that is not
  // itself forward.
  bool late = false;
  for (Operation &op : llvm::make_early_inc_range(body)) {
    StringRef phase = getTrainStepPhase(op.getLoc());
    late |= phase == "backward";
    if (!late || phase == "forward" || op.hasAttr(kRecomputed))
      continue;
    OpBuilder builder(&op);
    for (OpOperand &use : op.getOpOperands())
      if (Operation *def = use.get().getDefiningOp();
          def && checkpoint.count(def))
        use.set(copyOf(use.get(), builder));
  }
  return copied;
}

struct RecomputeActivationsPass
    : mlir::shardx::impl::RecomputeActivationsPassBase<
          RecomputeActivationsPass> {
  using RecomputeActivationsPassBase::RecomputeActivationsPassBase;

  void runOnOperation() override {
    if (policy != "none" && policy != "selective" && policy != "aggressive") {
      getOperation().emitError("shardx-recompute-activations: unknown policy '")
          << policy << "' (none, selective or aggressive)";
      return signalPassFailure();
    }
    getOperation().walk([&](func::FuncOp func) {
      if (unsigned copied = recomputeCheckpoints(func))
        mlir::emitRemark(func.getLoc())
            << "recomputes " << copied
            << " forward ops of torch.utils.checkpoint regions before their "
               "backward readers";
    });
    if (policy == "none")
      return;
    getOperation().walk([&](func::FuncOp func) {
      if (unsigned copied = Recomputer(func, policy == "aggressive").run())
        mlir::emitRemark(func.getLoc()) << "recomputes " << copied
                          << " forward ops before their backward readers ("
                          << policy << ")";
    });
  }
};

} // namespace
