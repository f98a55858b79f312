//===- AutoShard.cpp - Layouts of a train step under a memory budget ------===//
//
// Part of ShardX.
//
// shardx-auto-shard (Passes.td, docs/Memory.md "Automatic sharding under a
// budget"). The decision space: one layout per parameter group (a
// parameter argument, the optimizer state arguments of its type, its updated
// copies among the results) and one for the inputs' batch dim. The rest is
// propagated by the greedy search (PropagationSearch.h), which also prices a
// plan: its reshards plus its local compute, the modeled step time
// (PropagationSearch::stepTime). Groups of repeated layers (or repeated
// projections within one) that are the same ops take one layout together
// (tieLayers), so the decisions do not grow with the depth. Memory is the tensor-level memory model (MemoryModel.h) of the
// plan partitioned to the local program.
//
// Pricing every plan is too slow, so the pass builds a surrogate per input
// layout d: the step time and peak of the plan where every group is
// replicated (the base), each group's change of both when it alone takes a
// layout (unary terms), and the change of the time when two groups used
// close together take layouts together (pair terms, `pair-window`). The
// solver minimizes the surrogate time subject to the surrogate peak <= the
// budget: a Lagrangian relaxation (time + lambda * bytes, minimized by
// coordinate descent, lambda by bisection) followed by a local search over
// feasible plans. The chosen plan is then priced for real; when its real
// peak exceeds the budget the surrogate budget is lowered by the excess and
// the solve repeated. A real peak is the one of the program shardx-run and
// shardx-compile run: the plan through the whole shardx-spmd pipeline,
// collectives scheduled. Only public functions are decided, each on a copy
// of the module with its calls inlined (as shardx-spmd does first). `auto-json` writes the surrogate, so that a test can
// solve it exactly (an ILP) and compare.
//
//===----------------------------------------------------------------------===//

#include "AutoShardSpace.h"
#include "LayoutUtils.h"
#include "PropagationSearch.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace mlir::shardx {
#define GEN_PASS_DEF_AUTOSHARDPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

/// Arguments that take one layout together, and the results tied to them.
struct Group {
  std::string name;
  SmallVector<unsigned> args, results;
  std::vector<Choice> choices; // choices[0] is replicated
  int64_t firstUse = 0;
  bool isData = false;
  /// The repeated layers whose parameters at this position take this
  /// group's layout together (tieLayers); `args` holds every layer's, the
  /// first layer's `argsPerLayer` first.
  unsigned layers = 1;
  unsigned argsPerLayer = 0;
};

/// One public function's auto-sharding.
class AutoSharder {
public:
  AutoSharder(ModuleOp module, func::FuncOp target, MeshOp mesh,
              CostModel &costs, int64_t budget, unsigned window,
              unsigned refineSweeps)
      : module(module), target(target), mesh(mesh), costs(costs),
        budget(budget), window(window), refineSweeps(refineSweeps),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        meshShape(mesh.getShape()) {}

  LogicalResult run(StringRef jsonPath);

private:
  /// The copy of the module the plans are priced on, calls inlined; `fn`
  /// is `target` in it.
  LogicalResult prepare();
  LogicalResult findGroups();
  /// Ties the groups of repeated layers: where the groups (in argument
  /// order) repeat with a period of P groups, each of the same type, first
  /// used by the same op, P first uses apart by the same distance D, and
  /// the ops over the run repeat every D, the groups at the same position
  /// of each repeat become one (identical layers take identical layouts).
  void tieLayers(ArrayRef<llvm::hash_code> opNames,
                 ArrayRef<llvm::hash_code> firstUser);
  /// The plan's remark at `target`.
  void remark(ArrayRef<unsigned> pick, Priced real, double seconds);
  /// Writes the plan `pick` (a choice per group) on `f`'s arguments and
  /// tied results.
  void apply(func::FuncOp f, ArrayRef<unsigned> pick);
  /// The modeled step time of `f` as its layouts stand (the greedy
  /// search's reshards plus local compute); `state` receives the layouts.
  FailureOr<double> price(func::FuncOp f, RuleCache &rules,
                          ShardingState &state);
  /// Time only, on the function itself.
  double priceTime(ArrayRef<unsigned> pick);
  /// Time (on the function), and the peak of a copy through shardx-spmd.
  Priced priceFull(ArrayRef<unsigned> pick);
  Priced priceFullUncached(ArrayRef<unsigned> pick);
  /// Whether `a` is a better plan than `b`: fits where `b` does not, is
  /// faster where both fit, holds fewer bytes where neither does.
  bool better(Priced a, Priced b) const {
    bool fa = fits(a), fb = fits(b);
    if (fa != fb)
      return fa;
    return fa ? a.time < b.time : a.peak < b.peak;
  }
  bool fits(Priced p) const {
    return std::isfinite(p.time) && (budget <= 0 || p.peak <= budget);
  }
  Surrogate buildSurrogate(std::vector<unsigned> base);
  /// A surrogate of no plan (its base and every term infinite).
  Surrogate leftOut(std::vector<unsigned> base) const {
    Surrogate s;
    s.center = std::move(base);
    s.baseTime = kInf;
    for (const Group &g : groups) {
      s.time.emplace_back(g.choices.size(), kInf);
      s.bytes.emplace_back(g.choices.size(), 0);
    }
    s.pairsOf.resize(groups.size());
    return s;
  }
  void writeJson(StringRef path, const std::optional<Picks> &pick,
                 double limit, Priced real, double solveSeconds);

  ModuleOp module;
  func::FuncOp target;
  OwningOpRef<ModuleOp> prepared;
  func::FuncOp fn;
  MeshOp mesh;
  CostModel &costs;
  int64_t budget;
  unsigned window;
  unsigned refineSweeps;
  FlatSymbolRefAttr meshRef;
  ArrayRef<int64_t> meshShape;
  llvm::StringSet<> warned;
  RuleCache rules;
  std::vector<Group> groups; // the data group (if any) last
  int dataGroup = -1;
  /// Arguments and results whose layouts the user gave (kept).
  SmallVector<bool> pinnedArg, pinnedResult;
  std::vector<Surrogate> surrogates; // per data choice
  int64_t priced = 0, pricedFull = 0;
  /// Where the solve's time goes: the greedy search's pricing, and the
  /// shardx-spmd runs for the peaks (the JSON's).
  double searchSeconds = 0, pipelineSeconds = 0;
  PricedPlans pool;
  /// Why the first plan that could not be priced failed.
  std::string firstFailure;
  /// The surrogate solve the plan came from, for the JSON: its plan and
  /// the limit it was solved under.
  std::optional<Picks> solverPick;
  double solverLimit = kInf;
};

LogicalResult AutoSharder::prepare() {
  if (!target.getBody().hasOneBlock())
    return target.emitError(
        "functions with more than one block are not supported");
  prepared = module.clone();
  PassManager pm(module.getContext());
  pm.enableVerifier(false);
  pm.addPass(createInlineCallsPass());
  if (failed(pm.run(*prepared)))
    return target.emitError("shardx-auto-shard: cannot inline the calls of @")
           << target.getSymName();
  fn = prepared->lookupSymbol<func::FuncOp>(target.getSymName());
  WalkResult call = fn.walk([&](CallOpInterface op) {
    if (auto callee = dyn_cast<SymbolRefAttr>(op.getCallableForCallee()))
      target.emitError("shardx-auto-shard cannot price a call to ")
          << callee << ", which shardx-inline-calls does not inline";
    else
      target.emitError("shardx-auto-shard cannot price an indirect call");
    return WalkResult::interrupt();
  });
  return failure(call.wasInterrupted());
}

LogicalResult AutoSharder::findGroups() {
  unsigned numArgs = fn.getNumArguments();
  pinnedArg.assign(numArgs, false);
  pinnedResult.assign(fn.getNumResults(), false);
  for (unsigned i = 0; i < numArgs; ++i)
    pinnedArg[i] = bool(fn.getArgAttr(i, ShardXDialect::getLayoutAttrName()));
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
    pinnedResult[i] =
        bool(fn.getResultAttr(i, ShardXDialect::getLayoutAttrName()));
  // Roles as the memory model tells them: parameters before the first
  // optimizer state, inputs after the last.
  int firstState = -1, lastState = -1;
  for (unsigned i = 0; i < numArgs; ++i)
    if (fn.getArgAttr(i, "torch.state")) {
      if (firstState < 0)
        firstState = i;
      lastState = i;
    }
  unsigned numParams = firstState < 0 ? numArgs : firstState;
  unsigned firstInput = firstState < 0 ? numArgs : lastState + 1;
  // A train step returns (loss, parameters, state): result k + 1 is the
  // update of argument k.
  bool tied = firstState >= 0 && fn.getNumResults() == firstInput + 1;
  for (unsigned k = 0; tied && k < firstInput; ++k)
    tied = fn.getResultTypes()[k + 1] == fn.getArgumentTypes()[k];

  DenseMap<Value, int64_t> firstUse;
  int64_t pos = 0;
  for (Operation &op : fn.getBody().front()) {
    for (Value v : op.getOperands())
      firstUse.try_emplace(v, pos);
    ++pos;
  }
  auto argType = [&](unsigned i) {
    return dyn_cast<RankedTensorType>(fn.getArgument(i).getType());
  };
  SmallVector<bool> grouped(numArgs, false);
  for (unsigned p = 0; p < numParams; ++p) {
    RankedTensorType type = argType(p);
    if (!type || pinnedArg[p])
      continue;
    Group g;
    g.name = "%arg" + std::to_string(p);
    g.args.push_back(p);
    // Its optimizer state: the state arguments at its position in each
    // block of `numParams` states, when of its type.
    for (unsigned s = numParams; s < firstInput; s += numParams)
      if (s + p < firstInput && argType(s + p) == type && !pinnedArg[s + p])
        g.args.push_back(s + p);
    for (unsigned a : g.args) {
      grouped[a] = true;
      if (tied && !pinnedResult[a + 1])
        g.results.push_back(a + 1);
    }
    g.choices = layoutChoices(type, meshShape, /*batchOnly=*/false);
    g.firstUse = firstUse.lookup(fn.getArgument(p));
    g.argsPerLayer = g.args.size();
    if (g.choices.size() > 1)
      groups.push_back(std::move(g));
  }
  // What makes two ops the same in two layers: their names, result types
  // and the names of the ops in their bodies (a ReLU and a subtraction are
  // both linalg.generic).
  SmallVector<llvm::hash_code> opNames, firstUser;
  for (Operation &op : fn.getBody().front()) {
    llvm::hash_code key =
        llvm::hash_combine(op.getName().getAsOpaquePointer(),
                           llvm::hash_combine_range(op.getResultTypes().begin(),
                                                    op.getResultTypes().end()));
    op.walk([&](Operation *inner) {
      if (inner != &op)
        key = llvm::hash_combine(key, inner->getName().getAsOpaquePointer());
    });
    opNames.push_back(key);
  }
  for (const Group &g : groups)
    firstUser.push_back(opNames[g.firstUse]);
  tieLayers(opNames, firstUser);
  llvm::stable_sort(groups, [](const Group &a, const Group &b) {
    return a.firstUse < b.firstUse;
  });
  // The inputs: one layout of their batch dim (dim 0), unless the user
  // gave any of them one.
  Group data;
  data.name = "inputs";
  data.isData = true;
  bool dataPinned = false;
  for (unsigned i = firstInput; i < numArgs; ++i) {
    RankedTensorType type = argType(i);
    if (!type || type.getRank() == 0)
      continue;
    dataPinned |= pinnedArg[i];
    data.args.push_back(i);
  }
  if (!data.args.empty() && !dataPinned) {
    data.choices = layoutChoices(argType(data.args.front()), meshShape,
                                 /*batchOnly=*/true);
    // Every input must divide as the first does.
    llvm::erase_if(data.choices, [&](const Choice &c) {
      return llvm::any_of(data.args, [&](unsigned i) {
        RankedTensorType t = argType(i);
        int64_t split = 1;
        for (auto [a, p] : llvm::enumerate(c.placements))
          if (p.isShard())
            split *= meshShape[a];
        return t.isDynamicDim(0) || t.getDimSize(0) % split != 0;
      });
    });
    if (data.choices.size() > 1) {
      dataGroup = groups.size();
      groups.push_back(std::move(data));
    }
  }
  return success();
}

void AutoSharder::tieLayers(ArrayRef<llvm::hash_code> opNames,
                            ArrayRef<llvm::hash_code> firstUser) {
  size_t n = groups.size();
  auto same = [&](size_t a, size_t b) {
    const Group &x = groups[a], &y = groups[b];
    return fn.getArgument(x.args.front()).getType() ==
               fn.getArgument(y.args.front()).getType() &&
           x.args.size() == y.args.size() &&
           x.results.size() == y.results.size() &&
           x.choices.size() == y.choices.size() &&
           firstUser[a] == firstUser[b];
  };
  // Candidate runs (start, period, repeats), the most groups covered first.
  struct Run {
    size_t start, period, repeats;
    int64_t distance;
  };
  SmallVector<Run> runs;
  for (size_t period = 1; 2 * period <= n; ++period)
    for (size_t i = 0; i + period < n;) {
      int64_t distance = groups[i + period].firstUse - groups[i].firstUse;
      if (!same(i, i + period) || distance <= 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j + period < n && same(j, j + period) &&
             groups[j + period].firstUse - groups[j].firstUse == distance)
        ++j;
      size_t repeats = (j - i + period) / period;
      if (repeats >= 2)
        runs.push_back({i, period, repeats, distance});
      i = j + 1;
    }
  llvm::stable_sort(runs, [](const Run &a, const Run &b) {
    return a.period * a.repeats > b.period * b.repeats;
  });
  for (const Run &run : llvm::ArrayRef(runs).take_front(16)) {
    // The ops from the first repeat's first use to the last repeat's last
    // one repeat every `distance` ops (what lies between the repeats, a
    // layer's ops before its first parameter, is compared with the
    // repeat before; what follows the last, the loss, is not).
    size_t from = groups[run.start].firstUse;
    size_t to =
        groups[run.start + run.period * run.repeats - 1].firstUse + 1 -
        run.distance;
    if (to + run.distance > opNames.size())
      continue;
    bool periodic = true;
    for (size_t k = from; k < to && periodic; ++k)
      periodic = opNames[k] == opNames[k + run.distance];
    // Two repeats: nothing above compares what follows a repeat's last
    // parameter. Two same-width Linears of one MLP would pass (their
    // layouts must be free to differ: Megatron splits one by columns, the
    // other by rows), so the ops after the first repeat's last parameter,
    // up to the second repeat, must also follow the second one (a stack of
    // layers ends with one more norm, as GPT's and Llama's do).
    for (size_t k = to; run.repeats == 2 && k < from + run.distance && periodic;
         ++k)
      periodic = k + run.distance < opNames.size() &&
                 opNames[k] == opNames[k + run.distance];
    if (!periodic)
      continue;
    std::vector<Group> tied;
    for (size_t g = 0; g < n; ++g) {
      if (g < run.start || g >= run.start + run.period * run.repeats) {
        tied.push_back(std::move(groups[g]));
        continue;
      }
      if (g >= run.start + run.period)
        continue;
      Group merged = std::move(groups[g]);
      for (size_t r = 1; r < run.repeats; ++r) {
        Group &other = groups[g + r * run.period];
        merged.args.append(other.args.begin(), other.args.end());
        merged.results.append(other.results.begin(), other.results.end());
      }
      merged.layers = run.repeats;
      tied.push_back(std::move(merged));
    }
    groups = std::move(tied);
    return;
  }
}

void AutoSharder::apply(func::FuncOp f, ArrayRef<unsigned> pick) {
  StringRef name = ShardXDialect::getLayoutAttrName();
  LayoutAttr replicated =
      LayoutAttr::get(meshRef, Layout(static_cast<int64_t>(meshShape.size())));
  // Arguments without a layout of the user's or the plan's: replicated
  // (the calling convention is explicit, as shardx-propagate makes it).
  for (unsigned i = 0, e = f.getNumArguments(); i < e; ++i)
    if (!pinnedArg[i] && isa<RankedTensorType>(f.getArgument(i).getType()))
      f.setArgAttr(i, name, replicated);
  for (auto [g, group] : llvm::enumerate(groups)) {
    const Choice &c = group.choices[pick[g]];
    for (unsigned a : group.args) {
      auto type = cast<RankedTensorType>(f.getArgument(a).getType());
      Layout layout = c.layout;
      // A rank-0 member (none today) or a layout the member cannot take
      // stays replicated.
      if (type.getRank() == 0)
        continue;
      f.setArgAttr(a, name, LayoutAttr::get(meshRef, layout));
    }
    for (unsigned r : group.results)
      f.setResultAttr(r, name, LayoutAttr::get(meshRef, c.layout));
  }
}

FailureOr<double> AutoSharder::price(func::FuncOp f, RuleCache &ruleCache,
                                     ShardingState &state) {
  PropagationOptions options;
  options.stepTime = true;
  std::unique_ptr<PropagationSearch> search =
      createGreedySearch(mesh, costs, ruleCache, options, warned);
  if (failed(search->run(f, state)))
    return failure();
  return search->stepTime();
}

double AutoSharder::priceTime(ArrayRef<unsigned> pick) {
  ++priced;
  apply(fn, pick);
  ShardingState state(meshRef, meshShape.size());
  ScopedDiagnosticHandler quiet(fn.getContext(),
                                [](Diagnostic &) { return success(); });
  auto start = std::chrono::steady_clock::now();
  FailureOr<double> time = price(fn, rules, state);
  searchSeconds += secondsSince(start);
  return succeeded(time) ? *time : kInf;
}

Priced AutoSharder::priceFull(ArrayRef<unsigned> pick) {
  Picks key(pick.begin(), pick.end());
  if (const Priced *known = pool.lookup(key))
    return *known;
  Priced out = priceFullUncached(pick);
  pool.insert(key, out);
  return out;
}

Priced AutoSharder::priceFullUncached(ArrayRef<unsigned> pick) {
  ++pricedFull;
  ScopedDiagnosticHandler quiet(fn.getContext(), [&](Diagnostic &diag) {
    if (firstFailure.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
      firstFailure = diag.str();
    return success();
  });
  apply(fn, pick);
  ShardingState state(meshRef, meshShape.size());
  auto start = std::chrono::steady_clock::now();
  FailureOr<double> time = price(fn, rules, state);
  searchSeconds += secondsSince(start);
  if (failed(time))
    return {};
  start = std::chrono::steady_clock::now();
  auto timed = llvm::make_scope_exit(
      [&] { pipelineSeconds += secondsSince(start); });
  // The peak of the program every rank runs: the plan's layouts through
  // the pipeline shardx-run and shardx-compile run (shardx-spmd with the
  // collectives scheduled), whose own propagation, canonicalization and
  // schedule move the peak.
  OwningOpRef<ModuleOp> copy = prepared->clone();
  auto f = copy->lookupSymbol<func::FuncOp>(fn.getSymName());
  PassManager pm(fn.getContext());
  pm.enableVerifier(false);
  SpmdPipelineOptions options;
  options.scheduleCollectives = true;
  buildSpmdPipeline(pm, options);
  if (failed(pm.run(*copy)))
    return {};
  return Priced{*time, computeMemoryProfile(f).peakBytes};
}

Surrogate AutoSharder::buildSurrogate(std::vector<unsigned> base) {
  Surrogate s;
  s.center = base;
  size_t n = groups.size();
  unsigned dataChoice = dataGroup >= 0 ? base[dataGroup] : 0;
  Priced b = priceFull(base);
  s.baseTime = b.time;
  s.basePeak = b.peak;
  s.time.resize(n);
  s.bytes.resize(n);
  s.pairsOf.resize(n);
  for (size_t g = 0; g < n; ++g) {
    size_t k = groups[g].choices.size();
    s.time[g].assign(k, 0);
    s.bytes[g].assign(k, 0);
    if (int(g) == dataGroup) {
      // Fixed in this surrogate: only its own choice is allowed.
      for (size_t c = 0; c < k; ++c)
        if (c != dataChoice)
          s.time[g][c] = kInf;
      continue;
    }
    for (size_t c = 0; c < k; ++c) {
      if (c == base[g])
        continue;
      std::vector<unsigned> pick = base;
      pick[g] = c;
      Priced p = priceFull(pick);
      s.time[g][c] = p.time - b.time;
      s.bytes[g][c] = std::isfinite(p.time) ? double(p.peak - b.peak) : 0;
    }
  }
  // Pairs of weights (parameters of rank 2 or more) used close together:
  // `window` weights apart in first-use order. A vector (a bias, a norm's
  // scale) follows its weight in the final descent on real prices.
  SmallVector<size_t> weights;
  for (size_t g = 0; g < n; ++g)
    if (int(g) != dataGroup &&
        cast<RankedTensorType>(fn.getArgument(groups[g].args.front()).getType())
                .getRank() >= 2)
      weights.push_back(g);
  // The pair terms of the promising choices only (the others' stay 0):
  // per group the two fastest alone and the one of the fewest bytes, the
  // ones a plan under no budget or a tight one takes.
  std::vector<SmallVector<unsigned>> promising(n);
  for (size_t g : weights) {
    SmallVector<unsigned> order;
    for (unsigned c = 0; c < groups[g].choices.size(); ++c)
      if (c != base[g] && std::isfinite(s.time[g][c]))
        order.push_back(c);
    llvm::stable_sort(order, [&](unsigned a, unsigned b) {
      return s.time[g][a] < s.time[g][b];
    });
    SmallVector<unsigned> &keep = promising[g];
    keep.append(order.begin(), order.begin() + std::min<size_t>(2, order.size()));
    auto fewest = llvm::min_element(order, [&](unsigned a, unsigned b) {
      return s.bytes[g][a] < s.bytes[g][b];
    });
    if (fewest != order.end() && !llvm::is_contained(keep, *fewest))
      keep.push_back(*fewest);
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    size_t g = weights[i];
    for (size_t j = i + 1; j < weights.size() && j <= i + window; ++j) {
      size_t h = weights[j];
      Surrogate::Pair pair{unsigned(g), unsigned(h), {}};
      size_t kg = groups[g].choices.size(), kh = groups[h].choices.size();
      pair.time.assign(kg, std::vector<double>(kh, 0));
      bool any = false;
      for (unsigned c : promising[g])
        for (unsigned d : promising[h]) {
          std::vector<unsigned> pick = base;
          pick[g] = c;
          pick[h] = d;
          double t = priceTime(pick);
          double delta =
              std::isfinite(t) ? t - b.time - s.time[g][c] - s.time[h][d] : 0;
          if (!std::isfinite(t))
            delta = kInf;
          pair.time[c][d] = delta;
          any |= delta != 0;
        }
      if (any) {
        s.pairsOf[g].push_back(s.pairs.size());
        s.pairsOf[h].push_back(s.pairs.size());
        s.pairs.push_back(std::move(pair));
      }
    }
  }
  return s;
}

void AutoSharder::writeJson(StringRef path, const std::optional<Picks> &pick,
                            double limit, Priced real, double solveSeconds) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    fn.emitError() << "cannot write " << path << ": " << ec.message();
    return;
  }
  llvm::json::OStream j(os, 1);
  auto number = [&](double v) {
    if (std::isfinite(v))
      j.value(v);
    else
      j.value(nullptr);
  };
  j.object([&] {
    j.attribute("function", fn.getSymName());
    j.attribute("mesh", llvm::json::Array(llvm::to_vector(
                            llvm::map_range(meshShape, [](int64_t s) {
                              return llvm::json::Value(s);
                            }))));
    j.attribute("budget", budget);
    j.attributeBegin("surrogate_budget");
    number(limit);
    j.attributeEnd();
    j.attribute("data_group", dataGroup);
    j.attributeArray("groups", [&] {
      for (const Group &g : groups)
        j.object([&] {
          j.attribute("name", g.name);
          j.attribute("data", g.isData);
          j.attributeArray("args", [&] {
            for (unsigned a : g.args)
              j.value(a);
          });
          j.attributeArray("choices", [&] {
            for (const Choice &c : g.choices)
              j.value(c.text);
          });
        });
    });
    j.attributeArray("surrogates", [&] {
      for (const Surrogate &s : surrogates)
        j.object([&] {
          j.attributeBegin("base_time");
          number(s.baseTime);
          j.attributeEnd();
          j.attribute("base_peak", s.basePeak);
          j.attributeArray("time", [&] {
            for (auto &row : s.time)
              j.array([&] {
                for (double v : row)
                  number(v);
              });
          });
          j.attributeArray("bytes", [&] {
            for (auto &row : s.bytes)
              j.array([&] {
                for (double v : row)
                  number(v);
              });
          });
          j.attributeArray("pairs", [&] {
            for (const Surrogate::Pair &p : s.pairs)
              j.object([&] {
                j.attribute("g", p.g);
                j.attribute("h", p.h);
                j.attributeArray("time", [&] {
                  for (auto &row : p.time)
                    j.array([&] {
                      for (double v : row)
                        number(v);
                    });
                });
              });
          });
        });
    });
    if (solverPick) {
      unsigned d = dataGroup >= 0 ? (*solverPick)[dataGroup] : 0;
      auto [t, m] = evaluate(surrogates[d], *solverPick);
      j.attributeObject("solver", [&] {
        j.attribute("surrogate", d);
        j.attributeArray("choices", [&] {
          for (unsigned c : *solverPick)
            j.value(c);
        });
        j.attribute("surrogate_time", t);
        j.attribute("surrogate_peak", m);
      });
      Priced r = *pool.lookup(*solverPick);
      j.attributeObject("solver_real", [&] {
        j.attributeBegin("time");
        number(r.time);
        j.attributeEnd();
        j.attribute("peak", r.peak);
      });
    }
    if (pick) {
      unsigned d = dataGroup >= 0 ? (*pick)[dataGroup] : 0;
      // Without groups there is no surrogate: the plan's own numbers.
      auto [t, m] = surrogates.empty()
                        ? std::make_pair(real.time, double(real.peak))
                        : evaluate(surrogates[d], *pick);
      j.attributeObject("plan", [&] {
        j.attribute("surrogate", d);
        j.attributeArray("choices", [&] {
          for (unsigned c : *pick)
            j.value(c);
        });
        // Null where the plan's input layout was left out of the last round.
        j.attributeBegin("surrogate_time");
        number(t);
        j.attributeEnd();
        j.attributeBegin("surrogate_peak");
        number(std::isfinite(t) ? m : kInf);
        j.attributeEnd();
        j.attribute("time", real.time);
        j.attribute("peak", real.peak);
      });
    }
    j.attribute("priced_plans", priced + pricedFull);
    j.attribute("priced_in_full", pricedFull);
    j.attribute("solve_seconds", solveSeconds);
    j.attribute("search_seconds", searchSeconds);
    j.attribute("pipeline_seconds", pipelineSeconds);
  });
}

LogicalResult AutoSharder::run(StringRef jsonPath) {
  auto start = std::chrono::steady_clock::now();
  if (failed(prepare()) || failed(findGroups()))
    return failure();
  std::optional<Picks> pick;
  Priced real;
  // Nothing to decide (every argument pinned or of one layout): the plan
  // the layouts given make, priced for the remark and the budget.
  if (groups.empty()) {
    pick = Picks();
    real = priceFull(*pick);
  }
  unsigned numData = dataGroup >= 0 ? groups[dataGroup].choices.size() : 1;
  // Two rounds: surrogates measured from the replicated plan of each input
  // layout, then from the best plan the first round priced for it (the
  // changes are smaller there, and their sums closer to the truth).
  std::vector<std::vector<unsigned>> centers;
  for (unsigned d = 0; d < numData; ++d) {
    centers.emplace_back(groups.size(), 0);
    if (dataGroup >= 0)
      centers.back()[dataGroup] = d;
  }
  std::optional<Picks> last;
  // The input layouts searched in the second round: those whose best plan
  // is within 2% of the best plan's time (and fits where it does); the
  // others' best plans stay in the pool, their surrogates are left out
  // (every term infinite: no plan, as for a layout nothing can be priced
  // with).
  std::vector<bool> rebuild(numData, true);
  for (int recentre = 0; recentre < 2 && !groups.empty(); ++recentre) {
    surrogates.clear();
    solverPick.reset();
    last.reset();
    for (unsigned d = 0; d < numData; ++d)
      surrogates.push_back(rebuild[d] ? buildSurrogate(centers[d])
                                      : leftOut(centers[d]));
    // The surrogate's peak is a sum of per-group changes of a maximum, so
    // it is off: the limit it is solved under is calibrated by the real peak
    // of each plan it gives (limit += budget - real peak), keeping the
    // fastest plan that really fits.
    double limit = budget > 0 ? double(budget) : kInf;
    double smallestModeled = kInf;
    for (const Surrogate &s : surrogates)
      if (std::isfinite(s.baseTime)) {
        double bytes = s.basePeak;
        for (size_t g = 0; g < groups.size(); ++g) {
          double least = kInf;
          for (size_t c = 0; c < groups[g].choices.size(); ++c)
            if (std::isfinite(s.time[g][c]))
              least = std::min(least, s.bytes[g][c]);
          bytes += least;
        }
        smallestModeled = std::min(smallestModeled, bytes);
      }
    for (int round = 0; round < 8 && std::isfinite(smallestModeled); ++round) {
      // Below the smallest surrogate peak nothing is feasible: solve at it.
      limit = std::max(limit, smallestModeled);
      double bestTime = kInf;
      std::optional<Picks> bestPick;
      for (unsigned d = 0; d < numData; ++d) {
        std::optional<Picks> p = solve(surrogates[d], limit);
        if (!p)
          continue;
        double t = evaluate(surrogates[d], *p).first;
        if (t < bestTime) {
          bestTime = t;
          bestPick = p;
        }
      }
      if (!bestPick || bestPick == last)
        break;
      last = bestPick;
      Priced r = priceFull(*bestPick);
      if (!solverPick || better(r, priceFull(*solverPick))) {
        solverPick = bestPick;
        solverLimit = limit;
      }
      if (budget <= 0)
        break;
      limit += double(budget - r.peak);
    }
    // The plans of the fewest bytes the surrogates know of and the fastest
    // ones, priced too: the summed changes of a peak misjudge both.
    for (unsigned d = 0; d < numData; ++d) {
      std::vector<unsigned> small = surrogates[d].center;
      for (size_t g = 0; g < groups.size(); ++g)
        if (int(g) != dataGroup)
          for (unsigned c = 0; c < groups[g].choices.size(); ++c)
            if (std::isfinite(surrogates[d].time[g][c]) &&
                surrogates[d].bytes[g][c] < surrogates[d].bytes[g][small[g]])
              small[g] = c;
      priceFull(small);
      if (std::optional<Picks> fast = solve(surrogates[d], kInf))
        priceFull(*fast);
    }
    // The next centers: the best plan priced for each input layout.
    std::vector<Priced> bestOf(numData);
    for (unsigned d = 0; d < numData; ++d) {
      bool found = false;
      for (auto &[p, r] : pool)
        if ((dataGroup < 0 || p[dataGroup] == d) &&
            (!found || better(r, bestOf[d]))) {
          centers[d] = p;
          bestOf[d] = r;
          found = true;
        }
    }
    Priced overall = *llvm::min_element(
        bestOf, [&](Priced a, Priced b) { return better(a, b); });
    for (unsigned d = 0; d < numData; ++d)
      rebuild[d] = fits(bestOf[d]) == fits(overall) &&
                   bestOf[d].time <= 1.02 * overall.time;
  }
  // From the best plan priced, a coordinate descent on the real prices:
  // one group changed at a time, kept when the plan gets better.
  for (auto &[p, r] : pool)
    if (!pick || better(r, real)) {
      pick = p;
      real = r;
    }
  for (unsigned sweep = 0; sweep < refineSweeps && pick; ++sweep) {
    bool improved = false;
    for (size_t g = 0; g < groups.size(); ++g)
      for (unsigned c = 0; c < groups[g].choices.size(); ++c) {
        if (c == (*pick)[g])
          continue;
        Picks p = *pick;
        p[g] = c;
        Priced r = priceFull(p);
        if (better(r, real)) {
          pick = p;
          real = r;
          improved = true;
        }
      }
    if (!improved)
      break;
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (pick && !fits(real))
    pick.reset();
  if (!jsonPath.empty())
    writeJson(jsonPath, pick, solverLimit, real, seconds);
  int64_t smallest = pool.smallestPeak();
  // The layouts go on `target` only with a plan (pricing wrote them on the
  // copy).
  if (!pick && smallest == std::numeric_limits<int64_t>::max())
    return mlir::emitError(target.getLoc())
           << "no plan could be priced: propagating or partitioning @"
           << target.getSymName() << " failed for every plan tried"
           << (firstFailure.empty() ? "" : " (first: " + firstFailure + ")");
  if (!pick)
    return mlir::emitError(target.getLoc())
           << "no plan fits the memory budget of " << budget
           << " bytes per rank: the smallest modeled peak found is "
           << smallest << " bytes (" << formatBytes(smallest) << ")";
  apply(target, *pick);
  remark(*pick, real, seconds);
  return success();
}

void AutoSharder::remark(ArrayRef<unsigned> pick, Priced real,
                         double seconds) {
  // At the function's location, without the function printed after it.
  InFlightDiagnostic remark = mlir::emitRemark(target.getLoc());
  remark << "auto-shard @" << target.getSymName() << " on "
         << llvm::product_of(meshShape) << " ranks";
  if (budget > 0)
    remark << " under " << budget << " bytes per rank";
  remark << llvm::formatv(": modeled step time {0:F3} us, modeled peak {1} "
                          "bytes ({2}); {3} plans priced in {4:F2} s",
                          real.time, real.peak, formatBytes(real.peak),
                          priced + pricedFull, seconds);
  for (auto [g, group] : llvm::enumerate(groups)) {
    remark << "\n  " << group.name;
    if (group.isData)
      remark << " (";
    else {
      std::string type;
      llvm::raw_string_ostream(type)
          << fn.getArgument(group.args.front()).getType();
      remark << " " << type << " (";
    }
    unsigned shown = group.isData ? group.args.size() : group.argsPerLayer;
    for (auto [i, a] : llvm::enumerate(ArrayRef(group.args).take_front(shown)))
      remark << (i ? ", " : "") << "%arg" << a;
    if (group.layers > 1)
      remark << "; tied with " << group.layers - 1 << " more repeats like it";
    remark << "): " << group.choices[pick[g]].text;
  }
  if (groups.empty())
    remark << "\n  nothing to decide: every argument has its layout";
}

struct AutoShardPass
    : public mlir::shardx::impl::AutoShardPassBase<AutoShardPass> {
  using AutoShardPassBase::AutoShardPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto meshes = llvm::to_vector(module.getOps<MeshOp>());
    if (meshes.size() != 1) {
      module.emitError() << "shardx-auto-shard needs one shardx.mesh in the "
                            "module, found "
                         << meshes.size();
      return signalPassFailure();
    }
    MeshOp mesh = meshes.front();
    MeshSpec spec = getMeshSpec(mesh);
    if (std::string reason = Planner::checkMesh(spec);
        !reason.empty()) {
      mesh.emitError("cannot shard on this mesh: ") << reason;
      return signalPassFailure();
    }
    overrideLinkCosts(spec, bandwidthOverride, latencyOverride);
    if (memoryBudget < 0) {
      module.emitError() << "memory-budget must not be negative";
      return signalPassFailure();
    }
    CostModel costs(std::move(spec), computeRate);
    // The entry points only: private functions (the regions a traced
    // program calls) are inlined into them, as shardx-spmd inlines them.
    for (auto fn : llvm::to_vector(module.getOps<func::FuncOp>())) {
      if (fn.isExternal() || !fn.isPublic())
        continue;
      AutoSharder sharder(module, fn, mesh, costs, memoryBudget, pairWindow,
                          refineSweeps);
      if (failed(sharder.run(jsonPath)))
        return signalPassFailure();
    }
  }
};

} // namespace
