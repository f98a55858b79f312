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
// (tieLayers), so the decisions do not grow with the depth. Memory is the
// tensor-level memory model (MemoryModel.h) of the plan partitioned to the
// local program; without a budget no peak decides anything, and only the plan
// chosen is priced in full (the others by time).
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
// collectives scheduled. Without a budget the terms' plans are searched warm
// from their center's finished search (PlanPricer::warmTime), several times
// cheaper but not the search shardx-propagate runs: a warm time is a term,
// never a plan's price, and the plan is chosen among plans searched from
// scratch. Only public functions are decided, each on a copy
// of the module with its calls inlined (as shardx-spmd does first). `auto-json`
// writes the surrogate, so that a test can solve it exactly (an ILP) and
// compare. With the context's threads, batches of plans priced by time are
// priced on them (PlanPricer::prefetchTimes), and a plan priced in full runs
// its search beside its shardx-spmd run: the same numbers as on one thread.
//
//===----------------------------------------------------------------------===//

#include "AutoShard.h"
#include "LayoutUtils.h"
#include "PropagationSearch.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Analysis/Recompute.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

namespace mlir::shardx {
#define GEN_PASS_DEF_AUTOSHARDPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

/// The input layouts whose unary terms' fastest plan is within this
/// factor of the fastest get pair terms (AutoSharder::run).
static constexpr double kPairMargin = 1.25;
/// Without a budget the final descent prices a neighbour from scratch only
/// where its warm time (PlanPricer::warmTime) is under this factor of the
/// plan's time: a search warm from the plan seldom finds a slower step than
/// one from scratch (0.5% at most in the bench's), usually a faster one.
static constexpr double kWarmScreen = 1.01;

static double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

void AutoSharder::enterPhase(std::string next) {
  auto now = std::chrono::steady_clock::now();
  phases[phase].second +=
      std::chrono::duration<double>(now - phaseStart).count();
  phaseStart = now;
  phase = std::move(next);
}

LogicalResult AutoSharder::prepare() {
  if (!target.getBody().hasOneBlock())
    return target.emitError(
        "functions with more than one block are not supported");
  pricer.prepared = module.clone();
  PassManager pm(module.getContext());
  pm.enableVerifier(false);
  pm.addPass(createInlineCallsPass());
  if (failed(pm.run(*pricer.prepared)))
    return target.emitError("shardx-auto-shard: cannot inline the calls of @")
           << target.getSymName();
  pricer.fn = pricer.prepared->lookupSymbol<func::FuncOp>(target.getSymName());
  WalkResult call = pricer.fn.walk([&](CallOpInterface op) {
    if (auto callee = dyn_cast<SymbolRefAttr>(op.getCallableForCallee()))
      target.emitError("shardx-auto-shard cannot price a call to ")
          << callee << ", which shardx-inline-calls does not inline";
    else
      target.emitError("shardx-auto-shard cannot price an indirect call");
    return WalkResult::interrupt();
  });
  return failure(call.wasInterrupted());
}

/// A thread's copy of the function plans are priced on (the first cut, or
/// the step where it is priced whole), with the search's own rule cache,
/// caches and cost model: the function's layouts are written per plan, and
/// the caches are not shared between threads.
struct PlanPricer::Worker {
  OwningOpRef<ModuleOp> module;
  func::FuncOp fn;
  RuleCache rules;
  SearchCaches caches;
  /// The first cut's middle layer in this copy (cutParts[0]'s ops mapped).
  std::optional<StepPart> part;
  std::unique_ptr<CostModel> costs;
  llvm::StringSet<> warned;
  double seconds = 0;
};

PlanPricer::PlanPricer(
    MeshOp mesh, CostModel &costs, int64_t budget,
    const std::vector<Group> &groups, const SmallVector<bool> &pinnedArg,
    const std::string &phase,
    std::map<std::string, std::pair<int64_t, double>> &phases)
    : mesh(mesh), costs(costs), budget(budget),
      meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
      meshShape(mesh.getShape()), groups(groups), pinnedArg(pinnedArg),
      phase(phase), phases(phases) {
  // The functions priced on keep their ops (a plan only changes argument
  // and result attributes): each op's rule is asked once for all plans.
  rules.keepRules();
  for (RuleCache &r : cutRules)
    r.keepRules();
}

PlanPricer::~PlanPricer() = default;

void PlanPricer::apply(func::FuncOp f, ArrayRef<unsigned> pick) {
  StringRef name = ShardXDialect::getLayoutAttrName();
  LayoutAttr replicated =
      LayoutAttr::get(meshRef, Layout(static_cast<int64_t>(meshShape.size())));
  // The layout per argument and result, then every argument's and result's
  // attributes written at once (one setArgAttr per argument rebuilds the
  // function's argument attribute array each time: quadratic in the
  // arguments, ~5% of a search).
  SmallVector<Attribute> argLayouts(f.getNumArguments());
  SmallVector<Attribute> resultLayouts(f.getNumResults());
  // Arguments without a layout of the user's or the plan's: replicated
  // (the calling convention is explicit, as shardx-propagate makes it).
  for (unsigned i = 0, e = f.getNumArguments(); i < e; ++i)
    if (!pinnedArg[i] && isa<RankedTensorType>(f.getArgument(i).getType()))
      argLayouts[i] = replicated;
  for (auto [g, group] : llvm::enumerate(groups)) {
    const Choice &c = group.choices[pick[g]];
    LayoutAttr layout = LayoutAttr::get(meshRef, c.layout);
    for (unsigned a : group.args) {
      auto type = cast<RankedTensorType>(f.getArgument(a).getType());
      // A rank-0 member (none today) or a layout the member cannot take
      // stays replicated.
      if (type.getRank() == 0)
        continue;
      argLayouts[a] = layout;
    }
    for (unsigned r : group.results)
      resultLayouts[r] = layout;
  }
  auto withLayouts = [&](ArrayRef<Attribute> layouts, auto attrsOf) {
    SmallVector<DictionaryAttr> out;
    bool changed = false;
    for (auto [i, layout] : llvm::enumerate(layouts)) {
      DictionaryAttr attrs = attrsOf(i);
      if (layout && (!attrs || attrs.get(name) != layout)) {
        NamedAttrList list(attrs);
        list.set(name, layout);
        attrs = list.getDictionary(f.getContext());
        changed = true;
      }
      out.push_back(attrs ? attrs : DictionaryAttr::get(f.getContext()));
    }
    return std::make_pair(out, changed);
  };
  auto [args, argsChanged] =
      withLayouts(argLayouts, [&](unsigned i) { return f.getArgAttrDict(i); });
  if (argsChanged)
    f.setAllArgAttrs(args);
  auto [results, resultsChanged] = withLayouts(
      resultLayouts, [&](unsigned i) { return f.getResultAttrDict(i); });
  if (resultsChanged)
    f.setAllResultAttrs(results);
}

/// The modeled step time of `f` as its layouts stand, by the greedy search
/// with these caches (PlanPricer::price; a worker's in prefetchTimes), and
/// the share of `part` in `partTime`.
static FailureOr<double> searchTime(MeshOp mesh, CostModel &costs,
                                    RuleCache &rules, SearchCaches &caches,
                                    const StepPart *part,
                                    llvm::StringSet<> &warned, func::FuncOp f,
                                    ShardingState &state, double &partTime,
                                    const WarmStart *warm = nullptr,
                                    WarmStart *record = nullptr) {
  PropagationOptions options;
  options.stepTime = true;
  options.caches = &caches;
  options.part = part;
  options.warm = warm;
  options.record = record;
  std::unique_ptr<PropagationSearch> search =
      createGreedySearch(mesh, costs, rules, options, warned);
  if (failed(search->run(f, state)))
    return failure();
  partTime = search->partTime();
  return search->stepTime();
}

FailureOr<double> PlanPricer::price(func::FuncOp f, RuleCache &ruleCache,
                                    ShardingState &state) {
  return searchTime(mesh, costs, ruleCache, cachesFor(f), partOf(f), warned, f,
                    state, partTime);
}

SearchCaches &PlanPricer::cachesFor(func::FuncOp f) {
  for (int i = 0; i < 2; ++i)
    if (f == cutFns[i])
      return cutCaches[i];
  return caches;
}

const StepPart *PlanPricer::partOf(func::FuncOp f) const {
  return f && f == cutFns[0] ? &cutParts[0] : nullptr;
}

double PlanPricer::cutTime(ArrayRef<unsigned> pick, const WarmStart *warm,
                           WarmStart *record) {
  double t = timeOn(cutFns[0], cutRules[0], pick, warm, record);
  return std::isfinite(t) ? t + double(tiedLayers - cutDepth) * partTime : kInf;
}

double PlanPricer::timeOn(func::FuncOp f, RuleCache &cache,
                          ArrayRef<unsigned> pick, const WarmStart *warm,
                          WarmStart *record) {
  apply(f, pick);
  ShardingState state(meshRef, meshShape.size());
  ScopedDiagnosticHandler quiet(fn.getContext(),
                                [](Diagnostic &) { return success(); });
  auto start = std::chrono::steady_clock::now();
  FailureOr<double> time =
      searchTime(mesh, costs, cache, cachesFor(f), partOf(f), warned, f, state,
                 partTime, warm, record);
  searchSeconds += secondsSince(start);
  return succeeded(time) ? *time : kInf;
}

double PlanPricer::searchOn(func::FuncOp f, RuleCache &cache,
                            CostModel &costModel, llvm::StringSet<> &warnedHere,
                            double &seconds) {
  ShardingState state(meshRef, meshShape.size());
  double part = 0;
  auto start = std::chrono::steady_clock::now();
  FailureOr<double> time = searchTime(mesh, costModel, cache, cachesFor(f),
                                      partOf(f), warnedHere, f, state, part);
  seconds = secondsSince(start);
  return succeeded(time) ? *time : kInf;
}

double PlanPricer::priceTime(ArrayRef<unsigned> pick) {
  // A plan priced before (both rounds' pair terms share plans): its time.
  Picks key(pick.begin(), pick.end());
  if (const Priced *known = pool.lookup(key))
    return known->time;
  auto [it, added] = timeOnly.try_emplace(std::move(key), kInf);
  if (!added)
    return it->second;
  ++priced;
  ++phases[phase].first;
  if (auto known = prefetched.find(it->first); known != prefetched.end()) {
    it->second = known->second;
    prefetched.erase(known);
    return it->second;
  }
  // A warm start's base keeps its finished search (WarmTerms::wanted).
  auto want = warm.wanted.find(it->first);
  WarmStart *record =
      want != warm.wanted.end() ? &warm.settled[*want] : nullptr;
  return it->second = timedSearch(pick, nullptr, record);
}

const WarmStart *PlanPricer::settledOf(ArrayRef<unsigned> base) {
  Picks key(base.begin(), base.end());
  auto [it, added] = warm.settled.try_emplace(key);
  // Not kept when it was priced: searched again from scratch (the same
  // search, so the same layouts), not counted as a plan priced.
  if (added)
    timedSearch(base, nullptr, &it->second);
  return it->second.layouts.empty() ? nullptr : &it->second;
}

double PlanPricer::warmTime(ArrayRef<unsigned> pick, ArrayRef<unsigned> base) {
  Picks key(pick.begin(), pick.end());
  // Searched before: from scratch, else warm (from the first base asked).
  if (const Priced *known = pool.lookup(key))
    return known->time;
  if (auto known = timeOnly.find(key); known != timeOnly.end())
    return known->second;
  if (auto known = warm.times.find(key); known != warm.times.end())
    return known->second;
  Picks from(base.begin(), base.end());
  const WarmStart *start = key == from ? nullptr : settledOf(base);
  // No base to start from: searched from scratch (counted there).
  if (!start)
    return priceTime(pick);
  ++priced;
  ++warm.priced;
  ++phases[phase].first;
  if (auto known = warm.prefetched.find({key, from});
      known != warm.prefetched.end()) {
    double t = known->second;
    warm.prefetched.erase(known);
    return warm.times[key] = t;
  }
  return warm.times[key] = timedSearch(pick, start, nullptr);
}

double PlanPricer::workerTime(Worker &w, ArrayRef<unsigned> pick,
                              const WarmStart *warm, WarmStart *record) {
  apply(w.fn, pick);
  ShardingState state(meshRef, meshShape.size());
  double part = 0;
  auto start = std::chrono::steady_clock::now();
  FailureOr<double> time =
      searchTime(mesh, *w.costs, w.rules, w.caches, w.part ? &*w.part : nullptr,
                 w.warned, w.fn, state, part, warm, record);
  w.seconds += secondsSince(start);
  if (failed(time))
    return kInf;
  // As cutTime and timeOn.
  return cutDepth ? *time + double(tiedLayers - cutDepth) * part : *time;
}

size_t PlanPricer::startWorkers(size_t todo) {
  MLIRContext *context = fn.getContext();
  if (!context->isMultithreadingEnabled())
    return 0;
  llvm::ThreadPoolInterface &threads = context->getThreadPool();
  size_t n = std::min<size_t>(threads.getMaxConcurrency(), todo);
  if (n < 2)
    return 0;
  while (workers.size() < n) {
    auto w = std::make_unique<Worker>();
    ModuleOp from = cutDepth ? *cuts[0] : *prepared;
    func::FuncOp of = cutDepth ? cutFns[0] : fn;
    w->module = from.clone();
    w->fn = w->module->lookupSymbol<func::FuncOp>(of.getSymName());
    if (cutDepth) {
      // The middle layer's ops are top-level ops of the body: the copy's
      // at the same positions.
      w->part.emplace();
      w->part->args = cutParts[0].args;
      for (auto [a, b] :
           llvm::zip_equal(of.getBody().front(), w->fn.getBody().front()))
        if (cutParts[0].ops.contains(&a))
          w->part->ops.insert(&b);
    }
    w->rules.keepRules();
    w->costs = std::make_unique<CostModel>(costs.withEmptyCache());
    workers.push_back(std::move(w));
  }
  return n;
}

/// Runs `price(worker, k)` for k in [0, count) on `n` workers.
template <typename Price>
static void onWorkers(MLIRContext *context, size_t n, size_t count,
                      ArrayRef<std::unique_ptr<PlanPricer::Worker>> workers,
                      Price price) {
  std::atomic<size_t> next(0);
  // Diagnostics of every thread: the pricing's are not the pass's.
  ScopedDiagnosticHandler quiet(context,
                                [](Diagnostic &) { return success(); });
  llvm::ThreadPoolTaskGroup tasks(context->getThreadPool());
  for (size_t i = 0; i < n; ++i)
    tasks.async([&, w = workers[i].get()] {
      for (size_t k; (k = next++) < count;)
        price(*w, k);
    });
  tasks.wait();
}

void PlanPricer::prefetchTimes(ArrayRef<Picks> plans) {
  std::vector<const Picks *> todo;
  std::set<Picks> seen;
  for (const Picks &p : plans)
    if (!pool.lookup(p) && !timeOnly.count(p) && !prefetched.count(p) &&
        seen.insert(p).second)
      todo.push_back(&p);
  size_t n = startWorkers(todo.size());
  if (!n)
    return;
  std::vector<double> times(todo.size(), kInf);
  // The warm starts' bases keep their finished searches (WarmTerms::wanted).
  std::vector<WarmStart> records(todo.size());
  onWorkers(fn.getContext(), n, todo.size(), workers, [&](Worker &w, size_t k) {
    times[k] = workerTime(w, *todo[k], nullptr,
                          warm.wanted.count(*todo[k]) ? &records[k] : nullptr);
  });
  for (auto [p, t, r] : llvm::zip_equal(todo, times, records)) {
    prefetched.emplace(*p, t);
    if (warm.wanted.count(*p))
      warm.settled[*p] = std::move(r);
  }
  // The search's seconds summed over the threads.
  for (auto &w : workers) {
    searchSeconds += w->seconds;
    w->seconds = 0;
  }
}

void PlanPricer::prefetchWarm(ArrayRef<std::pair<Picks, Picks>> plans) {
  if (!fn.getContext()->isMultithreadingEnabled())
    return;
  std::vector<std::pair<const std::pair<Picks, Picks> *, const WarmStart *>>
      todo;
  // A plan once, from the first base in the list (the first to ask).
  std::set<Picks> seen;
  for (const auto &p : plans) {
    if (p.first == p.second || pool.lookup(p.first) ||
        timeOnly.count(p.first) || warm.times.count(p.first) ||
        warm.prefetched.count(p) || !seen.insert(p.first).second)
      continue;
    // The bases first, here (warmTime prices the plans of a base that
    // cannot be one from scratch).
    if (const WarmStart *from = settledOf(p.second))
      todo.emplace_back(&p, from);
  }
  size_t n = startWorkers(todo.size());
  if (!n)
    return;
  std::vector<double> times(todo.size(), kInf);
  onWorkers(fn.getContext(), n, todo.size(), workers, [&](Worker &w, size_t k) {
    times[k] = workerTime(w, todo[k].first->first, todo[k].second);
  });
  for (auto [p, t] : llvm::zip_equal(todo, times))
    warm.prefetched.emplace(*p.first, t);
  for (auto &w : workers) {
    searchSeconds += w->seconds;
    w->seconds = 0;
  }
}

Priced PlanPricer::priceFull(ArrayRef<unsigned> pick) {
  Picks key(pick.begin(), pick.end());
  if (const Priced *known = pool.lookup(key))
    return *known;
  // Without a budget no plan's peak decides anything (every plan that can
  // be priced fits; `better` compares times): the time alone, and for a
  // peak the arguments' bytes per rank (which the surrogate's Lagrangian
  // sweep trades time against, as it does real peaks: its plans of fewer
  // bytes are starts its local search reaches fast plans from). The plan
  // chosen is priced in full at the end, in `run`.
  Priced out;
  if (budget <= 0) {
    double time = priceTime(pick);
    if (std::isfinite(time))
      out = Priced{time, argumentBytes(pick)};
  } else {
    out = priceFullUncached(pick);
  }
  pool.insert(key, out);
  return out;
}

int64_t PlanPricer::argumentBytes(ArrayRef<unsigned> pick) {
  SmallVector<int64_t> shards(fn.getNumArguments(), 1);
  for (auto [g, group] : llvm::enumerate(groups))
    for (unsigned a : group.args)
      for (auto [axis, p] :
           llvm::enumerate(group.choices[pick[g]].placements))
        if (p.isShard())
          shards[a] *= meshShape[axis];
  int64_t bytes = 0;
  for (auto [a, arg] : llvm::enumerate(fn.getArguments()))
    if (auto type = dyn_cast<RankedTensorType>(arg.getType()))
      if (type.hasStaticShape() && type.getElementType().isIntOrFloat())
        bytes += type.getNumElements() *
                 int64_t(llvm::divideCeil(
                     type.getElementType().getIntOrFloatBitWidth(), 8)) /
                 shards[a];
  return bytes;
}

Priced PlanPricer::priceFullUncached(ArrayRef<unsigned> pick) {
  ++pricedFull;
  ++phases[phase].first;
  if (!cutDepth)
    return fullOn(*prepared, fn, rules, pick);
  // The time from the first cut and its middle layer (cutTime); the peak,
  // not a sum over the layers, extrapolated from both cuts' peaks. So are
  // a recomputation's peak, copies and their compute.
  OwningOpRef<ModuleOp> locals[2];
  Priced a = fullOn(*cuts[0], cutFns[0], cutRules[0], pick, /*needTime=*/true,
                    recompute ? &locals[0] : nullptr);
  if (!std::isfinite(a.time))
    return {};
  double time = a.time + double(tiedLayers - cutDepth) * partTime;
  Priced b = fullOn(*cuts[1], cutFns[1], cutRules[1], pick,
                    /*needTime=*/false, recompute ? &locals[1] : nullptr);
  if (!std::isfinite(b.time))
    return {};
  Priced plain{time, int64_t(std::llround(extrapolate(a.peak, b.peak)))};
  if (!recompute)
    return plain;
  return withRecompute(plain, [&](Recompute r) {
    PolicyPrice x = priceRecompute(*locals[0], cutFns[0].getSymName(), r);
    PolicyPrice y = priceRecompute(*locals[1], cutFns[1].getSymName(), r);
    return PolicyPrice{int64_t(std::llround(extrapolate(x.peak, y.peak))),
                       int64_t(std::llround(extrapolate(x.ops, y.ops))),
                       extrapolate(x.us, y.us)};
  });
}

PlanPricer::PolicyPrice
PlanPricer::priceRecompute(ModuleOp local, StringRef name, Recompute r) {
  auto start = std::chrono::steady_clock::now();
  OwningOpRef<ModuleOp> copy = local.clone();
  auto f = copy->lookupSymbol<func::FuncOp>(name);
  RecomputeResult done =
      recomputeActivations(f, /*aggressive=*/r == Recompute::Aggressive);
  PolicyPrice out{computeMemoryProfile(f).peakBytes, done.copied,
                  costs.getUsPerIteration() * double(done.iterations)};
  recomputeSeconds += secondsSince(start);
  return out;
}

Priced
PlanPricer::withRecompute(Priced plain,
                          llvm::function_ref<PolicyPrice(Recompute)> under) {
  if (!recompute || !std::isfinite(plain.time) || fits(plain))
    return plain;
  // The fastest policy that fits (`better`), else the smallest peak.
  Priced best = plain;
  for (Recompute r : ArrayRef(kRecomputePolicies).drop_front()) {
    PolicyPrice q = under(r);
    Priced with{plain.time + q.us, q.peak, r, q.ops, q.us};
    if (better(with, best))
      best = with;
  }
  return best;
}

/// Whether this thread runs fullOn's search (its errors are the search's).
static thread_local bool inSearch = false;

Priced PlanPricer::fullOn(ModuleOp m, func::FuncOp f, RuleCache &cache,
                          ArrayRef<unsigned> pick, bool needTime,
                          OwningOpRef<ModuleOp> *localOut) {
  MLIRContext *context = fn.getContext();
  // The first error of the search, else of the pipeline, as when they ran
  // one after the other (the pipeline only after a search that succeeded).
  std::mutex errors;
  std::string searchError, pipelineError;
  ScopedDiagnosticHandler quiet(context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error) {
      std::lock_guard<std::mutex> lock(errors);
      std::string &into = inSearch ? searchError : pipelineError;
      if (into.empty())
        into = diag.str();
    }
    return success();
  });
  apply(f, pick);
  // The peak of the program every rank runs: the plan's layouts through
  // the pipeline shardx-run and shardx-compile run (shardx-spmd with the
  // collectives scheduled), whose own propagation, canonicalization and
  // schedule move the peak. It runs on a copy and the search only reads
  // `f`: with threads, the search (the time) runs beside it.
  OwningOpRef<ModuleOp> copy = m.clone();
  auto local = copy->lookupSymbol<func::FuncOp>(f.getSymName());
  PassManager pm(context);
  pm.enableVerifier(false);
  SpmdPipelineOptions options;
  options.scheduleCollectives = true;
  buildSpmdPipeline(pm, options);
  // Only the peak (`needTime` false): no search here (shardx-spmd runs
  // its own), a time of 0.
  FailureOr<double> time = 0.0;
  auto search = [&] {
    inSearch = true;
    ShardingState state(meshRef, meshShape.size());
    auto start = std::chrono::steady_clock::now();
    time = price(f, cache, state);
    searchSeconds += secondsSince(start);
    inSearch = false;
  };
  auto pipeline = [&] {
    auto start = std::chrono::steady_clock::now();
    LogicalResult result = pm.run(*copy);
    pipelineSeconds += secondsSince(start);
    return result;
  };
  LogicalResult ran = success();
  if (needTime && context->isMultithreadingEnabled() &&
      context->getThreadPool().getMaxConcurrency() > 1) {
    // The pipeline's dialects loaded before a second thread runs (as
    // PassManager::run loads them).
    DialectRegistry dialects;
    pm.getDependentDialects(dialects);
    context->appendDialectRegistry(dialects);
    for (StringRef name : dialects.getDialectNames())
      context->getOrLoadDialect(name);
    llvm::ThreadPoolTaskGroup tasks(context->getThreadPool());
    tasks.async(search);
    ran = pipeline();
    tasks.wait();
  } else {
    if (needTime)
      search();
    if (succeeded(time))
      ran = pipeline();
  }
  if (firstFailure.empty())
    firstFailure = !searchError.empty() ? searchError
                   : succeeded(time)    ? pipelineError
                                        : std::string();
  if (failed(time) || failed(ran))
    return {};
  Priced plain{*time, computeMemoryProfile(local).peakBytes};
  if (localOut) {
    *localOut = std::move(copy);
    return plain;
  }
  return withRecompute(plain, [&](Recompute r) {
    return priceRecompute(*copy, f.getSymName(), r);
  });
}

Surrogate AutoSharder::buildSurrogate(std::vector<unsigned> base) {
  Surrogate s;
  s.center = base;
  size_t n = groups.size();
  unsigned dataChoice = dataGroup >= 0 ? base[dataGroup] : 0;
  Priced b = pricer.priceFull(base);
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
      // Without a budget, time alone, the search warm from the center's
      // (warmTime); the bytes are the arguments' (as priceFull's).
      Priced p = pricer.budget > 0 ? pricer.priceFull(pick)
                                   : Priced{pricer.warmTime(pick, base),
                                            pricer.argumentBytes(pick)};
      s.time[g][c] = p.time - b.time;
      s.bytes[g][c] = std::isfinite(p.time) ? double(p.peak - b.peak) : 0;
    }
  }
  return s;
}

void AutoSharder::addPairs(Surrogate &s) {
  const std::vector<unsigned> &base = s.center;
  size_t n = groups.size();
  Priced b{s.baseTime, s.basePeak};
  // Pairs of weights (parameters of rank 2 or more) used close together:
  // `window` weights apart in first-use order. A vector (a bias, a norm's
  // scale) follows its weight in the final descent on real prices.
  SmallVector<size_t> weights;
  for (size_t g = 0; g < n; ++g)
    if (int(g) != dataGroup &&
        cast<RankedTensorType>(
            pricer.fn.getArgument(groups[g].args.front()).getType())
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
    // The fewest bytes matter under a budget only.
    auto fewest = llvm::min_element(order, [&](unsigned a, unsigned b) {
      return s.bytes[g][a] < s.bytes[g][b];
    });
    if (pricer.budget > 0 && fewest != order.end() &&
        !llvm::is_contained(keep, *fewest))
      keep.push_back(*fewest);
  }
  // Their plans, priced on the threads first (prefetchTimes; without a
  // budget warm from the center's search, as the unary terms).
  std::vector<Picks> plans;
  for (size_t i = 0; i < weights.size(); ++i)
    for (size_t j = i + 1; j < weights.size() && j <= i + window; ++j)
      for (unsigned c : promising[weights[i]])
        for (unsigned d : promising[weights[j]]) {
          plans.push_back(base);
          plans.back()[weights[i]] = c;
          plans.back()[weights[j]] = d;
        }
  bool warm = pricer.budget <= 0;
  if (warm) {
    std::vector<std::pair<Picks, Picks>> fromBase;
    for (Picks &p : plans)
      fromBase.emplace_back(std::move(p), Picks(base.begin(), base.end()));
    pricer.prefetchWarm(fromBase);
  } else {
    pricer.prefetchTimes(plans);
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
          double t =
              warm ? pricer.warmTime(pick, base) : pricer.priceTime(pick);
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
}

LogicalResult AutoSharder::run(StringRef jsonPath) {
  auto start = std::chrono::steady_clock::now();
  if (failed(prepare()) || failed(findGroups()))
    return failure();
  // Recomputation under a budget only, and not for a step that calls its
  // layers (a regionally traced one): its compiled program calls them
  // again (shardx-outline-calls), and recomputes nothing across calls.
  pricer.recompute =
      recompute && pricer.budget > 0 &&
      !target.walk([](CallOpInterface) { return WalkResult::interrupt(); })
           .wasInterrupted();
  enterPhase("cuts");
  {
    ScopedDiagnosticHandler quiet(pricer.fn.getContext(),
                                  [](Diagnostic &) { return success(); });
    buildCuts();
  }
  std::optional<Picks> pick;
  Priced real;
  // Nothing to decide (every argument pinned or of one layout): the plan
  // the layouts given make, priced for the remark and the budget.
  if (groups.empty()) {
    pick = Picks();
    real = pricer.priceFull(*pick);
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
    enterPhase("unary " + std::to_string(recentre + 1));
    // Without a budget the unary terms' plans are priced by time alone
    // (priceFull): the centers first, then the unary terms of the input
    // layouts that keep theirs, on the threads (prefetchTimes).
    if (pricer.budget <= 0) {
      std::vector<Picks> plans;
      for (unsigned d = 0; d < numData; ++d)
        if (rebuild[d]) {
          plans.push_back(centers[d]);
          // The unary and pair terms start warm from its search.
          pricer.warm.wanted.insert(centers[d]);
        }
      pricer.prefetchTimes(plans);
      // First round: an input layout whose center (every group replicated)
      // is slower than kPairMargin times the fastest center gets no unary
      // terms (a surrogate of no plan; its center stays priced). A
      // heuristic, as kPairMargin's: it assumes that no one group's layout
      // brings such a layout within the margin (which would give it pair
      // terms), and that its surrogate's plans lose. Under a budget a slow
      // layout may be the one that fits: every layout keeps its terms.
      if (recentre == 0 && numData > 1) {
        std::vector<double> centerTime(numData, kInf);
        for (unsigned d = 0; d < numData; ++d)
          if (rebuild[d])
            centerTime[d] = pricer.priceFull(centers[d]).time;
        double fastestCenter = *llvm::min_element(centerTime);
        for (unsigned d = 0; d < numData; ++d)
          if (rebuild[d] && std::isfinite(centerTime[d]) &&
              centerTime[d] > kPairMargin * fastestCenter) {
            rebuild[d] = false;
            ++unaryLeftOut;
          }
      }
      std::vector<std::pair<Picks, Picks>> fromCenters;
      for (unsigned d = 0; d < numData; ++d) {
        if (!rebuild[d])
          continue;
        for (size_t g = 0; g < groups.size(); ++g)
          for (unsigned c = 0;
               int(g) != dataGroup && c < groups[g].choices.size(); ++c)
            if (c != centers[d][g]) {
              fromCenters.emplace_back(centers[d], centers[d]);
              fromCenters.back().first[g] = c;
            }
      }
      pricer.prefetchWarm(fromCenters);
    }
    for (unsigned d = 0; d < numData; ++d)
      surrogates.push_back(rebuild[d] ? buildSurrogate(centers[d])
                                      : leftOut(centers[d]));
    // Pair terms (most of the plans priced) only for the input layouts
    // whose fastest plan priced so far (the unary terms', every one priced
    // for real) is within kPairMargin of the fastest of all: the others
    // keep their unary terms.
    std::vector<double> fastest(numData, kInf);
    for (auto &[p, r] : pricer.pool)
      fastest[dataGroup >= 0 ? p[dataGroup] : 0] =
          std::min(fastest[dataGroup >= 0 ? p[dataGroup] : 0], r.time);
    // Without a budget the unary terms' plans too: their warm times, which
    // the pool does not hold.
    for (auto [d, sur] : llvm::enumerate(surrogates))
      if (pricer.budget <= 0)
        for (auto [g, times] : llvm::enumerate(sur.time))
          for (double t : times)
            if (int(g) != dataGroup && std::isfinite(t))
              fastest[d] = std::min(fastest[d], sur.baseTime + t);
    double fastestAll = *llvm::min_element(fastest);
    enterPhase("pairs " + std::to_string(recentre + 1));
    for (unsigned d = 0; d < numData; ++d)
      if (rebuild[d] && fastest[d] <= kPairMargin * fastestAll)
        addPairs(surrogates[d]);
    // The surrogate's peak is a sum of per-group changes of a maximum, so
    // it is off: the limit it is solved under is calibrated by the real peak
    // of each plan it gives (limit += budget - real peak), keeping the
    // fastest plan that really fits.
    enterPhase("solve " + std::to_string(recentre + 1));
    double limit = pricer.budget > 0 ? double(pricer.budget) : kInf;
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
    // Per surrogate, its plan of the fewest bytes and its fastest (solved
    // at no limit), both priced below; without a budget priced on the
    // threads first (the solve at no limit is a fastest one).
    std::vector<Picks> smallOf;
    std::vector<std::optional<Picks>> fastOf;
    for (unsigned d = 0; d < numData; ++d) {
      std::vector<unsigned> small = surrogates[d].center;
      for (size_t g = 0; g < groups.size(); ++g)
        if (int(g) != dataGroup)
          for (unsigned c = 0; c < groups[g].choices.size(); ++c)
            if (std::isfinite(surrogates[d].time[g][c]) &&
                surrogates[d].bytes[g][c] < surrogates[d].bytes[g][small[g]])
              small[g] = c;
      smallOf.emplace_back(small.begin(), small.end());
      fastOf.push_back(solve(surrogates[d], kInf));
    }
    if (pricer.budget <= 0) {
      std::vector<Picks> plans;
      for (unsigned d = 0; d < numData; ++d) {
        if (fastOf[d])
          plans.push_back(*fastOf[d]);
        plans.push_back(smallOf[d]);
      }
      pricer.prefetchTimes(plans);
    }
    for (int round = 0; round < 8 && std::isfinite(smallestModeled); ++round) {
      // Below the smallest surrogate peak nothing is feasible: solve at it.
      limit = std::max(limit, smallestModeled);
      double bestTime = kInf;
      std::optional<Picks> bestPick;
      for (unsigned d = 0; d < numData; ++d) {
        std::optional<Picks> p =
            std::isinf(limit) ? fastOf[d] : solve(surrogates[d], limit);
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
      Priced r = pricer.priceFull(*bestPick);
      if (!solverPick || pricer.better(r, pricer.priceFull(*solverPick))) {
        solverPick = bestPick;
        solverLimit = limit;
      }
      if (pricer.budget <= 0)
        break;
      limit += double(pricer.budget - r.peak);
    }
    // The plans of the fewest bytes the surrogates know of and the fastest
    // ones, priced too: the summed changes of a peak misjudge both.
    for (unsigned d = 0; d < numData; ++d) {
      pricer.priceFull(smallOf[d]);
      if (fastOf[d])
        pricer.priceFull(*fastOf[d]);
    }
    // The next centers: the best plan priced for each input layout.
    std::vector<Priced> bestOf(numData);
    for (unsigned d = 0; d < numData; ++d) {
      bool found = false;
      for (auto &[p, r] : pricer.pool)
        if ((dataGroup < 0 || p[dataGroup] == d) &&
            (!found || pricer.better(r, bestOf[d]))) {
          centers[d] = p;
          bestOf[d] = r;
          found = true;
        }
    }
    Priced overall = *llvm::min_element(
        bestOf, [&](Priced a, Priced b) { return pricer.better(a, b); });
    for (unsigned d = 0; d < numData; ++d)
      rebuild[d] = pricer.fits(bestOf[d]) == pricer.fits(overall) &&
                   bestOf[d].time <= 1.02 * overall.time;
  }
  enterPhase("refine");
  // From the best plan priced, a coordinate descent on the real prices:
  // one group changed at a time, kept when the plan gets better.
  for (auto &[p, r] : pricer.pool)
    if (!pick || pricer.better(r, real)) {
      pick = p;
      real = r;
    }
  // Without a budget a neighbour is priced from scratch only where its
  // warm time from the plan (warmTime; the neighbours of a center are its
  // unary terms, known) is under kWarmScreen times the plan's time.
  bool screen = pricer.budget <= 0;
  auto neighbours = [&] {
    std::vector<std::pair<Picks, Picks>> out;
    for (size_t g = 0; g < groups.size(); ++g)
      for (unsigned c = 0; c < groups[g].choices.size(); ++c)
        if (c != (*pick)[g]) {
          out.emplace_back(*pick, *pick);
          out.back().first[g] = c;
        }
    return out;
  };
  auto screened = [&](const Picks &p) {
    return screen && !pricer.pool.lookup(p) &&
           !(pricer.warmTime(p, *pick) < kWarmScreen * real.time);
  };
  for (unsigned sweep = 0; sweep < refineSweeps && pick; ++sweep) {
    bool improved = false;
    if (screen) {
      std::vector<std::pair<Picks, Picks>> around = neighbours();
      pricer.prefetchWarm(around);
      std::vector<Picks> cold;
      for (auto &[p, from] : around)
        if (!screened(p))
          cold.push_back(p);
      pricer.prefetchTimes(cold);
    }
    for (size_t g = 0; g < groups.size(); ++g)
      for (unsigned c = 0; c < groups[g].choices.size(); ++c) {
        if (c == (*pick)[g])
          continue;
        Picks p = *pick;
        p[g] = c;
        if (screened(p))
          continue;
        Priced r = pricer.priceFull(p);
        if (pricer.better(r, real)) {
          pick = p;
          real = r;
          improved = true;
        }
      }
    if (!improved)
      break;
  }
  enterPhase("confirm");
  if (pick && pricer.cutDepth)
    confirm(pick, real);
  else if (pricer.cutDepth)
    smallestConfirmed = pricer.pool.smallestPeak();
  else if (pick && pricer.budget <= 0)
    // Priced by time alone (no budget): its peak for the remark (and the
    // first failure, where none could be priced).
    real = pricer.fullOn(*pricer.prepared, pricer.fn, pricer.rules, *pick);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  enterPhase("end");
  if (pick && !pricer.fits(real))
    pick.reset();
  if (!jsonPath.empty())
    writeJson(jsonPath, pick, solverLimit, real, seconds);
  // With cuts, the smallest peak is a real one: the plans confirmed.
  int64_t smallest =
      pricer.cutDepth ? smallestConfirmed : pricer.pool.smallestPeak();
  // The layouts go on `target` only with a plan (pricing wrote them on the
  // copy).
  if (!pick && smallest == std::numeric_limits<int64_t>::max())
    return mlir::emitError(target.getLoc())
           << "no plan could be priced: propagating or partitioning @"
           << target.getSymName() << " failed for every plan tried"
           << (pricer.firstFailure.empty()
                   ? ""
                   : " (first: " + pricer.firstFailure + ")");
  if (!pick)
    return mlir::emitError(target.getLoc())
           << "no plan fits the memory budget of " << pricer.budget
           << " bytes per rank: the smallest modeled peak found is " << smallest
           << " bytes (" << formatBytes(smallest) << ")";
  pricer.apply(target, *pick);
  // The recomputation the plan needs to fit, for code generation
  // (shardx-recompute-activations{policy=plan}); none: nothing.
  if (real.recompute != Recompute::None)
    target->setAttr(
        kRecomputePolicyAttrName,
        StringAttr::get(target.getContext(), recomputeName(real.recompute)));
  else
    target->removeAttr(kRecomputePolicyAttrName);
  remark(*pick, real, seconds);
  return success();
}

void AutoSharder::confirm(std::optional<Picks> &pick, Priced &real) {
  auto start = std::chrono::steady_clock::now();
  auto done = llvm::make_scope_exit(
      [&] { confirmSeconds += secondsSince(start); });
  // The plans by their extrapolated prices, best first; the first that
  // really fits is the plan. A plan is tried only when its extrapolated
  // peak times the largest underestimate seen (real / extrapolated) fits.
  std::vector<std::pair<Picks, Priced>> order(pricer.pool.begin(),
                                              pricer.pool.end());
  llvm::stable_sort(order, [&](const auto &a, const auto &b) {
    return pricer.better(a.second, b.second);
  });
  double scale = 1;
  std::optional<std::pair<Picks, Priced>> first;
  auto tryPlan = [&](const Picks &p, Priced r) {
    ++confirmed;
    Priced whole = pricer.fullOn(*pricer.prepared, pricer.fn, pricer.rules, p);
    if (std::isfinite(whole.time)) {
      smallestConfirmed = std::min(smallestConfirmed, whole.peak);
      if (r.peak > 0)
        scale = std::max(scale, double(whole.peak) / double(r.peak));
    }
    if (!first)
      first = {p, whole};
    if (!pricer.fits(whole))
      return false;
    extrapolated = r;
    pick = p;
    real = whole;
    return true;
  };
  for (auto &[p, r] : order) {
    if (confirmed >= 6 || !std::isfinite(r.time))
      break;
    if (pricer.budget > 0 && double(r.peak) * scale > double(pricer.budget))
      continue;
    if (tryPlan(p, r))
      return;
  }
  // None fits: the plan of the smallest extrapolated peak, whose real peak
  // the error gives, and the first confirmed as the answer (none fits).
  auto smallest = llvm::min_element(order, [](const auto &a, const auto &b) {
    return std::isfinite(a.second.time) &&
           (!std::isfinite(b.second.time) || a.second.peak < b.second.peak);
  });
  if (smallest != order.end() && std::isfinite(smallest->second.time) &&
      tryPlan(smallest->first, smallest->second))
    return;
  if (first) {
    const Priced *known = pricer.pool.lookup(first->first);
    extrapolated = known ? *known : Priced();
    pick = first->first;
    real = first->second;
  }
}

void AutoSharder::remark(ArrayRef<unsigned> pick, Priced real,
                         double seconds) {
  // At the function's location, without the function printed after it.
  InFlightDiagnostic remark = mlir::emitRemark(target.getLoc());
  remark << "auto-shard @" << target.getSymName() << " on "
         << llvm::product_of(pricer.meshShape) << " ranks";
  if (pricer.budget > 0)
    remark << " under " << pricer.budget << " bytes per rank";
  remark << llvm::formatv(": modeled step time {0:F3} us, modeled peak {1} "
                          "bytes ({2})",
                          real.time, real.peak, formatBytes(real.peak));
  if (real.recompute != Recompute::None)
    remark << llvm::formatv(" with recompute={0}: {1} ops recomputed, +{2:F3} "
                            "us",
                            recomputeName(real.recompute), real.recomputedOps,
                            real.recomputeUs);
  remark << llvm::formatv("; {0} plans priced in {1:F2} s",
                          pricer.priced + pricer.pricedFull, seconds);
  if (pricer.cutDepth)
    remark << llvm::formatv(
        " (priced on the step cut to {0} of its {1} layers{2}, confirmed "
        "whole)",
        pricer.cutDepth, pricer.tiedLayers,
        pricer.budget > 0 ? llvm::formatv(", peaks on {0} and {1}",
                                          pricer.cutDepth, pricer.cutDepth + 1)
                                .str()
                          : std::string());
  for (auto [g, group] : llvm::enumerate(groups)) {
    remark << "\n  " << group.name;
    if (group.isData)
      remark << " (";
    else {
      std::string type;
      llvm::raw_string_ostream(type)
          << pricer.fn.getArgument(group.args.front()).getType();
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

namespace {

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
                          refineSweeps, cutLayers, recompute);
      if (failed(sharder.run(jsonPath)))
        return signalPassFailure();
    }
  }
};

} // namespace
