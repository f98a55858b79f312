//===- AutoShard.h - shardx-auto-shard's sharder ----------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The state of one public function's auto-sharding (AutoShard.cpp, the
// pass and the pricing; AutoShardGroups.cpp, the decisions and the tying of
// repeated layers; AutoShardCut.cpp, the copies of the step with the
// repeated layers cut out that plans are priced on; AutoShardJson.cpp, the
// auto-json dump). docs/Memory.md,
// "Automatic sharding under a budget".
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARD_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARD_H

#include "AutoShardSpace.h"
#include "OpShardingSpace.h"
#include "PropagationSearch.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringSet.h"

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mlir::shardx::autoshard {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

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

/// The warm starts of the surrogate's terms (PlanPricer::warmTime).
struct WarmTerms {
  /// The finished searches they start from, by plan (empty where the
  /// search cannot be one: it searched twice, for a lookup).
  std::map<Picks, WarmStart> settled;
  /// The plans whose search from scratch keeps its finished search when it
  /// runs (the centers; settledOf searches the others again).
  std::set<Picks> wanted;
  /// The times by plan (from the base of the first to ask), and those
  /// prefetchWarm priced not yet asked for, by plan and base.
  std::map<Picks, double> times;
  std::map<std::pair<Picks, Picks>, double> prefetched;
  /// The plans priced warm.
  int64_t priced = 0;
};

/// Plans priced (AutoShard.cpp): by the greedy propagation search for time
/// and through shardx-spmd for peaks, on the step or on its layer cuts
/// (AutoShardCut.cpp builds them), with the caches and counters of the
/// pricing. The groups, pinned arguments and phases are the sharder's.
class PlanPricer {
public:
  PlanPricer(MeshOp mesh, CostModel &costs, int64_t budget,
             const std::vector<Group> &groups,
             const SmallVector<bool> &pinnedArg, const std::string &phase,
             std::map<std::string, std::pair<int64_t, double>> &phases);
  ~PlanPricer();

  /// Writes the plan `pick` (a choice per group) on `f`'s arguments and
  /// tied results.
  void apply(func::FuncOp f, ArrayRef<unsigned> pick);
  /// The modeled step time of `f` as its layouts stand (the greedy
  /// search's reshards plus local compute); `state` receives the layouts.
  FailureOr<double> price(func::FuncOp f, RuleCache &rules,
                          ShardingState &state);
  /// The search's caches kept for `f` (the step or a cut of it), and the
  /// part of `f` whose share of the time `price` leaves in `partTime`
  /// (the middle layer of the first cut; none elsewhere).
  SearchCaches &cachesFor(func::FuncOp f);
  const StepPart *partOf(func::FuncOp f) const;
  /// The whole step's time from the first cut's: its time plus its middle
  /// layer's share for every layer cut out (infinite when not priced).
  double cutTime(ArrayRef<unsigned> pick, const WarmStart *warm = nullptr,
                 WarmStart *record = nullptr);
  /// Time only, on the function itself.
  double priceTime(ArrayRef<unsigned> pick);
  /// Prices by time the plans of `plans` that priceTime has not priced,
  /// as it would (the same search on the same function, so the same
  /// times), on the context's threads, each thread on its own copy of the
  /// function with its own caches (`workers`); priceTime then takes those
  /// times, counting each plan when it asks for it, as before. Nothing
  /// without multithreading or with fewer than two plans to price.
  void prefetchTimes(ArrayRef<Picks> plans);
  /// Without a budget, the surrogate's terms around `base` (a plan priced
  /// before: their center): the time of `pick` by a search that starts
  /// warm from `base`'s finished search instead of from scratch (the same
  /// function, cutTime's or timeOn's number; PropagationOptions::warm),
  /// several times cheaper. Not a price of the plan (shardx-propagate
  /// searches from scratch, and the two often differ): the pool holds
  /// only plans searched from scratch. A plan searched once is not searched
  /// again: its time from scratch where it has one, else its warm time
  /// from the base of the first to ask. Counted as a plan priced (and in
  /// `warm.priced`).
  double warmTime(ArrayRef<unsigned> pick, ArrayRef<unsigned> base);
  /// warmTime of each (plan, base) of `plans` not known yet, on the
  /// context's threads (as prefetchTimes).
  void prefetchWarm(ArrayRef<std::pair<Picks, Picks>> plans);
  /// Time (on the function), and the peak of a copy through shardx-spmd.
  Priced priceFull(ArrayRef<unsigned> pick);
  Priced priceFullUncached(ArrayRef<unsigned> pick);
  /// The bytes per rank of `fn`'s arguments under `pick` (a peak's
  /// stand-in where no budget asks for peaks).
  int64_t argumentBytes(ArrayRef<unsigned> pick);
  /// The modeled step time of `f` under `pick` (infinite when it cannot
  /// be priced).
  /// From `warm` and into `record` when given (PropagationOptions).
  double timeOn(func::FuncOp f, RuleCache &cache, ArrayRef<unsigned> pick,
                const WarmStart *warm = nullptr, WarmStart *record = nullptr);
  /// timeOn's search of `f` as its layouts stand (`apply` first), for a
  /// second thread: with its own cost model and warnings, nothing of the
  /// pricer's touched but `cache` and `f`'s search caches; its seconds in
  /// `seconds` (not summed into `searchSeconds`).
  double searchOn(func::FuncOp f, RuleCache &cache, CostModel &costModel,
                  llvm::StringSet<> &warnedHere, double &seconds);
  /// Time and the peak of `m` (holding `f`) through shardx-spmd. With
  /// `local`, the local program (the pipeline's output) is moved there and
  /// the price is without recomputation; without it and with `recompute`,
  /// the price is withRecompute's on that program.
  Priced fullOn(ModuleOp m, func::FuncOp f, RuleCache &cache,
                ArrayRef<unsigned> pick, bool needTime = true,
                OwningOpRef<ModuleOp> *local = nullptr);
  /// What recomputing under one policy does to a local program: its peak,
  /// the ops copied and their compute (microseconds at the compute rate).
  struct PolicyPrice {
    int64_t peak = 0;
    int64_t ops = 0;
    double us = 0;
  };
  /// `r` applied to a copy of `local`'s function `name`
  /// (shardx/Analysis/Recompute.h), its tensor-level peak after.
  PolicyPrice priceRecompute(ModuleOp local, StringRef name, Recompute r);
  /// `plain` (a plan's price without recomputation) where it fits or
  /// recomputation is not considered; else with the fastest policy whose
  /// peak (`under`) fits, its copies' compute added to the time; none
  /// fitting, the price of the smallest peak.
  Priced withRecompute(Priced plain,
                       llvm::function_ref<PolicyPrice(Recompute)> under);
  /// The whole step's number from those of the cuts of `cutDepth` and
  /// `cutDepth + 1` repeats: linear in the repeats.
  double extrapolate(double atDepth, double atNext) const {
    return atDepth + double(tiedLayers - cutDepth) * (atNext - atDepth);
  }
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

  /// The copy of the module the plans are priced on, calls inlined; `fn`
  /// is the sharder's `target` in it (AutoSharder::prepare).
  OwningOpRef<ModuleOp> prepared;
  func::FuncOp fn;
  MeshOp mesh;
  CostModel &costs;
  int64_t budget;
  FlatSymbolRefAttr meshRef;
  ArrayRef<int64_t> meshShape;
  llvm::StringSet<> warned;
  RuleCache rules;
  /// Under a budget, whether a plan may fit by recomputing activations
  /// (the pass's `recompute`; not for a step that calls its layers, whose
  /// compiled program recomputes nothing across the calls).
  bool recompute = false;
  /// The repeats of the tied layers (1: none tied).
  unsigned tiedLayers = 1;
  /// With `cutDepth` > 0 the plans are priced on `cuts` (`fn` with
  /// `cutDepth` and `cutDepth + 1` of its repeats kept) and extrapolated
  /// to `tiedLayers`; the plan chosen is confirmed on `fn`.
  unsigned cutDepth = 0;
  OwningOpRef<ModuleOp> cuts[2];
  func::FuncOp cutFns[2];
  RuleCache cutRules[2];
  StepPart cutParts[2];
  SearchCaches caches, cutCaches[2];
  /// The share of the last search's part (PropagationOptions::part).
  double partTime = 0;
  /// Where the solve's time goes: the greedy search's pricing, and the
  /// shardx-spmd runs for the peaks (the JSON's).
  double searchSeconds = 0, pipelineSeconds = 0;
  /// Pricing recomputation (priceRecompute): copies and their peaks.
  double recomputeSeconds = 0;
  PricedPlans pool;
  /// The times of the plans priced by time only.
  std::map<Picks, double> timeOnly;
  /// The times prefetchTimes priced, not yet asked for by priceTime.
  std::map<Picks, double> prefetched;
  /// A thread's copy of the function priced on (prefetchTimes).
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers;
  /// Why the first plan that could not be priced failed.
  std::string firstFailure;
  int64_t priced = 0, pricedFull = 0;
  WarmTerms warm;

private:
  /// The time of `pick` on `w`'s copy (cutTime or timeOn's number); from
  /// `warm` when given; its finished search into `record` when given.
  double workerTime(Worker &w, ArrayRef<unsigned> pick,
                    const WarmStart *warm = nullptr,
                    WarmStart *record = nullptr);
  /// The workers for a batch of `n` plans (prefetchTimes, prefetchWarm);
  /// fewer than two: none.
  size_t startWorkers(size_t n);
  /// The finished search of `base` (searched from scratch again, on the
  /// function times are priced on, when not kept); null when it cannot be
  /// a base.
  const WarmStart *settledOf(ArrayRef<unsigned> base);
  /// The time of `pick` on the function times are priced on (cutTime or
  /// timeOn), from `warm` and into `record` when given.
  double timedSearch(ArrayRef<unsigned> pick, const WarmStart *warm,
                     WarmStart *record) {
    return cutDepth ? cutTime(pick, warm, record)
                    : timeOn(fn, rules, pick, warm, record);
  }

  const std::vector<Group> &groups;
  const SmallVector<bool> &pinnedArg;
  const std::string &phase;
  std::map<std::string, std::pair<int64_t, double>> &phases;
};

/// One public function's auto-sharding.
class AutoSharder {
public:
  AutoSharder(ModuleOp module, func::FuncOp target, MeshOp mesh,
              CostModel &costs, int64_t budget, unsigned window,
              unsigned refineSweeps, unsigned minCutLayers, bool recompute)
      : module(module), target(target), window(window),
        refineSweeps(refineSweeps), minCutLayers(minCutLayers),
        recompute(recompute),
        pricer(mesh, costs, budget, groups, pinnedArg, phase, phases) {}

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
  /// Builds `cuts` when the step has enough repeats of one layer
  /// (AutoShardCut.cpp); leaves `cutDepth` 0 (the step priced whole)
  /// otherwise or when the repeats cannot be cut out.
  void buildCuts();
  /// With cuts: the best plans by their extrapolated prices priced on the
  /// whole step, the first that fits becoming `pick` with its real price.
  void confirm(std::optional<Picks> &pick, Priced &real);
  /// A copy of `prepared` with `depth` of the `tiedLayers` repeats kept.
  /// `middle` receives its last middle layer before the cut (repeat
  /// `depth - 2`): the ops of that period of every stretch and the
  /// arguments only they use.
  OwningOpRef<ModuleOp> cutTo(unsigned depth, StepPart &middle);
  /// The surrogate's center and unary terms around `base`.
  Surrogate buildSurrogate(std::vector<unsigned> base);
  /// The surrogate's pair terms (time only).
  void addPairs(Surrogate &s);
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
  unsigned window;
  unsigned refineSweeps;
  /// Cut from this many repeats (0: never).
  unsigned minCutLayers;
  /// The pass's `recompute` (PlanPricer::recompute).
  bool recompute;
  /// The ops' keys (name, result types, body op names) in `fn`'s order.
  SmallVector<llvm::hash_code> opKeys;
  /// The stretches of `fn`'s ops that repeat once per tied layer: ops
  /// [start, end) are periodic with `period` ops (AutoShardCut.cpp).
  struct Stretch {
    size_t start, end, period;
  };
  SmallVector<Stretch> stretches;
  /// Cuts were built but their replicated plan's time was off (the JSON's).
  bool cutRejected = false;
  /// The extrapolated numbers of the plan chosen, for the JSON.
  std::optional<Priced> extrapolated;
  int64_t confirmed = 0;
  /// The input layouts left without unary terms in the first round (their
  /// centers too slow; AutoSharder::run), for the JSON.
  int64_t unaryLeftOut = 0;
  int64_t smallestConfirmed = std::numeric_limits<int64_t>::max();
  double confirmSeconds = 0;
  std::vector<Group> groups; // the data group (if any) last
  int dataGroup = -1;
  /// Arguments and results whose layouts the user gave (kept).
  SmallVector<bool> pinnedArg, pinnedResult;
  std::vector<Surrogate> surrogates; // per data choice
  /// What the solve is doing now, and the plans priced and the seconds
  /// spent per phase (the JSON's `phases`).
  std::string phase = "setup";
  std::map<std::string, std::pair<int64_t, double>> phases;
  void enterPhase(std::string next);
  std::chrono::steady_clock::time_point phaseStart =
      std::chrono::steady_clock::now();
  /// The plans priced (declared after the groups and phases it reads).
  PlanPricer pricer;
  /// The surrogate solve the plan came from, for the JSON: its plan and
  /// the limit it was solved under.
  std::optional<Picks> solverPick;
  double solverLimit = kInf;
};

} // namespace mlir::shardx::autoshard

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_AUTOSHARD_H
