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
//   budget     a greedy choice of aggressive's candidates that brings the
//              function's modeled activation peak to at most `budget`
//              bytes per rank (below);
//   plan       each function's `shardx.recompute` (selective or
//              aggressive, shardx-auto-shard's choice to fit its memory
//              budget), nothing without one.
// Selective and aggressive are shardx/Analysis/Recompute.h's
// recomputeActivations, which shardx-auto-shard prices plans with.
//
// `budget` (torchtitan's memory-budget checkpointing, with the budget in
// bytes): a candidate is a forward value the backward pass reads that
// `aggressive` would compute again, with the chain of copies that computes
// it. It saves the value's bytes and costs its chain's loop iterations (the
// unit the propagation cost model prices compute in; a reshape or an empty
// tensor costs nothing). Greedy: candidates in decreasing bytes per
// iteration, each applied to a scratch copy of the module with those
// already chosen, bufferized as the target does up to the freeing of
// buffers, with its contractions (buildRecomputeBudgetModelPipeline and
// the pass's `contractions` option), and the memory model
// (shardx/Analysis/MemoryModel.h) run on it again; a candidate is kept
// when it lowers the modeled activation peak (the most bytes of
// forward-phase buffers alive at once), or keeps it and lowers the number
// of ops at that peak; the search stops once the peak fits. Then each
// chosen candidate, latest first, is dropped again when the peak fits
// without it. When nothing fits, the set with the lower peak of the greedy
// one and all of aggressive's is applied, with a warning that says the
// peak reached (the program is still correct).
//
//===----------------------------------------------------------------------===//

#include "shardx/Analysis/Recompute.h"
#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <functional>
#include <set>

namespace mlir::shardx {
#define GEN_PASS_DEF_RECOMPUTEACTIVATIONSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using mlir::shardx::activationPeak;
using mlir::shardx::computeMemoryProfile;
using mlir::shardx::getTrainStepPhase;
using mlir::shardx::isRepeatable;
using mlir::shardx::MemoryBuffer;
using mlir::shardx::MemoryProfile;
using mlir::shardx::MemoryRole;
using mlir::shardx::recomputeActivations;
using mlir::shardx::RecomputeCandidate;
using mlir::shardx::recomputeCandidates;

namespace {

/// The attribute on every copy.
constexpr llvm::StringLiteral kRecomputed = mlir::shardx::kRecomputedAttrName;
using ValueKey = mlir::shardx::RecomputeKey;

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

/// The `budget` policy on one function (see the file comment).
class BudgetSearch {
public:
  BudgetSearch(func::FuncOp func, int64_t budget, StringRef contractions)
      : func(func), budget(budget), contractions(contractions) {}
  LogicalResult run();

private:
  struct Outcome {
    int64_t peak = 0;
    int64_t atPeak = 0;
    unsigned copied = 0;
  };
  /// The function's modeled activation peak with `chosen` (or all
  /// candidates) recomputed, on a bufferized scratch copy of the module.
  FailureOr<Outcome> evaluate(const std::set<ValueKey> &chosen,
                              bool all = false);

  func::FuncOp func;
  int64_t budget;
  /// The target's contractions after bufferization (blas, cublas, loops).
  StringRef contractions;
  unsigned evaluations = 0;
};

FailureOr<BudgetSearch::Outcome>
BudgetSearch::evaluate(const std::set<ValueKey> &chosen, bool all) {
  ++evaluations;
  // A detached copy of the module, bufferized by a pass manager of its own
  // (one-shot bufferization of function boundaries does not run on a
  // module nested in another).
  OwningOpRef<ModuleOp> scratch(
      cast<ModuleOp>(func->getParentOfType<ModuleOp>()->clone()));
  auto copy = scratch->lookupSymbol<func::FuncOp>(func.getSymName());
  Outcome outcome;
  outcome.copied =
      recomputeActivations(copy, /*aggressive=*/true, all ? nullptr : &chosen)
          .copied;
  PassManager pm(func.getContext());
  mlir::shardx::buildRecomputeBudgetModelPipeline(pm, contractions);
  if (failed(pm.run(*scratch)))
    return failure();
  copy = scratch->lookupSymbol<func::FuncOp>(func.getSymName());
  std::tie(outcome.peak, outcome.atPeak) =
      activationPeak(computeMemoryProfile(copy));
  return outcome;
}

LogicalResult BudgetSearch::run() {
  SmallVector<RecomputeCandidate> candidates = recomputeCandidates(func);
  if (candidates.empty())
    return success();
  std::set<ValueKey> chosen;
  FailureOr<Outcome> none = evaluate(chosen);
  if (failed(none))
    return failure();
  Outcome best = *none;
  auto fits = [&](const Outcome &o) { return o.peak <= budget; };
  // The most bytes saved per iteration recomputed first (an iteration more
  // so that free chains rank by their bytes); program order among equals.
  llvm::stable_sort(candidates, [](const auto &a, const auto &b) {
    return (double)a.bytes / (a.cost + 1) > (double)b.bytes / (b.cost + 1);
  });
  SmallVector<ValueKey> order;
  for (const auto &c : candidates) {
    if (fits(best))
      break;
    chosen.insert(c.key);
    FailureOr<Outcome> with = evaluate(chosen);
    if (failed(with))
      return failure();
    if (with->peak < best.peak ||
        (with->peak == best.peak && with->atPeak < best.atPeak)) {
      best = *with;
      order.push_back(c.key);
    } else {
      chosen.erase(c.key);
    }
  }
  // Drop what the peak does not need (latest choice first).
  for (ValueKey key : llvm::reverse(order)) {
    chosen.erase(key);
    FailureOr<Outcome> without = evaluate(chosen);
    if (failed(without))
      return failure();
    if (fits(best) ? fits(*without) : without->peak <= best.peak)
      best = *without;
    else
      chosen.insert(key);
  }
  bool all = false;
  if (!fits(best)) {
    FailureOr<Outcome> everything = evaluate(chosen, /*all=*/true);
    if (failed(everything))
      return failure();
    if (everything->peak < best.peak) {
      best = *everything;
      all = true;
    }
  }
  unsigned copied = 0;
  if (all || !chosen.empty())
    copied =
        recomputeActivations(func, /*aggressive=*/true, all ? nullptr : &chosen)
            .copied;
  std::string summary = llvm::formatv(
      "modeled activation peak {0} -> {1} bytes per rank, budget {2}; {3} of "
      "{4} candidate values recomputed ({5} evaluations of the memory model)",
      none->peak, best.peak, budget, all ? candidates.size() : chosen.size(),
      candidates.size(), evaluations);
  if (!fits(best)) {
    mlir::emitWarning(func.getLoc())
        << "recompute budget not met: " << summary << "; recomputes " << copied
        << " forward ops";
    return success();
  }
  mlir::emitRemark(func.getLoc())
      << "recomputes " << copied
      << " forward ops before their backward readers (budget): " << summary;
  return success();
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

  void getDependentDialects(DialectRegistry &registry) const override {
    RecomputeActivationsPassBase::getDependentDialects(registry);
    // What the budget policy's memory model bufferizes with.
    OpPassManager pm("builtin.module");
    mlir::shardx::buildRecomputeBudgetModelPipeline(pm, contractions);
    pm.getDependentDialects(registry);
  }

  void runOnOperation() override {
    if (policy != "none" && policy != "selective" && policy != "aggressive" &&
        policy != "budget" && policy != "plan") {
      getOperation().emitError("shardx-recompute-activations: unknown policy '")
          << policy << "' (none, selective, aggressive, budget or plan)";
      return signalPassFailure();
    }
    if (contractions != "blas" && contractions != "cublas" &&
        contractions != "loops") {
      getOperation().emitError(
          "shardx-recompute-activations: unknown contractions '")
          << contractions << "' (blas, cublas or loops)";
      return signalPassFailure();
    }
    if ((policy == "budget") != (budget >= 0)) {
      getOperation().emitError("shardx-recompute-activations: ")
          << (policy == "budget"
                  ? "policy 'budget' needs a budget (bytes per rank, >= 0)"
                  : "a budget is for policy 'budget' only");
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
    if (policy == "budget") {
      SmallVector<func::FuncOp> funcs(getOperation().getOps<func::FuncOp>());
      for (func::FuncOp func : funcs)
        if (failed(BudgetSearch(func, budget, contractions).run())) {
          func.emitError("shardx-recompute-activations: the memory model's "
                         "bufferization failed");
          return signalPassFailure();
        }
      return;
    }
    // `plan`: each function's own policy, shardx-auto-shard's choice.
    WalkResult walked = getOperation().walk([&](func::FuncOp func) {
      StringRef own = policy;
      if (policy == "plan") {
        Attribute attr = func->getAttr(mlir::shardx::kRecomputePolicyAttrName);
        if (!attr)
          return WalkResult::advance();
        auto name = dyn_cast<StringAttr>(attr);
        if (!name ||
            (name.getValue() != "selective" &&
             name.getValue() != "aggressive" && name.getValue() != "none")) {
          func.emitError("shardx-recompute-activations: ")
              << mlir::shardx::kRecomputePolicyAttrName << " is " << attr
              << ", not \"none\", \"selective\" or \"aggressive\"";
          return WalkResult::interrupt();
        }
        own = name.getValue();
        if (own == "none")
          return WalkResult::advance();
      }
      if (unsigned copied =
              recomputeActivations(func, own == "aggressive").copied)
        mlir::emitRemark(func.getLoc())
            << "recomputes " << copied
            << " forward ops before their backward readers (" << own
            << (policy == "plan" ? ", the plan's" : "") << ")";
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return signalPassFailure();
  }
};

} // namespace
