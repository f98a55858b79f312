//===- GreedyPropagation.cpp - Program order, then refinement -------------===//
//
// Part of ShardX.
//
// The `greedy` propagation strategy (PropagationStrategy.h): a pass in
// program order, then a whole-graph refinement by single changes and
// bounded cascades. Layouts are seen through the ops' sharding rules
// (FactorProjection.h), which also answer what the search must know of op
// bodies (reduction combiners, identity inits, linearity, shape-only
// values); prices come from CostModel.h.
//
//===----------------------------------------------------------------------===//

#include "FactorProjection.h"
#include "LayoutUtils.h"
#include "PropagationStrategy.h"

#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>

#define DEBUG_TYPE "shardx-propagate"

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::DimSharding;
using ::shardx::Layout;
using ::shardx::ReduceOp;
using ::shardx::Split;


namespace {

/// "(operand layouts) -> (result layouts)", for debug traces.
[[maybe_unused]] std::string describe(const Strategy &s) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto print = [&](ArrayRef<Layout> layouts, ArrayRef<LayoutAttr> attrs) {
    if (!layouts.empty())
      llvm::interleaveComma(layouts, os,
                            [&](const Layout &l) { os << l.str(); });
    else
      llvm::interleaveComma(attrs, os,
                            [&](LayoutAttr a) { os << a.getLayout().str(); });
  };
  os << "(";
  print(s.operandLayouts, s.operandAttrs);
  os << ") -> (";
  print(s.resultLayouts, s.resultAttrs);
  os << ")";
  return text;
}

bool isUserLayout(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return getRecordedLayout(v) != nullptr;
  return v.getDefiningOp<AnnotateOp>() != nullptr;
}

/// The greedy strategy. Its state during one run: the function, the
/// sharding state it fills, and the indexes of the refinement.
class GreedyPropagation : public PropagationStrategy {
public:
  GreedyPropagation(MeshOp mesh, CostModel &costs,
                    const PropagationOptions &options,
                    llvm::StringSet<> &warned)
      : mesh(mesh), costs(costs),
        meshShape(mesh.getShape().begin(), mesh.getShape().end()),
        meshRank(mesh.getShape().size()),
        userLayoutsOnly(options.userLayoutsOnly), refineGraph(options.refine),
        printCost(options.printCost),
        recordAlternatives(options.recordAlternatives), warned(warned) {}

  LogicalResult run(func::FuncOp fn, ShardingState &state) override;
  void finish(func::FuncOp fn) override;

private:
  const Layout &layoutOf(Value v) { return currentAttr(v).getLayout(); }
  LayoutAttr attr(const Layout &l) { return state->attr(l); }
  double reshardCost(Value v, const Layout &to);
  Strategy evaluate(Operation *op, const ShardingRule &rule,
                    ArrayRef<Value> results,
                    Assignment assignment, bool keepPartials = true,
                    bool priced = true);
  SmallVector<std::optional<ReduceOp>>
  keptPartials(Operation *op, uint64_t used,
               ArrayRef<std::optional<ReduceOp>> resultPartials,
               llvm::SmallBitVector &partialOperands);
  LogicalResult visit(Operation *op);
  std::optional<std::pair<Strategy, Layout>>
  embeddingStrategy(const EmbeddingLookup &lookup, ArrayRef<Value> operands,
                    ArrayRef<Value> results);
  /// The program-order choice, remembered per context like candidates
  /// (plus what the operands' reshards cost and the results' hints).
  Strategy chooseInProgramOrder(Operation *op, const ShardingRule &rule,
                                ArrayRef<Value> operands,
                                ArrayRef<Value> results);
  Strategy chooseUncached(Operation *op, const ShardingRule &rule,
                          ArrayRef<Value> operands, ArrayRef<Value> results);
  void setReplicated(Operation *op);

  /// Layouts the consumers of a value would like it in (from declared
  /// result layouts and user layouts, propagated backward before the
  /// forward pass); a candidate strategy of the value's producer.
  void computeHints();
  /// The rules computeHints asked for (none: the op has no rule), for
  /// visit, which asks again.
  DenseMap<Operation *, std::optional<ShardingRule>> hintRules;
  /// `op`'s rule, asked once.
  FailureOr<ShardingRule> takeRule(Operation *op) {
    if (auto it = hintRules.find(op); it != hintRules.end()) {
      std::optional<ShardingRule> rule = std::move(it->second);
      hintRules.erase(it);
      if (!rule)
        return failure();
      return std::move(*rule);
    }
    return ruleOf(op);
  }
  /// `op`'s rule from its interface. A linalg op's rule depends only on its
  /// name, inherent attributes (indexing maps, iterator types) and operand
  /// and result types (LinalgRules.cpp reads nothing else, not the body),
  /// and a program repeats a few such signatures: those rules are computed
  /// once per signature (building one reads the indexing maps, which named
  /// ops rebuild on every call).
  FailureOr<ShardingRule> ruleOf(Operation *op) {
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
    if (!ruleOp)
      return failure();
    if (!isa<linalg::LinalgOp>(op))
      return ruleOp.getShardingRule();
    auto signature = FunctionType::get(op->getContext(), op->getOperandTypes(),
                                       op->getResultTypes());
    auto key = std::make_tuple(op->getName(), op->getPropertiesAsAttribute(),
                               Type(signature));
    auto [it, inserted] = linalgRules.try_emplace(key);
    if (inserted) {
      FailureOr<ShardingRule> rule = ruleOp.getShardingRule();
      if (succeeded(rule))
        it->second = std::move(*rule);
    }
    if (!it->second)
      return failure();
    return *it->second;
  }
  DenseMap<std::tuple<OperationName, Attribute, Type>,
           std::optional<ShardingRule>>
      linalgRules;
  DenseMap<Value, LayoutAttr> hints;
  /// Layouts values will be resharded to anyway (needed by an earlier op's
  /// strategy): reusing them is free.
  DenseMap<Value, SmallVector<LayoutAttr, 2>> available;

  //===--- Whole-graph refinement -------------------------------------===//

  /// A tentative change of one op's strategy.
  struct Move {
    Operation *op;
    const Strategy *strategy;
  };
  /// Ops whose strategy the refinement may change (in program order), with
  /// their rules and chosen strategies.
  SmallVector<Operation *> movable;
  DenseMap<Operation *, unsigned> position;
  DenseMap<Operation *, ShardingRule> rules;

  /// The strategy of a movable op.
  Strategy &chosen(Operation *op) { return state->get(op); }
  /// Fills the attribute forms of a strategy's layouts.
  void attach(Strategy &s) { state->attach(s); }
  /// The layout `v` has now: its producer's strategy in the state, else its
  /// recorded layout, else replicated.
  LayoutAttr currentAttr(Value v) { return state->layoutOf(v); }
  LayoutAttr attrWith(Value v, const Move *move);
  /// The layout `use` needs when its owner does not change (the owner's
  /// chosen strategy, an annotation, the enclosing op of a nested read);
  /// null for a use that needs none. Not for uses by the return.
  LayoutAttr fixedRequirement(OpOperand &use);
  /// The reshards of `v` to every distinct layout its uses need (one
  /// redistribute per layout, shared by its consumers).
  double valueCost(Value v, const Move *move);

  /// The uses of a value, indexed so that its cost and the layouts its
  /// consumers need are found without a scan of all its uses: the distinct
  /// layouts the uses need, each with the positions (in use-list order) of
  /// the uses that need it. The cost sums each distinct layout once, in the
  /// order of the first use that needs it, as a scan of the uses would.
  struct Need {
    LayoutAttr layout;
    bool nested; // read inside a region of a top-level op
    std::set<unsigned> ranks;
  };
  struct ValueUses {
    SmallVector<OpOperand *> uses; // in use-list order
    SmallVector<Need, 2> needs;
    SmallVector<unsigned, 1> returns; // ranks of the uses by the return
    SmallVector<unsigned> movableUsers; // positions of movable users, sorted
    bool shapeOnly = false; // rematerialized: its reshards are free
  };
  std::vector<ValueUses> valueUses;
  DenseMap<Value, unsigned> valueIndex;
  DenseMap<OpOperand *, unsigned> useRank;
  /// Indexes the uses of the function's top-level values and arguments.
  void indexUses();
  ValueUses &usesOf(Value v) { return valueUses[valueIndex.find(v)->second]; }
  void addNeed(OpOperand &use, LayoutAttr layout);
  void removeNeed(OpOperand &use, LayoutAttr layout);
  /// Updates the needs of `op`'s operands from strategy `from` to `to`.
  void moveNeeds(Operation *op, const Strategy &from, const Strategy &to);
  /// The (use rank, layout) pairs whose first occurrences in rank order are
  /// the distinct layouts `v`'s uses need, with `move` applied; uses by
  /// `skip` and nested uses (unless `withNested`) left out.
  void neededLayouts(Value v, LayoutAttr from, const Move *move,
                     Operation *skip, bool withNested,
                     SmallVectorImpl<std::pair<unsigned, LayoutAttr>> &out);
  double totalCost();
  /// Iterations of `op`'s local loop under `s`.
  double work(Operation *op, const Strategy &s) {
    return CostModel::work(rules.find(op)->second, s.shardedWork);
  }
  /// The time `op`'s local loop takes under `s` at the compute rate.
  double computeUs(Operation *op, const Strategy &s) {
    return costs.computeUs(rules.find(op)->second, s.shardedWork);
  }
  /// Costs closer than this (microseconds) tie.
  static constexpr double kTieUs = 1e-3;
  /// Strategies for `op` given its operands' current layouts: replicated,
  /// each operand's layout, each layout another consumer needs an operand
  /// in, each layout the results' consumers need; alone and merged with the
  /// operands' layouts, with pending Partial operands kept or reduced first;
  /// distinct, and other than its current one.
  SmallVector<Strategy, 4> candidates(Operation *op);
  SmallVector<Strategy, 4>
  computeCandidates(Operation *op, ArrayRef<Value> operands,
                    ArrayRef<Value> results, ArrayRef<LayoutAttr> operandAttrs,
                    ArrayRef<SmallVector<LayoutAttr, 4>> needs);
  /// The part of a context every choice for `op` depends on: its name,
  /// rule, types, operands' layouts and what evaluate asks of its body.
  /// False when it is not keyed (more than `kMaxKeyedPartials` Partial
  /// operands).
  bool opContextKey(Operation *op, const ShardingRule &rule,
                    ArrayRef<LayoutAttr> operandAttrs,
                    SmallVectorImpl<uintptr_t> &key);
  /// The candidates of an op depend only on its rule, types and body and
  /// on the layouts around it (its operands', its own, the ones other
  /// consumers need): ops in the same context (the layers of a model)
  /// share them. `key` gets that context; false when it is not keyed.
  bool candidateKey(Operation *op, ArrayRef<LayoutAttr> operandAttrs,
                    ArrayRef<SmallVector<LayoutAttr, 4>> needs,
                    SmallVectorImpl<uintptr_t> &key);
  static constexpr unsigned kMaxKeyedPartials = 4;
  struct KeyHash {
    size_t operator()(const std::vector<uintptr_t> &key) const {
      return llvm::hash_combine_range(key.begin(), key.end());
    }
  };
  std::unordered_map<std::vector<uintptr_t>, SmallVector<Strategy, 4>, KeyHash>
      candidateCache;
  std::unordered_map<std::vector<uintptr_t>, Strategy, KeyHash>
      programOrderCache;
  /// A number per distinct rule (rules compare by content).
  unsigned ruleId(const ShardingRule &rule);
  struct RuleHash {
    size_t operator()(const std::vector<int64_t> &code) const {
      return llvm::hash_combine_range(code.begin(), code.end());
    }
  };
  std::unordered_map<std::vector<int64_t>, unsigned, RuleHash> ruleIds;
  /// What the search asks of an op's body, asked once per op (the rule
  /// interface reads the body each time).
  struct OpFacts {
    unsigned ruleId = 0;
    bool askedReduction = false;
    std::optional<ReduceOp> reduction;
    bool identityInit = false;
    SmallVector<std::pair<llvm::SmallBitVector, bool>, 2> linear;
  };
  DenseMap<Operation *, OpFacts> facts;
  /// The op's combiner (getReductionKind) and whether its init is the
  /// combiner's identity (hasIdentityInit).
  std::optional<ReduceOp> reductionKind(Operation *op, bool &identityInit);
  bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial);
  /// The values whose cost a change of `op` touches.
  SmallVector<Value> affectedBy(Operation *op);

  /// Changes made by a cascade, with the costs of every value they touch
  /// as they were before it.
  struct Trial {
    SmallVector<std::pair<Operation *, Strategy>, 4> undo;
    DenseMap<Value, double> before;
    SmallVector<Value> touched;
    double workDelta = 0;
  };
  void change(Operation *op, Strategy s, Trial &trial);
  double costDelta(Trial &trial);
  void revert(Trial &trial);
  /// Applies `s` to `op`, then lets the neighbours it disturbs (consumers
  /// of a result whose layout changed, other consumers of an operand now
  /// needed in another layout) pick their locally best strategy, in program
  /// order, up to `kCascadeLimit` ops. Kept when the total cost drops.
  bool tryCascade(Operation *op, const Strategy &s, Trial &trial);
  static constexpr unsigned kCascadeLimit = 256;
  /// A cascade disturbs the other consumers of a value only when there are
  /// at most this many: a value read by many ops (a weight shared by every
  /// layer, a shape reused everywhere) is never moved by a cascade, which
  /// could not move all its consumers within its limit anyway, and the
  /// work per op then does not depend on the function's size.
  static constexpr unsigned kFanOutLimit = 16;
  /// Marks the ops next to `op` (producers and consumers of its operands,
  /// consumers of its results) for another look. The consumers of a value
  /// are marked at once by stamping the value: an op is dirty when it is
  /// in `dirty` or one of its operands was stamped after its last visit.
  void markNeighbours(Operation *op);
  bool isDirty(Operation *op);
  /// Clears `op`'s mark; returns whether it was dirty.
  bool clearDirty(Operation *op);
  DenseSet<Operation *> dirty;
  DenseMap<Value, uint64_t> stamped;
  DenseMap<Operation *, uint64_t> cleared;
  uint64_t clock = 0;
  /// Local search over the whole function; returns the number of changes.
  int64_t refine();
  /// Attaches `shardx.alternatives` to every movable op: its other
  /// candidates, each priced as the change of the function's cost (reshards
  /// and local work) if only that op took it.
  void recordAlternativeCosts();
  static constexpr unsigned kMaxAlternatives = 8;

  /// What `print-cost` reports.
  double programOrderCost = 0, refinedCost = 0;
  int64_t changes = 0;

  func::FuncOp fn;
  ShardingState *state = nullptr;
  MeshOp mesh;
  CostModel &costs;
  std::vector<int64_t> meshShape;
  int64_t meshRank;
  bool userLayoutsOnly;
  bool refineGraph;
  bool printCost;
  bool recordAlternatives;
  llvm::StringSet<> &warned;
};

double GreedyPropagation::reshardCost(Value v, const Layout &to) {
  Layout from = layoutOf(v);
  if (from == to || isRematerializable(v))
    return 0;
  if (auto it = available.find(v);
      it != available.end() && llvm::any_of(it->second, [&](LayoutAttr a) {
        return a.getLayout() == to;
      }))
    return 0;
  return costs.planCost(v.getType(), from, to);
}

/// The operands of `op` that stay Partial(sum|avg) through it (marked in
/// `partialOperands`) and their common Partial op per mesh axis: Partial only
/// on axes the strategy leaves free (`used`) and the results do not reduce
/// over, all on the same axes, with `op` linear in them; none otherwise.
SmallVector<std::optional<ReduceOp>> GreedyPropagation::keptPartials(
    Operation *op, uint64_t used,
    ArrayRef<std::optional<ReduceOp>> resultPartials,
    llvm::SmallBitVector &partialOperands) {
  SmallVector<std::optional<ReduceOp>> kept(meshRank);
  // Operands with a Partial of sum/avg on axes the strategy leaves free.
  SmallVector<unsigned> candidates;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType()))
      continue;
    Layout l = layoutOf(operand.get());
    if (!l.hasPartial())
      continue;
    bool ok = true;
    for (auto [axis, p] : llvm::enumerate(l.getPartials())) {
      if (!p)
        continue;
      if ((*p != ReduceOp::Sum && *p != ReduceOp::Avg) ||
          (used >> axis & 1) || resultPartials[axis])
        ok = false;
    }
    if (ok)
      candidates.push_back(operand.getOperandNumber());
  }
  if (!candidates.empty()) {
    for (unsigned c : candidates)
      partialOperands.set(c);
    if (!isLinearIn(op, partialOperands)) {
      partialOperands.reset();
    } else {
      // All partial operands must be partial on the same axes.
      std::optional<SmallVector<std::optional<ReduceOp>>> common;
      for (unsigned c : candidates) {
        auto p = layoutOf(op->getOperand(c)).getPartials();
        SmallVector<std::optional<ReduceOp>> v(p.begin(), p.end());
        if (!common)
          common = v;
        else if (*common != v)
          partialOperands.reset();
      }
      if (partialOperands.any())
        kept = *common;
    }
  }
  return kept;
}

Strategy GreedyPropagation::evaluate(Operation *op, const ShardingRule &rule,
                              ArrayRef<Value> results,
                              Assignment assignment, bool keepPartials,
                              bool priced) {
  Strategy s;
  // Factors that must stay whole.
  for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
    if (!assignment[f])
      continue;
    if (kind == ShardingRule::FactorKind::NeedReplication ||
        rule.factorSizes[f] == ShapedType::kDynamic)
      assignment[f].reset();
  }
  // Reduction factors: sharded only with a known combiner and identity init.
  std::optional<ReduceOp> combiner;
  bool identityInit = false;
  bool reductionSharded = false;
  for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
    if (!assignment[f] || kind != ShardingRule::FactorKind::Reduction)
      continue;
    if (!combiner)
      combiner = reductionKind(op, identityInit);
    bool ok = combiner && identityInit;
    if (!ok)
      assignment[f].reset();
    else
      reductionSharded = true;
  }
  // Partial operands that stay partial.
  SmallVector<std::optional<ReduceOp>> resultPartials(meshRank);
  if (reductionSharded)
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds))
      if (assignment[f] && kind == ShardingRule::FactorKind::Reduction)
        for (const Split &sp : assignment[f]->splits)
          resultPartials[sp.axis] = *combiner;
  uint64_t used = 0;
  for (auto &a : assignment)
    if (a)
      used |= axesOf(*a);
  llvm::SmallBitVector partialOperands(op->getNumOperands());
  SmallVector<std::optional<ReduceOp>> keptPartials(meshRank);
  if (keepPartials)
    keptPartials =
        this->keptPartials(op, used, resultPartials, partialOperands);
  for (auto [axis, p] : llvm::enumerate(keptPartials))
    if (p)
      resultPartials[axis] = p;
  // Required operand layouts and result layouts.
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    Value v = use.get();
    if (!isa<RankedTensorType>(v.getType()))
      continue;
    std::optional<Layout> l = project(rule, rule.operands[tensorIndex],
                                      assignment, meshShape, meshRank);
    if (!l)
      return s;
    if (partialOperands.test(use.getOperandNumber()))
      for (auto [axis, p] : llvm::enumerate(keptPartials))
        l->setPartial(axis, p);
    auto type = cast<RankedTensorType>(v.getType());
    if (!l->verifyForShape(meshShape, std::vector<int64_t>(type.getShape().begin(), type.getShape().end()))
             .empty())
      return s;
    if (priced)
      s.cost += reshardCost(v, *l);
    s.operandLayouts.push_back(*l);
    ++tensorIndex;
  }
  for (auto [i, v] : llvm::enumerate(results)) {
    std::optional<Layout> l =
        project(rule, rule.results[i], assignment, meshShape, meshRank);
    if (!l)
      return s;
    for (auto [axis, p] : llvm::enumerate(resultPartials))
      if (p)
        l->setPartial(axis, p);
    auto type = cast<RankedTensorType>(v.getType());
    if (!l->verifyForShape(meshShape, std::vector<int64_t>(type.getShape().begin(), type.getShape().end()))
             .empty())
      return s;
    s.resultLayouts.push_back(*l);
  }
  for (auto &a : assignment)
    if (a)
      s.shardedWork *= splitCount(*a, meshShape);
  s.valid = true;
  return s;
}

void GreedyPropagation::setReplicated(Operation *op) {
  Strategy s;
  s.operandLayouts.assign(tensorValues(op->getOperands()).size(),
                          Layout(meshRank));
  s.resultLayouts.assign(tensorValues(op->getResults()).size(),
                         Layout(meshRank));
  s.valid = true;
  state->set(op, std::move(s));
}

/// Checks the reassociation of a reshape: upstream's verifier reads its
/// indices as 32-bit integers (an index of 2^32 passes as 0, found by
/// fuzzing), and every later pass would index dims out of bounds.
static LogicalResult verifyReassociation(Operation *op) {
  auto check = [&](auto reshape, RankedTensorType expanded) -> LogicalResult {
    for (ReassociationIndices group : reshape.getReassociationIndices())
      for (int64_t d : group)
        if (d < 0 || d >= expanded.getRank())
          return op->emitOpError("reassociation index ")
                 << d << " is out of range for a tensor of rank "
                 << expanded.getRank();
    return success();
  };
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return check(expand, expand.getResultType());
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return check(collapse, collapse.getSrcType());
  return success();
}

/// Embedding tables split by rows (vocabulary) and/or columns: every rank
/// looks up the rows it holds and yields zeros for the others (a pending sum
/// over the row axes), for the columns it holds (the result's last dim split
/// like the table's columns). The strategy and the table's layout, or none
/// when the table's layout is not one of those.
std::optional<std::pair<Strategy, Layout>>
GreedyPropagation::embeddingStrategy(const EmbeddingLookup &lookup,
                              ArrayRef<Value> operands,
                              ArrayRef<Value> results) {
  Layout table = layoutOf(lookup.table);
  const ::shardx::DimSharding *rows = table.getDim(0);
  const ::shardx::DimSharding *cols = table.getDim(1);
  auto unitStrides = [](const ::shardx::DimSharding *d) {
    return !d || llvm::all_of(d->splits, [](const ::shardx::Split &s) {
             return s.stride == 1;
           });
  };
  if ((rows || cols) && !table.hasPartial() && unitStrides(rows) &&
      unitStrides(cols)) {
    uint64_t tableAxes = (rows ? axesOf(*rows) : 0) | (cols ? axesOf(*cols) : 0);
    Layout idx = layoutOf(operands[0]);
    bool disjoint = !idx.hasPartial();
    for (const auto &d : idx.getDims())
      disjoint &= !(axesOf(d) & tableAxes);
    if (!disjoint)
      idx = Layout(meshRank);
    Layout result(meshRank);
    for (const auto &d : idx.getDims()) {
      for (const ::shardx::Split &s : d.splits)
        result.addSplit(d.dim, s);
      if (!d.sizes.empty())
        result.setSizes(d.dim, d.sizes);
    }
    int64_t last = cast<RankedTensorType>(results[0].getType()).getRank() - 1;
    if (cols) {
      for (const ::shardx::Split &s : cols->splits)
        result.addSplit(last, s);
      if (!cols->sizes.empty())
        result.setSizes(last, cols->sizes);
    }
    Layout init = result;
    if (rows)
      for (const ::shardx::Split &s : rows->splits)
        result.setPartial(s.axis, ReduceOp::Sum);
    Strategy s;
    s.operandLayouts = {idx, init};
    s.resultLayouts = {result};
    s.valid = true;
    return std::make_pair(std::move(s), table);
  }
  return std::nullopt;
}

/// The program-order choice for `op`: each operand's layout as leader
/// (largest first) merged with the others', and the replicated strategy,
/// priced by the reshards they need; the results' hints merged with the
/// operands win ties (they save reshards further on). Invalid when none is.
Strategy GreedyPropagation::chooseUncached(Operation *op,
                                           const ShardingRule &rule,
                                           ArrayRef<Value> operands,
                                           ArrayRef<Value> results) {
  SmallVector<unsigned> order(operands.size());
  for (unsigned i = 0; i < order.size(); ++i)
    order[i] = i;
  auto bytes = [&](unsigned i) {
    auto t = cast<RankedTensorType>(operands[i].getType());
    return t.hasStaticShape() ? t.getNumElements() : 0;
  };
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return bytes(a) > bytes(b);
  });
  SmallVector<Assignment> views;
  for (auto [i, v] : llvm::enumerate(operands))
    views.push_back(viewThroughRule(rule, rule.operands[i], layoutOf(v),
                                    meshShape));
  Strategy best = evaluate(op, rule, results,
                           Assignment(rule.factorSizes.size()));
  // The consumers' preference: the results' hints, merged with the
  // operands; it wins ties (it saves reshards further on).
  Strategy hinted;
  {
    Assignment a(rule.factorSizes.size());
    bool any = false;
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it == hints.end())
        continue;
      mergeInto(a, viewThroughRule(rule, rule.results[i],
                                   it->second.getLayout(), meshShape));
      any = true;
    }
    if (any) {
      for (unsigned other : order)
        mergeInto(a, views[other]);
      hinted = evaluate(op, rule, results, a);
    }
  }
  for (unsigned leader : order) {
    Assignment a = views[leader];
    for (unsigned other : order)
      if (other != leader)
        mergeInto(a, views[other]);
    Strategy s = evaluate(op, rule, results, a);
    if (!s.valid)
      continue;
    constexpr double eps = 1e-12;
    if (!best.valid || s.cost < best.cost - eps ||
        (s.cost <= best.cost + eps && s.shardedWork > best.shardedWork))
      best = std::move(s);
  }
  if (hinted.valid && (!best.valid || hinted.cost <= best.cost + 1e-12))
    best = std::move(hinted);
  return best;
}

LogicalResult GreedyPropagation::visit(Operation *op) {
  if (isa<AnnotateOp, RedistributeOp, func::ReturnOp>(op))
    return success();
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  if (operands.empty() && results.empty())
    return success();
  for (Value v : op->getOperands())
    if (isa<TensorType>(v.getType()) && !isa<RankedTensorType>(v.getType()))
      return op->emitError("unranked tensors cannot be sharded");
  if (failed(verifyReassociation(op)))
    return failure();
  FailureOr<ShardingRule> rule = takeRule(op);
  // Ops whose regions read tensors from above run replicated: the captured
  // tensors are whole on every rank.
  bool capturesTensors = false;
  op->walk([&](Operation *inner) {
    if (inner == op)
      return;
    for (Value v : inner->getOperands())
      if (isa<RankedTensorType>(v.getType()) &&
          !op->isProperAncestor(v.getParentBlock()->getParentOp()) &&
          v.getParentBlock()->getParentOp() != op)
        capturesTensors = true;
  });
  if (failed(rule) || rule->operands.size() != operands.size() ||
      rule->results.size() != results.size()) {
    if (!isa<tensor::EmptyOp, arith::ConstantOp>(op) &&
        warned.insert(op->getName().getStringRef()).second)
      op->emitWarning() << "no sharding rule for '" << op->getName()
                        << "': it runs replicated";
    setReplicated(op);
    return success();
  }
  if (std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
      lookup && !userLayoutsOnly) {
    if (auto chosen = embeddingStrategy(*lookup, operands, results)) {
      LLVM_DEBUG(llvm::dbgs() << "embedding lookup " << op->getName() << ": "
                              << describe(chosen->first) << ", table "
                              << chosen->second.str() << "\n");
      state->set(op, std::move(chosen->first));
      state->setTableLayout(op, attr(chosen->second));
      return success();
    }
  }
  if (capturesTensors || userLayoutsOnly) {
    setReplicated(op);
    // Captured tensors must be replicated too: they are operands in effect.
    return success();
  }
  facts[op].ruleId = ruleId(*rule);
  Strategy best = chooseInProgramOrder(op, *rule, operands, results);
  movable.push_back(op);
  rules.try_emplace(op, std::move(*rule));
  if (!best.valid) {
    best = Strategy();
    best.operandLayouts.assign(operands.size(), Layout(meshRank));
    best.resultLayouts.assign(results.size(), Layout(meshRank));
    best.valid = true;
  }
  if (!best.hasAttrs())
    attach(best);
  for (auto [v, l] : llvm::zip(operands, best.operandAttrs))
    if (l != currentAttr(v) && !llvm::is_contained(available[v], l))
      available[v].push_back(l);
  LLVM_DEBUG(llvm::dbgs() << "program order: " << op->getName() << " at "
                          << op->getLoc() << ": " << describe(best)
                          << ", reshards " << best.cost << " us\n");
  position[op] = movable.size() - 1;
  state->set(op, std::move(best));
  return success();
}

//===----------------------------------------------------------------------===//
// Whole-graph refinement
//===----------------------------------------------------------------------===//
//
// The pass in program order decides each op from its operands' layouts and
// the hints. The refinement then treats the whole function at once: its cost
// is the sum over values of the reshards to every distinct layout the
// value's consumers need (one redistribute per layout, as
// shardx-insert-reshards shares them). Sweeps, alternating backward and
// forward over the ops, change an op's strategy when that lowers this total
// (ties to less local work). Where no single change helps, cascades change
// an op together with the neighbours it disturbs (a pending Partial reduced
// once upstream instead of in every branch; a chain of ops moved to another
// layout together) and are kept only when the total drops. Every kept change
// lowers (cost, work) lexicographically, so the search ends; the visiting
// order is the program's, so the result is deterministic.

LayoutAttr GreedyPropagation::attrWith(Value v, const Move *move) {
  if (move)
    if (auto r = dyn_cast<OpResult>(v); r && r.getOwner() == move->op)
      return move->strategy->resultAttrs[tensorResultIndex(r)];
  return currentAttr(v);
}

LayoutAttr GreedyPropagation::fixedRequirement(OpOperand &use) {
  Operation *owner = use.getOwner();
  Block &body = fn.getBody().front();
  if (owner->getBlock() != &body) {
    // Read inside a region: the enclosing op needs it whole (or in the
    // layout of a row-split embedding table).
    Operation *top = body.findAncestorOpInBlock(*owner);
    if (!top)
      return nullptr;
    if (LayoutAttr table = state->getTableLayout(top))
      return table;
    return state->getReplicated();
  }
  if (Strategy *s = state->find(owner))
    return s->operandAttrs[tensorOperandIndex(use)];
  if (auto annotate = dyn_cast<AnnotateOp>(owner))
    return annotate.getLayout();
  return requiredLayout(use);
}

void GreedyPropagation::indexUses() {
  Block &body = fn.getBody().front();
  // Sized once: an entry moved by a reallocation would be copied (its
  // move constructor is not noexcept), sets of use ranks included.
  size_t numValues = body.getNumArguments();
  for (Operation &op : body)
    numValues += op.getNumResults();
  valueUses.reserve(numValues);
  valueIndex.reserve(numValues);
  auto index = [&](Value v) {
    if (!isa<RankedTensorType>(v.getType()))
      return;
    valueIndex[v] = valueUses.size();
    valueUses.emplace_back();
    ValueUses &entry = valueUses.back();
    entry.shapeOnly = isRematerializable(v);
    for (OpOperand &use : v.getUses()) {
      unsigned rank = entry.uses.size();
      entry.uses.push_back(&use);
      useRank[&use] = rank;
      Operation *owner = use.getOwner();
      if (owner->getBlock() == &body) {
        if (isa<func::ReturnOp>(owner)) {
          entry.returns.push_back(rank);
          continue;
        }
        if (auto it = position.find(owner); it != position.end())
          entry.movableUsers.push_back(it->second);
      }
      if (LayoutAttr need = fixedRequirement(use))
        addNeed(use, need);
    }
    llvm::sort(entry.movableUsers);
    entry.movableUsers.erase(llvm::unique(entry.movableUsers),
                             entry.movableUsers.end());
  };
  for (BlockArgument arg : body.getArguments())
    index(arg);
  for (Operation &op : body)
    for (Value r : op.getResults())
      index(r);
}

void GreedyPropagation::addNeed(OpOperand &use, LayoutAttr layout) {
  ValueUses &entry = usesOf(use.get());
  bool nested = use.getOwner()->getBlock() != &fn.getBody().front();
  unsigned rank = useRank.find(&use)->second;
  for (Need &need : entry.needs)
    if (need.layout == layout && need.nested == nested) {
      need.ranks.insert(rank);
      return;
    }
  entry.needs.push_back(Need{layout, nested, {rank}});
}

void GreedyPropagation::removeNeed(OpOperand &use, LayoutAttr layout) {
  ValueUses &entry = usesOf(use.get());
  bool nested = use.getOwner()->getBlock() != &fn.getBody().front();
  unsigned rank = useRank.find(&use)->second;
  for (auto it = entry.needs.begin(); it != entry.needs.end(); ++it)
    if (it->layout == layout && it->nested == nested) {
      it->ranks.erase(rank);
      if (it->ranks.empty())
        entry.needs.erase(it);
      return;
    }
  assert(false && "removing a need that was not recorded");
}

void GreedyPropagation::moveNeeds(Operation *op, const Strategy &from,
                           const Strategy &to) {
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    if (!isa<RankedTensorType>(use.get().getType()))
      continue;
    LayoutAttr was = from.operandAttrs[tensorIndex];
    LayoutAttr is = to.operandAttrs[tensorIndex];
    ++tensorIndex;
    if (was == is)
      continue;
    removeNeed(use, was);
    addNeed(use, is);
  }
}

void GreedyPropagation::neededLayouts(
    Value v, LayoutAttr from, const Move *move, Operation *skip,
    bool withNested, SmallVectorImpl<std::pair<unsigned, LayoutAttr>> &out) {
  ValueUses &entry = usesOf(v);
  Operation *moved = move ? move->op : nullptr;
  for (const Need &need : entry.needs) {
    if (need.nested && !withNested)
      continue;
    // The first use that needs it, other than the uses by the moved op
    // (which need what the move says) and by `skip`.
    for (unsigned rank : need.ranks) {
      Operation *owner = entry.uses[rank]->getOwner();
      if (owner == moved || owner == skip)
        continue;
      out.emplace_back(rank, need.layout);
      break;
    }
  }
  if (moved) {
    unsigned tensorIndex = 0;
    for (OpOperand &use : moved->getOpOperands()) {
      if (!isa<RankedTensorType>(use.get().getType()))
        continue;
      if (use.get() == v)
        out.emplace_back(useRank.find(&use)->second,
                         move->strategy->operandAttrs[tensorIndex]);
      ++tensorIndex;
    }
  }
  for (unsigned rank : entry.returns)
    out.emplace_back(
        rank, resultLayout(fn, entry.uses[rank]->getOperandNumber(), from));
  llvm::sort(out,
             [](const auto &a, const auto &b) { return a.first < b.first; });
}

double GreedyPropagation::valueCost(Value v, const Move *move) {
  // Asked once per value (indexUses): the rule interface is not free to
  // query, and this is the refinement's innermost cost.
  if (usesOf(v).shapeOnly)
    return 0;
  LayoutAttr from = attrWith(v, move);
  SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
  neededLayouts(v, from, move, /*skip=*/nullptr, /*withNested=*/true, needed);
  SmallVector<LayoutAttr, 8> layouts;
  for (auto [rank, to] : needed)
    layouts.push_back(to);
  return costs.reshardsCost(v.getType(), from, layouts);
}

double GreedyPropagation::totalCost() {
  double cost = 0;
  Block &body = fn.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (isa<RankedTensorType>(arg.getType()))
      cost += valueCost(arg, nullptr);
  for (Operation &op : body)
    for (Value r : op.getResults())
      if (isa<RankedTensorType>(r.getType()))
        cost += valueCost(r, nullptr);
  return cost;
}

SmallVector<Value> GreedyPropagation::affectedBy(Operation *op) {
  SmallVector<Value> affected;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()) && !llvm::is_contained(affected, v))
      affected.push_back(v);
  for (Value r : op->getResults())
    if (isa<RankedTensorType>(r.getType()))
      affected.push_back(r);
  return affected;
}

/// Appends the opaque pointers of `attrs` and a separator to `key`.
static void appendAttrs(SmallVectorImpl<uintptr_t> &key,
                        ArrayRef<LayoutAttr> attrs) {
  for (LayoutAttr a : attrs)
    key.push_back(reinterpret_cast<uintptr_t>(a.getAsOpaquePointer()));
  key.push_back(~uintptr_t(0));
}

unsigned GreedyPropagation::ruleId(const ShardingRule &rule) {
  std::vector<int64_t> code(rule.factorSizes.begin(), rule.factorSizes.end());
  code.push_back(-2);
  for (ShardingRule::FactorKind kind : rule.factorKinds)
    code.push_back(static_cast<int64_t>(kind));
  for (const auto *tensors : {&rule.operands, &rule.results}) {
    code.push_back(-3);
    for (const SmallVector<SmallVector<int64_t>> &dims : *tensors) {
      for (const SmallVector<int64_t> &factors : dims) {
        code.insert(code.end(), factors.begin(), factors.end());
        code.push_back(-4);
      }
      code.push_back(-5);
    }
  }
  return ruleIds.try_emplace(std::move(code), ruleIds.size()).first->second;
}

std::optional<ReduceOp> GreedyPropagation::reductionKind(Operation *op,
                                                         bool &identityInit) {
  OpFacts &f = facts[op];
  if (!f.askedReduction) {
    auto ruleOp = cast<ShardingRuleOpInterface>(op);
    f.reduction = ruleOp.getReductionKind();
    f.identityInit = f.reduction && ruleOp.hasIdentityInit();
    f.askedReduction = true;
  }
  identityInit = f.identityInit;
  return f.reduction;
}

bool GreedyPropagation::isLinearIn(Operation *op,
                                   const llvm::SmallBitVector &partial) {
  for (auto &[bits, linear] : facts[op].linear)
    if (bits == partial)
      return linear;
  bool linear = cast<ShardingRuleOpInterface>(op).isLinearIn(partial);
  facts[op].linear.emplace_back(partial, linear);
  return linear;
}

bool GreedyPropagation::opContextKey(Operation *op, const ShardingRule &rule,
                                     ArrayRef<LayoutAttr> operandAttrs,
                                     SmallVectorImpl<uintptr_t> &key) {
  key.push_back(
      reinterpret_cast<uintptr_t>(op->getName().getAsOpaquePointer()));
  key.push_back(facts[op].ruleId);
  for (Type t : op->getOperandTypes())
    key.push_back(reinterpret_cast<uintptr_t>(t.getAsOpaquePointer()));
  key.push_back(~uintptr_t(0));
  for (Type t : op->getResultTypes())
    key.push_back(reinterpret_cast<uintptr_t>(t.getAsOpaquePointer()));
  key.push_back(~uintptr_t(0));
  appendAttrs(key, operandAttrs);
  // What evaluate asks of the op's body.
  if (llvm::is_contained(rule.factorKinds,
                         ShardingRule::FactorKind::Reduction)) {
    bool identityInit;
    std::optional<ReduceOp> kind = reductionKind(op, identityInit);
    key.push_back(kind ? static_cast<uintptr_t>(*kind) + 1 : 0);
    key.push_back(identityInit);
  }
  // keptPartials asks isLinearIn of a subset of the operands that are
  // Partial of sum or avg only: all the answers it could get.
  SmallVector<unsigned, 4> partial;
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    if (!isa<RankedTensorType>(use.get().getType()))
      continue;
    const Layout &l = operandAttrs[tensorIndex++].getLayout();
    if (l.hasPartial() &&
        llvm::all_of(l.getPartials(), [](std::optional<ReduceOp> p) {
          return !p || *p == ReduceOp::Sum || *p == ReduceOp::Avg;
        }))
      partial.push_back(use.getOperandNumber());
  }
  if (partial.size() > kMaxKeyedPartials)
    return false;
  for (unsigned subset = 1; subset < (1u << partial.size()); ++subset) {
    llvm::SmallBitVector bits(op->getNumOperands());
    for (auto [i, operand] : llvm::enumerate(partial))
      if (subset >> i & 1)
        bits.set(operand);
    key.push_back(isLinearIn(op, bits));
  }
  return true;
}

bool GreedyPropagation::candidateKey(Operation *op,
                                     ArrayRef<LayoutAttr> operandAttrs,
                                     ArrayRef<SmallVector<LayoutAttr, 4>> needs,
                                     SmallVectorImpl<uintptr_t> &key) {
  if (!opContextKey(op, rules.find(op)->second, operandAttrs, key))
    return false;
  const Strategy &current = chosen(op);
  appendAttrs(key, current.operandAttrs);
  appendAttrs(key, current.resultAttrs);
  for (ArrayRef<LayoutAttr> n : needs)
    appendAttrs(key, n);
  return true;
}

Strategy GreedyPropagation::chooseInProgramOrder(Operation *op,
                                                 const ShardingRule &rule,
                                                 ArrayRef<Value> operands,
                                                 ArrayRef<Value> results) {
  // The choice also depends on what the reshards of the operands cost
  // (shape-only operands and layouts already needed are free) and on the
  // results' hints.
  SmallVector<LayoutAttr, 4> operandAttrs;
  for (Value v : operands)
    operandAttrs.push_back(currentAttr(v));
  SmallVector<uintptr_t, 32> key;
  if (!opContextKey(op, rule, operandAttrs, key))
    return chooseUncached(op, rule, operands, results);
  for (Value v : operands) {
    key.push_back(isRematerializable(v));
    auto it = available.find(v);
    appendAttrs(key, it == available.end() ? ArrayRef<LayoutAttr>()
                                           : ArrayRef<LayoutAttr>(it->second));
  }
  for (Value r : results)
    key.push_back(
        reinterpret_cast<uintptr_t>(hints.lookup(r).getAsOpaquePointer()));
  std::vector<uintptr_t> lookup(key.begin(), key.end());
  auto it = programOrderCache.find(lookup);
  if (it == programOrderCache.end()) {
    Strategy best = chooseUncached(op, rule, operands, results);
    if (best.valid) {
      attach(best);
      best.dropLayouts();
    }
    it = programOrderCache.emplace(std::move(lookup), std::move(best)).first;
  }
  return it->second;
}

SmallVector<Strategy, 4> GreedyPropagation::candidates(Operation *op) {
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  SmallVector<LayoutAttr, 4> operandAttrs;
  for (Value v : operands)
    operandAttrs.push_back(currentAttr(v));
  // Per tensor operand, then result: the distinct layouts other consumers
  // need it in, other than the one it has.
  SmallVector<SmallVector<LayoutAttr, 4>, 4> needs;
  auto addNeeds = [&](Value v) {
    SmallVector<LayoutAttr, 4> &seen = needs.emplace_back();
    LayoutAttr from = currentAttr(v);
    SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
    neededLayouts(v, from, /*move=*/nullptr, /*skip=*/op,
                  /*withNested=*/false, needed);
    for (auto [rank, need] : needed)
      if (need && need != from && !llvm::is_contained(seen, need))
        seen.push_back(need);
  };
  for (Value v : operands)
    addNeeds(v);
  for (Value r : results)
    addNeeds(r);
  SmallVector<uintptr_t, 32> key;
  if (!candidateKey(op, operandAttrs, needs, key))
    return computeCandidates(op, operands, results, operandAttrs, needs);
  std::vector<uintptr_t> lookup(key.begin(), key.end());
  auto it = candidateCache.find(lookup);
  if (it == candidateCache.end()) {
    SmallVector<Strategy, 4> computed =
        computeCandidates(op, operands, results, operandAttrs, needs);
    it = candidateCache.emplace(std::move(lookup), std::move(computed)).first;
  }
  return it->second;
}

SmallVector<Strategy, 4> GreedyPropagation::computeCandidates(
    Operation *op, ArrayRef<Value> operands, ArrayRef<Value> results,
    ArrayRef<LayoutAttr> operandAttrs,
    ArrayRef<SmallVector<LayoutAttr, 4>> needs) {
  const ShardingRule &rule = rules.find(op)->second;
  const Strategy &current = chosen(op);
  SmallVector<Assignment> views;
  bool anyPartial = false;
  for (auto [i, a] : llvm::enumerate(operandAttrs)) {
    const Layout &l = a.getLayout();
    anyPartial |= l.hasPartial();
    views.push_back(viewThroughRule(rule, rule.operands[i], l, meshShape));
  }
  SmallVector<Assignment> seeds;
  auto addSeed = [&](Assignment a) {
    if (!llvm::is_contained(seeds, a))
      seeds.push_back(std::move(a));
  };
  addSeed(Assignment(rule.factorSizes.size()));
  for (const Assignment &view : views)
    addSeed(view);
  for (auto [i, n] : llvm::enumerate(needs)) {
    ArrayRef<SmallVector<int64_t>> dims =
        i < operands.size() ? rule.operands[i]
                            : rule.results[i - operands.size()];
    for (LayoutAttr need : n)
      addSeed(viewThroughRule(rule, dims, need.getLayout(), meshShape));
  }
  // Each seed alone and merged with the operands' layouts.
  SmallVector<Assignment> assignments;
  for (const Assignment &seed : seeds) {
    Assignment merged = seed;
    for (const Assignment &view : views)
      mergeInto(merged, view);
    for (Assignment *a : {const_cast<Assignment *>(&seed), &merged})
      if (!llvm::is_contained(assignments, *a))
        assignments.push_back(*a);
  }
  SmallVector<Strategy, 4> out;
  for (const Assignment &a : assignments)
    for (bool keep : {true, false}) {
      if (!keep && !anyPartial)
        break;
      Strategy s = evaluate(op, rule, results, a, keep,
                            /*priced=*/false);
      if (!s.valid)
        continue;
      attach(s);
      s.dropLayouts();
      if (!s.sameLayouts(current) &&
          llvm::none_of(out, [&](const Strategy &o) {
            return o.sameLayouts(s);
          }))
        out.push_back(std::move(s));
    }
  return out;
}

void GreedyPropagation::change(Operation *op, Strategy s, Trial &trial) {
  for (Value v : affectedBy(op))
    if (trial.before.try_emplace(v, 0).second) {
      trial.before[v] = valueCost(v, nullptr);
      trial.touched.push_back(v);
    }
  Strategy &current = chosen(op);
  trial.workDelta += work(op, s) - work(op, current);
  moveNeeds(op, current, s);
  trial.undo.emplace_back(op, std::move(current));
  current = std::move(s);
}

double GreedyPropagation::costDelta(Trial &trial) {
  double delta = 0;
  for (Value v : trial.touched)
    delta += valueCost(v, nullptr) - trial.before[v];
  return delta;
}

void GreedyPropagation::revert(Trial &trial) {
  for (auto &[op, s] : llvm::reverse(trial.undo)) {
    Strategy &current = chosen(op);
    moveNeeds(op, current, s);
    current = std::move(s);
  }
  trial.undo.clear();
}

/// The ops a cascade visits next, in program order, each once while it
/// waits. The users of a value are added as one sorted run that is read
/// lazily, so adding them does not depend on how many there are.
class CascadeQueue {
public:
  explicit CascadeQueue(ArrayRef<Operation *> movable) : movable(movable) {}

  bool empty() const { return heads.empty(); }

  /// Adds the ops at `positions` (sorted) but the one at `skip`.
  void addRun(ArrayRef<unsigned> positions, unsigned skip) {
    runs.push_back(Run{positions, 0, skip});
    advance(runs.size() - 1);
  }

  /// Removes and returns the first op.
  Operation *pop() {
    unsigned first = heads.begin()->first;
    // Every run waiting at this op moves on: the op leaves the queue.
    while (!heads.empty() && heads.begin()->first == first) {
      unsigned run = heads.begin()->second;
      heads.erase(heads.begin());
      ++runs[run].next;
      advance(run);
    }
    return movable[first];
  }

private:
  struct Run {
    ArrayRef<unsigned> positions;
    size_t next;
    unsigned skip;
  };
  void advance(unsigned run) {
    Run &r = runs[run];
    if (r.next < r.positions.size() && r.positions[r.next] == r.skip)
      ++r.next;
    if (r.next < r.positions.size())
      heads.insert({r.positions[r.next], run});
  }

  ArrayRef<Operation *> movable;
  SmallVector<Run> runs;
  /// Per run its next position.
  std::set<std::pair<unsigned, unsigned>> heads;
};

bool GreedyPropagation::tryCascade(Operation *op, const Strategy &s, Trial &trial) {
  CascadeQueue queue(movable);
  auto enqueueNeighbours = [&](Operation *changed, const Strategy &old) {
    auto enqueueUsers = [&](Value v) {
      ArrayRef<unsigned> users = usesOf(v).movableUsers;
      if (users.size() > kFanOutLimit + 1)
        return;
      queue.addRun(users, position.find(changed)->second);
    };
    const Strategy &now = chosen(changed);
    for (auto [r, was, is] : llvm::zip(tensorValues(changed->getResults()),
                                       old.resultAttrs, now.resultAttrs))
      if (was != is)
        enqueueUsers(r);
    for (auto [v, was, is] : llvm::zip(tensorValues(changed->getOperands()),
                                       old.operandAttrs, now.operandAttrs))
      if (was != is)
        enqueueUsers(v);
  };
  Strategy old = chosen(op);
  change(op, s, trial);
  enqueueNeighbours(op, old);
  unsigned visited = 0;
  while (!queue.empty() && visited++ < kCascadeLimit) {
    Operation *user = queue.pop();
    SmallVector<Value> operands = tensorValues(user->getOperands());
    SmallVector<Value> affected = affectedBy(user);
    // Locally cheapest; ties to fewer pending Partial results (they need
    // reductions further on), then to taking the operands as they are,
    // then to less work.
    auto key = [&](const Strategy &c, const Move *move) {
      double cost = 0;
      for (Value v : affected)
        cost += valueCost(v, move);
      cost += computeUs(user, c);
      int64_t partials = 0, mismatches = 0;
      for (LayoutAttr l : c.resultAttrs)
        partials += l.getLayout().hasPartial();
      for (auto [v, l] : llvm::zip(operands, c.operandAttrs))
        mismatches += currentAttr(v) != l;
      return std::make_tuple(cost, partials, mismatches, work(user, c));
    };
    const Strategy &current = chosen(user);
    auto bestKey = key(current, nullptr);
    std::optional<Strategy> best;
    for (Strategy &c : candidates(user)) {
      Move move{user, &c};
      auto k = key(c, &move);
      constexpr double eps = kTieUs;
      bool better =
          std::get<0>(k) < std::get<0>(bestKey) - eps ||
          (std::get<0>(k) <= std::get<0>(bestKey) + eps &&
           std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k)) <
               std::make_tuple(std::get<1>(bestKey), std::get<2>(bestKey),
                               std::get<3>(bestKey)));
      if (better) {
        bestKey = k;
        best = std::move(c);
      }
    }
    if (!best)
      continue;
    Strategy was = current;
    change(user, std::move(*best), trial);
    enqueueNeighbours(user, was);
  }
  double delta =
      costDelta(trial) + trial.workDelta * costs.getUsPerIteration();
  if (delta < -kTieUs || (delta <= kTieUs && trial.workDelta < -0.5)) {
    LLVM_DEBUG(llvm::dbgs() << "  cascade from " << op->getName() << " at "
                            << op->getLoc() << " kept: " << trial.undo.size()
                            << " op(s), " << delta << " us\n");
    return true;
  }
  revert(trial);
  return false;
}

void GreedyPropagation::markNeighbours(Operation *op) {
  for (Value v : op->getOperands()) {
    if (Operation *def = v.getDefiningOp(); def && position.count(def))
      dirty.insert(def);
    stamped[v] = ++clock;
  }
  for (Value r : op->getResults())
    stamped[r] = ++clock;
}

bool GreedyPropagation::isDirty(Operation *op) {
  if (dirty.contains(op))
    return true;
  auto it = cleared.find(op);
  uint64_t since = it == cleared.end() ? 0 : it->second;
  return llvm::any_of(op->getOperands(), [&](Value v) {
    auto s = stamped.find(v);
    return s != stamped.end() && s->second > since;
  });
}

bool GreedyPropagation::clearDirty(Operation *op) {
  if (!isDirty(op))
    return false;
  dirty.erase(op);
  cleared[op] = clock;
  return true;
}

int64_t GreedyPropagation::refine() {
  int64_t changes = 0;
  dirty.insert(movable.begin(), movable.end());
  auto visitOp = [&](Operation *op) -> bool {
    if (!clearDirty(op))
      return false;
    SmallVector<Value> affected = affectedBy(op);
    Strategy &current = chosen(op);
    double before = computeUs(op, current);
    for (Value v : affected)
      before += valueCost(v, nullptr);
    SmallVector<Strategy, 4> options = candidates(op);
    std::optional<unsigned> best;
    double bestCost = before, bestWork = work(op, current);
    for (auto [i, s] : llvm::enumerate(options)) {
      Move move{op, &s};
      double after = computeUs(op, s);
      for (Value v : affected)
        after += valueCost(v, &move);
      double w = work(op, s);
      constexpr double eps = kTieUs;
      if (after < bestCost - eps ||
          (after <= bestCost + eps && w < bestWork - 0.5)) {
        bestCost = after;
        bestWork = w;
        best = i;
      }
    }
    Trial trial;
    if (best) {
      LLVM_DEBUG(llvm::dbgs() << "  change " << op->getName() << " at "
                              << op->getLoc() << " to "
                              << describe(options[*best]) << ": "
                              << before << " -> " << bestCost << " us\n");
      change(op, std::move(options[*best]), trial);
    } else {
      // No single change helps: try the ones that move a layout together
      // with the neighbours they disturb.
      bool kept = false;
      for (const Strategy &s : options) {
        Trial attempt;
        if (tryCascade(op, s, attempt)) {
          trial = std::move(attempt);
          kept = true;
          break;
        }
      }
      if (!kept)
        return false;
    }
    for (auto &[changed, old] : trial.undo)
      markNeighbours(changed);
    return true;
  };
  auto anyDirty = [&] {
    return llvm::any_of(movable, [&](Operation *op) { return isDirty(op); });
  };
  for (int sweep = 0; sweep < 32 && anyDirty(); ++sweep) {
    int64_t changed = 0;
    if (sweep % 2 == 0) {
      for (Operation *op : llvm::reverse(movable))
        changed += visitOp(op);
    } else {
      for (Operation *op : movable)
        changed += visitOp(op);
    }
    LLVM_DEBUG(llvm::dbgs() << "sweep " << sweep
                            << (sweep % 2 == 0 ? " (backward)" : " (forward)")
                            << ": " << changed << " change(s)\n");
    changes += changed;
  }
  return changes;
}

void GreedyPropagation::recordAlternativeCosts() {
  MLIRContext *ctx = fn.getContext();
  auto layouts = [&](ArrayRef<LayoutAttr> attrs) {
    return ArrayAttr::get(ctx, SmallVector<Attribute>(attrs.begin(),
                                                      attrs.end()));
  };
  for (Operation *op : movable) {
    SmallVector<Value> affected = affectedBy(op);
    const Strategy &current = chosen(op);
    double now = computeUs(op, current);
    for (Value v : affected)
      now += valueCost(v, nullptr);
    SmallVector<std::pair<double, Attribute>> priced;
    for (Strategy &s : candidates(op)) {
      Move move{op, &s};
      double after = computeUs(op, s);
      for (Value v : affected)
        after += valueCost(v, &move);
      NamedAttribute fields[] = {
          NamedAttribute(StringAttr::get(ctx, "cost"),
                         FloatAttr::get(Float64Type::get(ctx), after - now)),
          NamedAttribute(StringAttr::get(ctx, "operands"),
                         layouts(s.operandAttrs)),
          NamedAttribute(StringAttr::get(ctx, "results"),
                         layouts(s.resultAttrs))};
      priced.emplace_back(after - now, DictionaryAttr::get(ctx, fields));
    }
    llvm::stable_sort(priced, [](const auto &a, const auto &b) {
      return a.first < b.first;
    });
    if (priced.size() > kMaxAlternatives)
      priced.resize(kMaxAlternatives);
    SmallVector<Attribute> alternatives;
    for (auto &[cost, attr] : priced)
      alternatives.push_back(attr);
    op->setAttr("shardx.alternatives", ArrayAttr::get(ctx, alternatives));
  }
}

void GreedyPropagation::computeHints() {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (OpOperand &o : ret->getOpOperands())
    if (auto declared = fn.getResultAttrOfType<LayoutAttr>(
            o.getOperandNumber(), ShardXDialect::getLayoutAttrName()))
      hints.try_emplace(o.get(), declared);
  for (Operation &op : llvm::reverse(body)) {
    if (!isa<ShardingRuleOpInterface>(&op))
      continue;
    std::optional<ShardingRule> &rule = hintRules[&op];
    if (FailureOr<ShardingRule> r = ruleOf(&op); succeeded(r))
      rule = std::move(*r);
    SmallVector<Value> operands = tensorValues(op.getOperands());
    SmallVector<Value> results = tensorValues(op.getResults());
    if (!rule || rule->operands.size() != operands.size() ||
        rule->results.size() != results.size())
      continue;
    Assignment a(rule->factorSizes.size());
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->results[i],
                                     it->second.getLayout(), meshShape));
    }
    for (auto [i, v] : llvm::enumerate(operands)) {
      if (isUserLayout(v))
        mergeInto(a, viewThroughRule(*rule, rule->operands[i], layoutOf(v),
                                     meshShape));
      else if (auto it = hints.find(v); it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->operands[i],
                                     it->second.getLayout(), meshShape));
    }
    for (auto [f, kind] : llvm::enumerate(rule->factorKinds))
      if (kind != ShardingRule::FactorKind::Parallel)
        a[f].reset();
    for (auto [i, v] : llvm::enumerate(operands)) {
      if (isUserLayout(v) || hints.count(v))
        continue;
      if (std::optional<Layout> l =
              project(*rule, rule->operands[i], a, meshShape, meshRank)) {
        auto type = cast<RankedTensorType>(v.getType());
        if (l->verifyForShape(meshShape,
                              std::vector<int64_t>(type.getShape().begin(),
                                                   type.getShape().end()))
                .empty())
          hints.try_emplace(v, attr(*l));
      }
    }
  }
}

LogicalResult GreedyPropagation::run(func::FuncOp fn, ShardingState &state) {
  this->fn = fn;
  this->state = &state;
  // Arguments: declared layouts, replicated otherwise (recorded so that the
  // calling convention is explicit).
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (isa<RankedTensorType>(fn.getArgument(i).getType()) &&
        !fn.getArgAttr(i, ShardXDialect::getLayoutAttrName()))
      fn.setArgAttr(i, ShardXDialect::getLayoutAttrName(),
                    attr(Layout(meshRank)));
  // The per-op maps hold large values (rules): sized once, so that they
  // are not rehashed and copied while they fill.
  size_t numOps = fn.getBody().front().getOperations().size();
  hintRules.reserve(numOps);
  rules.reserve(numOps);
  position.reserve(numOps);
  facts.reserve(numOps);
  if (!userLayoutsOnly)
    computeHints();
  for (Operation &op : fn.getBody().front())
    if (failed(visit(&op)))
      return failure();
  indexUses();
  programOrderCost = printCost ? totalCost() : 0;
  changes = refineGraph && !userLayoutsOnly ? refine() : 0;
  if (recordAlternatives && !userLayoutsOnly)
    recordAlternativeCosts();
  if (printCost)
    refinedCost = totalCost();
  return success();
}

void GreedyPropagation::finish(func::FuncOp fn) {
  if (printCost)
    fn.emitRemark() << llvm::formatv(
        "reshard cost {0:F3} us in program order, {1:F3} us after {2} "
        "whole-graph change(s)",
        programOrderCost, refinedCost, changes);
}

} // namespace

PropagationStrategy::~PropagationStrategy() = default;

std::unique_ptr<PropagationStrategy> mlir::shardx::createGreedyPropagationStrategy(
    MeshOp mesh, CostModel &costs, const PropagationOptions &options,
    llvm::StringSet<> &warned) {
  return std::make_unique<GreedyPropagation>(mesh, costs, options, warned);
}
