//===- Recompute.cpp - Forward values computed again ----------------------===//
//
// Part of ShardX.
//
// The selective and aggressive recomputation (shardx/Analysis/Recompute.h):
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
// The train-step phase of each op comes from its location (the importer's
// `fused<"forward">[...]`, `fused<"backward">[...]`).
//
//===----------------------------------------------------------------------===//

#include "shardx/Analysis/Recompute.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

constexpr llvm::StringLiteral kRecomputed = kRecomputedAttrName;
using ValueKey = RecomputeKey;

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

/// The loop iterations of a linalg op (its static loop ranges' product; a
/// dynamic range counts as 1), 0 for any other op.
int64_t iterations(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp)
    return 0;
  int64_t n = 1;
  for (int64_t range : linalgOp.getStaticLoopRanges())
    n *= ShapedType::isDynamic(range) ? 1 : range;
  return n;
}

class Recomputer {
public:
  /// With `only`, run() replaces only the backward reads of those values
  /// (candidates of the same function, or of a clone of it).
  Recomputer(func::FuncOp func, bool aggressive,
             const std::set<ValueKey> *only = nullptr)
      : func(func), aggressive(aggressive), only(only) {}

  /// Copies the recomputable forward values before their first backward
  /// reader.
  RecomputeResult run();

  /// The forward values run() would compute again, in program order, with
  /// their bytes and the loop iterations of the chain that recomputes each.
  SmallVector<RecomputeCandidate> candidates();

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
  /// Finds the late readers and chooses what to recompute; false when the
  /// function has no backward phase.
  bool analyze();
  bool recomputable(Operation *def) {
    return isForward(def) &&
           (cheapRecomputable(def) || expensive.contains(def));
  }
  ValueKey keyOf(Value value);
  /// The loop iterations of the ops copyOf(value) copies.
  int64_t chainCost(Value value, llvm::DenseSet<Operation *> &seen);

  func::FuncOp func;
  bool aggressive;
  const std::set<ValueKey> *only;
  SmallVector<Operation *> backward;
  llvm::DenseMap<Operation *, unsigned> position;
  /// Values a backward or optimizer op, or the return, reads.
  llvm::DenseSet<Value> readLate;
  llvm::DenseMap<Operation *, bool> cheap;
  /// Contractions and reductions recomputed (`aggressive`).
  llvm::DenseSet<Operation *> expensive;
  /// Values that must stay kept: copies of expensive ops read them.
  llvm::DenseSet<Value> pinned;
  IRMapping copies;
  RecomputeResult done;
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
/// the backward reads may then be recomputed through them. The kept values a
/// chosen op's copy reads stay kept (pinned), so a copied chain reaches back
/// through at most one expensive op: cheap copies, the expensive op, cheap
/// copies of its inputs, then values alive into the backward pass without it.
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
  ++done.copied;
  done.iterations += iterations(copy);
  return copies.lookup(value);
}

bool Recomputer::analyze() {
  if (!func.getBody().hasOneBlock())
    return false; // the straight-line steps only
  Block &body = func.getBody().front();
  // The late readers: every op from the first backward one on that is not
  // itself forward (fused or merged ops may have lost their phase), and the
  // return.
  bool late = false;
  unsigned index = 0;
  for (Operation &op : body) {
    position[&op] = index++;
    StringRef phase = getTrainStepPhase(op.getLoc());
    late |= phase == "backward";
    if (!late || (phase == "forward" && !op.hasAttr(kRecomputed)))
      continue;
    backward.push_back(&op);
    for (Value operand : op.getOperands())
      readLate.insert(operand);
  }
  if (backward.empty())
    return false;
  if (aggressive)
    chooseExpensive();
  return true;
}

ValueKey Recomputer::keyOf(Value value) {
  return {position.lookup(value.getDefiningOp()),
          cast<OpResult>(value).getResultNumber()};
}

RecomputeResult Recomputer::run() {
  if (!analyze())
    return {};
  for (Operation *op : backward) {
    OpBuilder builder(op);
    for (OpOperand &use : op->getOpOperands()) {
      Operation *def = use.get().getDefiningOp();
      if (recomputable(def) && (!only || only->count(keyOf(use.get()))))
        use.set(copyOf(use.get(), builder));
    }
  }
  return done;
}

int64_t Recomputer::chainCost(Value value, llvm::DenseSet<Operation *> &seen) {
  Operation *def = value.getDefiningOp();
  if (!def || !recomputable(def) || !seen.insert(def).second)
    return 0;
  int64_t cost = iterations(def);
  for (Value operand : def->getOperands())
    cost += chainCost(operand, seen);
  return cost;
}

SmallVector<RecomputeCandidate> Recomputer::candidates() {
  SmallVector<RecomputeCandidate> result;
  if (!analyze())
    return result;
  std::set<ValueKey> found;
  for (Operation *op : backward)
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!recomputable(def) || !found.insert(keyOf(operand)).second)
        continue;
      RecomputeCandidate c;
      c.key = keyOf(operand);
      if (auto shaped = dyn_cast<ShapedType>(operand.getType());
          shaped && shaped.hasStaticShape() &&
          shaped.getElementType().isIntOrFloat())
        c.bytes = shaped.getNumElements() *
                  ((shaped.getElementType().getIntOrFloatBitWidth() + 7) / 8);
      llvm::DenseSet<Operation *> seen;
      c.cost = chainCost(operand, seen);
      result.push_back(c);
    }
  llvm::sort(result, [](const RecomputeCandidate &a,
                        const RecomputeCandidate &b) { return a.key < b.key; });
  return result;
}

} // namespace

bool mlir::shardx::isRepeatable(Operation *op) {
  if (isa<func::CallOp>(op) || op->hasTrait<OpTrait::IsTerminator>())
    return false;
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
    return linalgOp.hasPureTensorSemantics();
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         op->getNumResults() > 0;
}

RecomputeResult
mlir::shardx::recomputeActivations(func::FuncOp func, bool aggressive,
                                   const std::set<RecomputeKey> *only) {
  return Recomputer(func, aggressive, only).run();
}

SmallVector<RecomputeCandidate>
mlir::shardx::recomputeCandidates(func::FuncOp func) {
  return Recomputer(func, /*aggressive=*/true).candidates();
}

/// The most bytes of activation (forward-phase) buffers alive at once in
/// `profile`, and the number of ops where that many are alive.
std::pair<int64_t, int64_t>
mlir::shardx::activationPeak(const MemoryProfile &profile) {
  std::vector<int64_t> delta(profile.ops.size() + 1, 0);
  for (const MemoryBuffer &b : profile.buffers) {
    if (b.argument || b.role != MemoryRole::Activation || b.first < 0 ||
        b.first >= (int64_t)delta.size())
      continue;
    delta[b.first] += b.bytes;
    delta[std::min<int64_t>(b.last + 1, delta.size() - 1)] -= b.bytes;
  }
  int64_t alive = 0, peak = 0, at = 0;
  for (size_t i = 0; i + 1 < delta.size(); ++i) {
    alive += delta[i];
    if (alive > peak)
      peak = alive, at = 0;
    if (alive == peak)
      ++at;
  }
  return {peak, at};
}
