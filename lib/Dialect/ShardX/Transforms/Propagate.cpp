//===- Propagate.cpp - Layout propagation and reshard insertion -----------===//
//
// Part of ShardX.
//
// shardx-propagate chooses a sharding strategy for every op by cost (see
// Passes.td); shardx-insert-reshards materializes the reshards the chosen
// strategies need; shardx-verify-layouts checks the result.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"
#include "ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"
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
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <set>
#include <tuple>
#include <limits>

namespace mlir::shardx {
#define GEN_PASS_DEF_PROPAGATEPASS
#define GEN_PASS_DEF_INSERTRESHARDSPASS
#define GEN_PASS_DEF_VERIFYLAYOUTSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::DimSharding;
using ::shardx::Layout;
using ::shardx::ReduceOp;
using ::shardx::Split;

//===----------------------------------------------------------------------===//
// Layout bookkeeping
//===----------------------------------------------------------------------===//

LayoutAttr mlir::shardx::getRecordedLayout(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!fn || arg.getOwner() != &fn.getBody().front())
      return nullptr;
    return fn.getArgAttrOfType<LayoutAttr>(arg.getArgNumber(),
                                           ShardXDialect::getLayoutAttrName());
  }
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  if (auto annotate = dyn_cast<AnnotateOp>(op))
    return annotate.getLayout();
  if (auto redistribute = dyn_cast<RedistributeOp>(op))
    return redistribute.getTarget();
  auto layouts =
      op->getAttrOfType<ArrayAttr>(ShardXDialect::getLayoutsAttrName());
  if (!layouts)
    return nullptr;
  unsigned index = 0;
  for (OpResult r : op->getResults()) {
    if (r == result)
      return index < layouts.size() ? dyn_cast<LayoutAttr>(layouts[index])
                                    : nullptr;
    if (isa<TensorType>(r.getType()))
      ++index;
  }
  return nullptr;
}

void mlir::shardx::setResultLayout(OpResult value, LayoutAttr layout) {
  Operation *op = value.getOwner();
  SmallVector<Attribute> entries;
  auto old = op->getAttrOfType<ArrayAttr>(ShardXDialect::getLayoutsAttrName());
  unsigned index = 0;
  for (OpResult r : op->getResults()) {
    if (!isa<TensorType>(r.getType()))
      continue;
    if (r == value)
      entries.push_back(layout);
    else if (old && index < old.size())
      entries.push_back(old[index]);
    else
      entries.push_back(layout); // placeholder, overwritten by the caller
    ++index;
  }
  op->setAttr(ShardXDialect::getLayoutsAttrName(),
              ArrayAttr::get(op->getContext(), entries));
}

FailureOr<MeshOp>
mlir::shardx::getFunctionMesh(func::FuncOp fn,
                              SymbolTableCollection &symbolTable) {
  FlatSymbolRefAttr mesh;
  Operation *first = nullptr;
  auto visit = [&](LayoutAttr layout, Operation *where) -> LogicalResult {
    if (!layout)
      return success();
    if (!mesh) {
      mesh = layout.getMesh();
      first = where;
      return success();
    }
    if (layout.getMesh() != mesh) {
      InFlightDiagnostic diag = where->emitError()
                                << "mesh mismatch: layout on @"
                                << layout.getMesh().getValue()
                                << " where the function uses @"
                                << mesh.getValue();
      diag.attachNote(first->getLoc()) << "first layout here";
      return failure();
    }
    return success();
  };
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (failed(visit(fn.getArgAttrOfType<LayoutAttr>(
                         i, ShardXDialect::getLayoutAttrName()),
                     fn)))
      return failure();
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
    if (failed(visit(fn.getResultAttrOfType<LayoutAttr>(
                         i, ShardXDialect::getLayoutAttrName()),
                     fn)))
      return failure();
  WalkResult walk = fn.walk([&](Operation *op) {
    LayoutAttr layout;
    if (auto a = dyn_cast<AnnotateOp>(op))
      layout = a.getLayout();
    else if (auto r = dyn_cast<RedistributeOp>(op))
      layout = r.getTarget();
    return failed(visit(layout, op)) ? WalkResult::interrupt()
                                     : WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (!mesh)
    return MeshOp();
  MeshOp meshOp = lookupMesh(fn, mesh, &symbolTable);
  if (!meshOp) {
    fn.emitError() << "unknown mesh @" << mesh.getValue();
    return failure();
  }
  return meshOp;
}

std::optional<EmbeddingLookup>
mlir::shardx::matchEmbeddingLookup(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1 || generic->getNumResults() != 1 ||
      generic.getNumReductionLoops() != 0)
    return std::nullopt;
  Block *body = generic.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  auto extract = yield.getOperand(0).getDefiningOp<tensor::ExtractOp>();
  if (!extract || extract->getParentOp() != op ||
      extract.getIndices().size() != 2)
    return std::nullopt;
  Value table = extract.getTensor();
  if (op->isAncestor(table.getParentRegion()->getParentOp()))
    return std::nullopt;
  auto cast = extract.getIndices()[0].getDefiningOp<arith::IndexCastOp>();
  auto col = extract.getIndices()[1].getDefiningOp<linalg::IndexOp>();
  unsigned loops = generic.getNumLoops();
  if (!cast || cast.getIn() != body->getArgument(0) || !col ||
      col.getDim() != loops - 1)
    return std::nullopt;
  AffineMap outMap = generic.getIndexingMapsArray()[1];
  if (!outMap.isIdentity())
    return std::nullopt;
  return EmbeddingLookup{table, extract};
}

LogicalResult mlir::shardx::forEachShardedFunction(
    ModuleOp module, function_ref<LogicalResult(func::FuncOp, MeshOp)> fn) {
  SymbolTableCollection symbolTable;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isExternal())
      continue;
    FailureOr<MeshOp> mesh = getFunctionMesh(f, symbolTable);
    if (failed(mesh))
      return failure();
    if (*mesh && failed(fn(f, *mesh)))
      return failure();
  }
  return success();
}

namespace {

//===----------------------------------------------------------------------===//
// Strategies in factors
//===----------------------------------------------------------------------===//

/// The splits of one factor (strides relative to the factor), or none.
using Assignment = SmallVector<std::optional<DimSharding>>;

uint64_t axesOf(const DimSharding &d) {
  uint64_t mask = 0;
  for (const Split &s : d.splits)
    mask |= uint64_t(1) << s.axis;
  return mask;
}

int64_t splitCount(const DimSharding &d, ArrayRef<int64_t> meshShape) {
  int64_t n = 1;
  for (const Split &s : d.splits)
    n *= meshShape[s.axis];
  return n;
}

/// The products of the sizes of `factors` before each of them (and of all of
/// them, last), or nullopt when one is dynamic.
static std::optional<SmallVector<int64_t>>
factorPrefixes(const ShardingRule &rule, ArrayRef<int64_t> factors) {
  SmallVector<int64_t> prefix = {1};
  for (int64_t f : factors) {
    if (rule.factorSizes[f] == ShapedType::kDynamic)
      return std::nullopt;
    prefix.push_back(prefix.back() * rule.factorSizes[f]);
  }
  return prefix;
}

/// How one operand's layout looks in the rule's factors: per factor the
/// splits of the dim it forms. A dim made of several factors is read as
/// mixed-radix digits (Layout.h): each split sits at a digit position (the
/// blocks of the dim major to it) that falls inside exactly one factor,
/// where it becomes a split of that factor with the stride it has there. A
/// dim whose splits do not each fall inside one factor (an uneven split of
/// a merged dim, a split straddling two factors) is not seen at all: the
/// strategy then needs it resharded.
Assignment viewThroughRule(const ShardingRule &rule,
                           ArrayRef<SmallVector<int64_t>> dims,
                           const Layout &layout, ArrayRef<int64_t> meshShape) {
  Assignment view(rule.factorSizes.size());
  for (const DimSharding &ds : layout.getDims()) {
    if (ds.dim >= static_cast<int64_t>(dims.size()))
      continue;
    ArrayRef<int64_t> factors = dims[ds.dim];
    if (factors.empty())
      continue;
    if (factors.size() == 1) {
      view[factors[0]] = ds;
      continue;
    }
    std::optional<SmallVector<int64_t>> prefix = factorPrefixes(rule, factors);
    if (!ds.sizes.empty() || !prefix)
      continue;
    SmallVector<std::optional<DimSharding>> parts(factors.size());
    SmallVector<int64_t> splitIn(factors.size(), 1);
    int64_t before = 1; // axis sizes of the earlier splits
    bool exact = true;
    for (const Split &sp : ds.splits) {
      int64_t n = meshShape[sp.axis];
      int64_t blocks = sp.stride * before; // of the dim, major to the split
      std::optional<size_t> at;
      for (size_t j = 0; j < factors.size() && !at; ++j)
        if (blocks % (*prefix)[j] == 0 && (*prefix)[j + 1] % (blocks * n) == 0)
          at = j;
      if (!at || (blocks / (*prefix)[*at]) % splitIn[*at] != 0) {
        exact = false;
        break;
      }
      if (!parts[*at])
        parts[*at] = DimSharding{ds.dim, {}, {}};
      parts[*at]->splits.push_back(
          Split{sp.axis, blocks / (*prefix)[*at] / splitIn[*at]});
      splitIn[*at] *= n;
      before *= n;
    }
    if (!exact)
      continue;
    for (auto [j, part] : llvm::enumerate(parts))
      if (part)
        view[factors[j]] = *part;
  }
  return view;
}

/// The layout a tensor with factor `dims` has under `assignment`, or
/// nullopt when some dim cannot express it (a merged dim whose sharded
/// factors do not split evenly).
std::optional<Layout> project(const ShardingRule &rule,
                              ArrayRef<SmallVector<int64_t>> dims,
                              const Assignment &assignment,
                              ArrayRef<int64_t> meshShape, int64_t meshRank) {
  Layout layout(meshRank);
  for (auto [d, factors] : llvm::enumerate(dims)) {
    if (factors.size() == 1) {
      if (const auto &fs = assignment[factors[0]]) {
        for (const Split &s : fs->splits)
          layout.addSplit(d, s);
        if (!fs->sizes.empty())
          layout.setSizes(d, fs->sizes);
      }
      continue;
    }
    if (llvm::none_of(factors, [&](int64_t f) { return assignment[f]; }))
      continue;
    std::optional<SmallVector<int64_t>> prefix = factorPrefixes(rule, factors);
    if (!prefix)
      return std::nullopt;
    int64_t before = 1; // axis sizes of the splits of earlier factors
    for (auto [j, f] : llvm::enumerate(factors)) {
      const auto &fs = assignment[f];
      if (!fs)
        continue;
      if (!fs->sizes.empty() || (*prefix)[j] % before != 0)
        return std::nullopt;
      int64_t inFactor = 1;
      for (const Split &s : fs->splits) {
        int64_t n = meshShape[s.axis];
        // The split's digit must lie inside the factor, evenly.
        if (rule.factorSizes[f] % (s.stride * inFactor * n) != 0)
          return std::nullopt;
        layout.addSplit(d, Split{s.axis, (*prefix)[j] / before * s.stride});
        inFactor *= n;
      }
      before *= inFactor;
    }
  }
  return layout;
}

/// The combiner of a linalg op's reduction, when its yield is
/// `combine(out, x)`.
std::optional<ReduceOp> getCombiner(linalg::LinalgOp op) {
  if (op->getNumResults() != 1 || op.getNumDpsInits() != 1)
    return std::nullopt;
  Block *body = op.getBlock();
  auto yield = dyn_cast<linalg::YieldOp>(body->getTerminator());
  if (!yield || yield.getNumOperands() != 1)
    return std::nullopt;
  Operation *def = yield.getOperand(0).getDefiningOp();
  if (!def || def->getNumOperands() != 2)
    return std::nullopt;
  Value out = body->getArguments().back();
  if (def->getOperand(0) != out && def->getOperand(1) != out)
    return std::nullopt;
  if (isa<arith::AddFOp, arith::AddIOp>(def))
    return ReduceOp::Sum;
  if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MaxSIOp>(def))
    return ReduceOp::Max;
  if (isa<arith::MinimumFOp, arith::MinNumFOp, arith::MinSIOp>(def))
    return ReduceOp::Min;
  if (isa<arith::MulFOp, arith::MulIOp>(def))
    return ReduceOp::Prod;
  return std::nullopt;
}

/// Whether `value` is a linalg.fill (of anything) with the identity of
/// `combiner`.
bool isIdentityFill(Value value, ReduceOp combiner) {
  auto fill = value.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  Value scalar = fill.getInputs()[0];
  FloatAttr f;
  IntegerAttr i;
  if (matchPattern(scalar, m_Constant(&f))) {
    double v = f.getValueAsDouble();
    switch (combiner) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return v == 0.0;
    case ReduceOp::Prod:
      return v == 1.0;
    case ReduceOp::Max:
      return std::isinf(v) && v < 0;
    case ReduceOp::Min:
      return std::isinf(v) && v > 0;
    }
  }
  if (matchPattern(scalar, m_Constant(&i))) {
    const APInt &v = i.getValue();
    switch (combiner) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return v.isZero();
    case ReduceOp::Prod:
      return v.isOne();
    case ReduceOp::Max:
      return v.isMinSignedValue();
    case ReduceOp::Min:
      return v.isMaxSignedValue();
    }
  }
  return false;
}

bool isZeroConstant(Value v) {
  FloatAttr f;
  IntegerAttr i;
  if (matchPattern(v, m_Constant(&f)))
    return f.getValueAsDouble() == 0.0;
  if (matchPattern(v, m_Constant(&i)))
    return i.getValue().isZero();
  return false;
}

/// Linearity of scalar code in a set of "partial" values: Linear (a linear
/// function of them), Constant (independent of them) or Other.
enum class Lin { Constant, Linear, Other };

Lin linearity(Value v, DenseMap<Value, Lin> &memo) {
  auto it = memo.find(v);
  if (it != memo.end())
    return it->second;
  Lin result = Lin::Constant;
  Operation *def = v.getDefiningOp();
  if (def) {
    SmallVector<Lin> in;
    for (Value o : def->getOperands())
      in.push_back(linearity(o, memo));
    auto all = [&](Lin l) { return llvm::all_of(in, [&](Lin x) { return x == l; }); };
    bool anyOther = llvm::is_contained(in, Lin::Other);
    bool anyLinear = llvm::is_contained(in, Lin::Linear);
    if (anyOther)
      result = Lin::Other;
    else if (!anyLinear)
      result = Lin::Constant;
    else if (isa<arith::AddFOp, arith::SubFOp, arith::AddIOp, arith::SubIOp>(def))
      result = all(Lin::Linear) ? Lin::Linear : Lin::Other;
    else if (isa<arith::MulFOp, arith::MulIOp>(def))
      result = (in[0] == Lin::Linear) != (in[1] == Lin::Linear) ? Lin::Linear
                                                                 : Lin::Other;
    else if (isa<arith::DivFOp>(def))
      result = in[0] == Lin::Linear && in[1] == Lin::Constant ? Lin::Linear
                                                               : Lin::Other;
    else if (isa<arith::NegFOp, arith::ExtFOp, arith::TruncFOp>(def))
      result = Lin::Linear;
    else if (auto sel = dyn_cast<arith::SelectOp>(def)) {
      Lin t = in[1], f = in[2];
      bool tOk = t == Lin::Linear || isZeroConstant(sel.getTrueValue());
      bool fOk = f == Lin::Linear || isZeroConstant(sel.getFalseValue());
      result = in[0] == Lin::Constant && tOk && fOk ? Lin::Linear : Lin::Other;
    } else
      result = Lin::Other;
  }
  memo[v] = result;
  return result;
}

/// Whether the op computes its results as a linear function of the tensor
/// operands in `partial` (operand indices), treating its init as an
/// accumulator.
bool isLinearIn(Operation *op, const llvm::SmallBitVector &partial) {
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(op))
    return true;
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
    DenseMap<Value, Lin> memo;
    Block *body = linalgOp.getBlock();
    for (OpOperand &operand : op->getOpOperands()) {
      if (!isa<RankedTensorType>(operand.get().getType()))
        continue;
      BlockArgument arg = linalgOp.getMatchingBlockArgument(&operand);
      bool isInit = linalgOp.isDpsInit(&operand);
      memo[arg] = partial.test(operand.getOperandNumber()) || isInit
                      ? Lin::Linear
                      : Lin::Constant;
    }
    // Scalar inputs are constants.
    for (BlockArgument arg : body->getArguments())
      memo.try_emplace(arg, Lin::Constant);
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    for (Value v : yield.getOperands())
      if (linearity(v, memo) != Lin::Linear)
        return false;
    return true;
  }
  if (op->getNumRegions() == 0 && op->getNumResults() == 1 &&
      op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    DenseMap<Value, Lin> memo;
    SmallVector<Lin> in;
    for (OpOperand &operand : op->getOpOperands())
      in.push_back(partial.test(operand.getOperandNumber()) ? Lin::Linear
                                                            : Lin::Constant);
    if (isa<arith::AddFOp, arith::SubFOp>(op))
      return in[0] == Lin::Linear && in[1] == Lin::Linear;
    if (isa<arith::MulFOp>(op))
      return (in[0] == Lin::Linear) != (in[1] == Lin::Linear);
    if (isa<arith::DivFOp>(op))
      return in[0] == Lin::Linear && in[1] == Lin::Constant;
    if (isa<arith::NegFOp>(op))
      return true;
  }
  return false;
}

/// Values that are only a shape or a splat: rematerialized in any layout.
bool isRematerializable(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (isa<tensor::EmptyOp>(def))
    return true;
  if (auto fill = dyn_cast<linalg::FillOp>(def))
    return fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() != nullptr;
  if (auto cst = dyn_cast<arith::ConstantOp>(def))
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue()))
      return dense.isSplat();
  return false;
}

/// The ranked-tensor values among `values` (an op's tensor operands or
/// results, in the order rules count them).
SmallVector<Value> tensorValues(ValueRange values) {
  SmallVector<Value> tensors;
  for (Value v : values)
    if (isa<RankedTensorType>(v.getType()))
      tensors.push_back(v);
  return tensors;
}

struct Strategy {
  bool valid = false;
  SmallVector<Layout> operandLayouts; // per tensor operand
  SmallVector<Layout> resultLayouts;  // per tensor result
  double cost = 0;
  int64_t shardedWork = 1; // ranks sharing the op's iteration space
  /// The same layouts as attributes (uniqued: compared by pointer).
  SmallVector<LayoutAttr> operandAttrs, resultAttrs;

  bool sameLayouts(const Strategy &o) const {
    return operandAttrs == o.operandAttrs && resultAttrs == o.resultAttrs;
  }
};

/// Adds to `a` every factor sharding of `view` whose factor is free and
/// whose axes are unused.
void mergeInto(Assignment &a, const Assignment &view) {
  uint64_t used = 0;
  for (auto &f : a)
    if (f)
      used |= axesOf(*f);
  for (auto [f, sharding] : llvm::enumerate(view)) {
    if (!sharding || a[f] || (axesOf(*sharding) & used))
      continue;
    a[f] = sharding;
    used |= axesOf(*sharding);
  }
}

/// The position of `use` among its owner's tensor operands.
static unsigned tensorOperandIndex(OpOperand &use) {
  unsigned n = 0;
  for (OpOperand &o : use.getOwner()->getOpOperands()) {
    if (&o == &use)
      break;
    if (isa<RankedTensorType>(o.get().getType()))
      ++n;
  }
  return n;
}

/// The layout `use` needs, from its owner's `shardx.operand_layouts` (one
/// per tensor operand).
LayoutAttr requiredLayout(OpOperand &use) {
  auto layouts = use.getOwner()->getAttrOfType<ArrayAttr>(
      ShardXDialect::getOperandLayoutsAttrName());
  unsigned index = tensorOperandIndex(use);
  if (!layouts || index >= layouts.size())
    return nullptr;
  return dyn_cast<LayoutAttr>(layouts[index]);
}

/// The layout function result `i` ends in when its value is in `current`:
/// the declared one, else `current` with pending Partials reduced.
LayoutAttr resultLayout(func::FuncOp fn, unsigned i, LayoutAttr current) {
  if (auto declared = fn.getResultAttrOfType<LayoutAttr>(
          i, ShardXDialect::getLayoutAttrName()))
    return declared;
  if (!current.getLayout().hasPartial())
    return current;
  Layout l = current.getLayout();
  for (int64_t axis = 0, e = l.getPartials().size(); axis < e; ++axis)
    l.setPartial(axis, std::nullopt);
  return LayoutAttr::get(current.getMesh(), l);
}

bool isUserLayout(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return getRecordedLayout(v) != nullptr;
  return v.getDefiningOp<AnnotateOp>() != nullptr;
}

class Propagator {
public:
  Propagator(func::FuncOp fn, MeshOp mesh, ::shardx::MeshSpec spec,
             bool userLayoutsOnly, bool refineGraph, bool printCost,
             double computeRate, llvm::StringSet<> &warned)
      : fn(fn), mesh(mesh), planner(std::move(spec)),
        meshShape(mesh.getShape().begin(), mesh.getShape().end()), meshRank(mesh.getShape().size()),
        userLayoutsOnly(userLayoutsOnly), refineGraph(refineGraph),
        printCost(printCost), warned(warned) {
    meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    replicatedAttr = attr(Layout(meshRank));
    usPerIteration = computeRate > 0 ? 1e6 / computeRate : 0;
  }

  LogicalResult run();

private:
  Layout layoutOf(Value v) { return currentAttr(v).getLayout(); }
  LayoutAttr attr(const Layout &l) { return LayoutAttr::get(meshRef, l); }
  double reshardCost(Value v, const Layout &to);
  double planCost(Value v, const Layout &from, const Layout &to);
  Strategy evaluate(Operation *op, const ShardingRule &rule,
                    ArrayRef<Value> results,
                    Assignment assignment, bool keepPartials = true,
                    bool priced = true);
  LogicalResult visit(Operation *op);
  void setReplicated(Operation *op);
  void record(Operation *op, ArrayRef<Value> operands, ArrayRef<Value> results,
              const Strategy &s);

  /// Layouts the consumers of a value would like it in (from declared
  /// result layouts and user layouts, propagated backward before the
  /// forward pass); a candidate strategy of the value's producer.
  void computeHints();
  DenseMap<Value, Layout> hints;
  /// Layouts values will be resharded to anyway (needed by an earlier op's
  /// strategy): reusing them is free.
  DenseMap<Value, SmallVector<Layout, 2>> available;

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
  DenseMap<Operation *, Strategy> chosen;

  /// Fills the attribute forms of a strategy's layouts.
  void attach(Strategy &s);
  /// The layout `v` has now: its producer's chosen strategy (the
  /// refinement keeps strategies here and writes them to the IR once, at
  /// the end), else its recorded layout, else replicated.
  LayoutAttr currentAttr(Value v);
  LayoutAttr attrWith(Value v, const Move *move);
  /// The layout `use` needs when its owner does not change (the owner's
  /// chosen strategy, an annotation, the enclosing op of a nested read);
  /// null for a use that needs none. Not for uses by the return.
  LayoutAttr fixedRequirement(OpOperand &use);
  double planCost(Value v, LayoutAttr from, LayoutAttr to);
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
  double work(Operation *op, const Strategy &s);
  /// The time `op`'s local loop takes under `s` at the compute rate.
  double computeUs(Operation *op, const Strategy &s) {
    return usPerIteration * work(op, s);
  }
  double usPerIteration = 0;
  /// Costs closer than this (microseconds) tie.
  static constexpr double kTieUs = 1e-3;
  /// Strategies for `op` given its operands' current layouts: replicated,
  /// each operand's layout, each layout another consumer needs an operand
  /// in, each layout the results' consumers need; alone and merged with the
  /// operands' layouts, with pending Partial operands kept or reduced first;
  /// distinct, and other than its current one.
  SmallVector<Strategy, 4> candidates(Operation *op);
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

  LayoutAttr replicatedAttr;
  DenseMap<std::tuple<Type, Attribute, Attribute>, double> planCosts;

  func::FuncOp fn;
  MeshOp mesh;
  ::shardx::Planner planner;
  std::vector<int64_t> meshShape;
  int64_t meshRank;
  FlatSymbolRefAttr meshRef;
  bool userLayoutsOnly;
  bool refineGraph;
  bool printCost;
  llvm::StringSet<> &warned;
};

double Propagator::reshardCost(Value v, const Layout &to) {
  Layout from = layoutOf(v);
  if (from == to || isRematerializable(v))
    return 0;
  if (auto it = available.find(v);
      it != available.end() && llvm::is_contained(it->second, to))
    return 0;
  return planCost(v, from, to);
}

double Propagator::planCost(Value v, const Layout &from, const Layout &to) {
  auto type = cast<RankedTensorType>(v.getType());
  if (!type.hasStaticShape())
    return std::numeric_limits<double>::infinity();
  std::string error;
  int64_t bytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  const ::shardx::Plan *plan =
      planner.plan(from, to, std::vector<int64_t>(type.getShape().begin(),
                                                  type.getShape().end()),
                   bytes, error);
  if (!plan)
    return std::numeric_limits<double>::infinity();
  return plan->cost;
}

Strategy Propagator::evaluate(Operation *op, const ShardingRule &rule,
                              ArrayRef<Value> results,
                              Assignment assignment, bool keepPartials,
                              bool priced) {
  Strategy s;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
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
  bool reductionSharded = false;
  for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
    if (!assignment[f] || kind != ShardingRule::FactorKind::Reduction)
      continue;
    if (!combiner && linalgOp)
      combiner = getCombiner(linalgOp);
    bool ok = combiner && linalgOp &&
              isIdentityFill(linalgOp.getDpsInits()[0], *combiner);
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
  if (keepPartials) {
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
            (used >> axis & 1) || (resultPartials[axis]) ||
            (keptPartials[axis] && *keptPartials[axis] != *p))
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
          keptPartials = *common;
      }
    }
  }
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

void Propagator::record(Operation *op, ArrayRef<Value> operands,
                        ArrayRef<Value> results, const Strategy &s) {
  SmallVector<Attribute> ins, outs;
  if (s.operandAttrs.size() == s.operandLayouts.size() &&
      s.resultAttrs.size() == s.resultLayouts.size()) {
    ins.assign(s.operandAttrs.begin(), s.operandAttrs.end());
    outs.assign(s.resultAttrs.begin(), s.resultAttrs.end());
  } else {
    for (const Layout &l : s.operandLayouts)
      ins.push_back(attr(l));
    for (const Layout &l : s.resultLayouts)
      outs.push_back(attr(l));
  }
  if (!operands.empty())
    op->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                ArrayAttr::get(op->getContext(), ins));
  if (!results.empty())
    op->setAttr(ShardXDialect::getLayoutsAttrName(),
                ArrayAttr::get(op->getContext(), outs));
}

void Propagator::setReplicated(Operation *op) {
  Strategy s;
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  s.operandLayouts.assign(operands.size(), Layout(meshRank));
  s.resultLayouts.assign(results.size(), Layout(meshRank));
  record(op, operands, results, s);
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

LogicalResult Propagator::visit(Operation *op) {
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
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  FailureOr<ShardingRule> rule = failure();
  if (ruleOp)
    rule = ruleOp.getShardingRule();
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
  // Embedding tables split by rows (vocabulary) and/or columns: every rank
  // looks up the rows it holds and yields zeros for the others (a pending
  // sum over the row axes), for the columns it holds (the result's last dim
  // split like the table's columns).
  if (std::optional<EmbeddingLookup> lookup = matchEmbeddingLookup(op);
      lookup && !userLayoutsOnly) {
    Layout table = layoutOf(lookup->table);
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
      record(op, operands, results, s);
      op->setAttr(kTableLayoutAttrName, attr(table));
      return success();
    }
  }
  if (capturesTensors || userLayoutsOnly) {
    setReplicated(op);
    // Captured tensors must be replicated too: they are operands in effect.
    return success();
  }
  // Candidates: each operand as leader (largest first) merged with the
  // others, and the replicated strategy.
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
    views.push_back(viewThroughRule(*rule, rule->operands[i], layoutOf(v),
                                    meshShape));
  Strategy best = evaluate(op, *rule, results,
                           Assignment(rule->factorSizes.size()));
  // The consumers' preference: the results' hints, merged with the
  // operands; it wins ties (it saves reshards further on).
  Strategy hinted;
  {
    Assignment a(rule->factorSizes.size());
    bool any = false;
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it == hints.end())
        continue;
      mergeInto(a, viewThroughRule(*rule, rule->results[i], it->second,
                                   meshShape));
      any = true;
    }
    if (any) {
      for (unsigned other : order)
        mergeInto(a, views[other]);
      hinted = evaluate(op, *rule, results, a);
    }
  }
  for (unsigned leader : order) {
    Assignment a = views[leader];
    for (unsigned other : order)
      if (other != leader)
        mergeInto(a, views[other]);
    Strategy s = evaluate(op, *rule, results, a);
    if (!s.valid)
      continue;
    constexpr double eps = 1e-12;
    if (!best.valid || s.cost < best.cost - eps ||
        (s.cost <= best.cost + eps && s.shardedWork > best.shardedWork))
      best = std::move(s);
  }
  if (hinted.valid && (!best.valid || hinted.cost <= best.cost + 1e-12))
    best = std::move(hinted);
  movable.push_back(op);
  rules.try_emplace(op, *rule);
  if (!best.valid) {
    best.operandLayouts.assign(operands.size(), Layout(meshRank));
    best.resultLayouts.assign(results.size(), Layout(meshRank));
    best.valid = true;
  }
  for (auto [v, l] : llvm::zip(operands, best.operandLayouts))
    if (l != layoutOf(v) && !llvm::is_contained(available[v], l))
      available[v].push_back(l);
  attach(best);
  record(op, operands, results, best);
  position[op] = movable.size() - 1;
  chosen[op] = std::move(best);
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

/// The position of `result` among its owner's tensor results.
static unsigned tensorResultIndex(OpResult result) {
  unsigned n = 0;
  for (OpResult other : result.getOwner()->getResults()) {
    if (other == result)
      break;
    if (isa<RankedTensorType>(other.getType()))
      ++n;
  }
  return n;
}

void Propagator::attach(Strategy &s) {
  s.operandAttrs.clear();
  s.resultAttrs.clear();
  for (const Layout &l : s.operandLayouts)
    s.operandAttrs.push_back(attr(l));
  for (const Layout &l : s.resultLayouts)
    s.resultAttrs.push_back(attr(l));
}

LayoutAttr Propagator::currentAttr(Value v) {
  if (auto r = dyn_cast<OpResult>(v))
    if (auto it = chosen.find(r.getOwner()); it != chosen.end())
      return it->second.resultAttrs[tensorResultIndex(r)];
  LayoutAttr a = getRecordedLayout(v);
  return a ? a : replicatedAttr;
}

LayoutAttr Propagator::attrWith(Value v, const Move *move) {
  if (move)
    if (auto r = dyn_cast<OpResult>(v); r && r.getOwner() == move->op)
      return move->strategy->resultAttrs[tensorResultIndex(r)];
  return currentAttr(v);
}

LayoutAttr Propagator::fixedRequirement(OpOperand &use) {
  Operation *owner = use.getOwner();
  Block &body = fn.getBody().front();
  if (owner->getBlock() != &body) {
    // Read inside a region: the enclosing op needs it whole (or in the
    // layout of a row-split embedding table).
    Operation *top = body.findAncestorOpInBlock(*owner);
    if (!top)
      return nullptr;
    if (auto table = top->getAttrOfType<LayoutAttr>(kTableLayoutAttrName))
      return table;
    return replicatedAttr;
  }
  if (auto it = chosen.find(owner); it != chosen.end())
    return it->second.operandAttrs[tensorOperandIndex(use)];
  if (auto annotate = dyn_cast<AnnotateOp>(owner))
    return annotate.getLayout();
  return requiredLayout(use);
}

void Propagator::indexUses() {
  Block &body = fn.getBody().front();
  auto index = [&](Value v) {
    if (!isa<RankedTensorType>(v.getType()))
      return;
    valueIndex[v] = valueUses.size();
    valueUses.emplace_back();
    ValueUses &entry = valueUses.back();
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

void Propagator::addNeed(OpOperand &use, LayoutAttr layout) {
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

void Propagator::removeNeed(OpOperand &use, LayoutAttr layout) {
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

void Propagator::moveNeeds(Operation *op, const Strategy &from,
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

void Propagator::neededLayouts(
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

double Propagator::planCost(Value v, LayoutAttr from, LayoutAttr to) {
  auto key = std::make_tuple(v.getType(), Attribute(from), Attribute(to));
  auto it = planCosts.find(key);
  if (it != planCosts.end())
    return it->second;
  double cost = planCost(v, from.getLayout(), to.getLayout());
  planCosts[key] = cost;
  return cost;
}

double Propagator::valueCost(Value v, const Move *move) {
  if (isRematerializable(v))
    return 0;
  LayoutAttr from = attrWith(v, move);
  SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
  neededLayouts(v, from, move, /*skip=*/nullptr, /*withNested=*/true, needed);
  SmallVector<LayoutAttr, 4> seen;
  double cost = 0;
  for (auto [rank, to] : needed) {
    if (!to || to == from || llvm::is_contained(seen, to))
      continue;
    seen.push_back(to);
    cost += planCost(v, from, to);
  }
  return cost;
}

double Propagator::totalCost() {
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

double Propagator::work(Operation *op, const Strategy &s) {
  double iterations = 1;
  for (int64_t size : rules.find(op)->second.factorSizes)
    iterations *= size == ShapedType::kDynamic ? 1 : size;
  return iterations / s.shardedWork;
}

SmallVector<Value> Propagator::affectedBy(Operation *op) {
  SmallVector<Value> affected;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()) && !llvm::is_contained(affected, v))
      affected.push_back(v);
  for (Value r : op->getResults())
    if (isa<RankedTensorType>(r.getType()))
      affected.push_back(r);
  return affected;
}

SmallVector<Strategy, 4> Propagator::candidates(Operation *op) {
  const ShardingRule &rule = rules.find(op)->second;
  const Strategy &current = chosen[op];
  SmallVector<Value> operands = tensorValues(op->getOperands());
  SmallVector<Value> results = tensorValues(op->getResults());
  SmallVector<Assignment> views;
  bool anyPartial = false;
  for (auto [i, v] : llvm::enumerate(operands)) {
    Layout l = layoutOf(v);
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
  auto addNeeds = [&](Value v, ArrayRef<SmallVector<int64_t>> dims) {
    SmallVector<LayoutAttr, 4> seen;
    LayoutAttr from = currentAttr(v);
    SmallVector<std::pair<unsigned, LayoutAttr>, 8> needed;
    neededLayouts(v, from, /*move=*/nullptr, /*skip=*/op,
                  /*withNested=*/false, needed);
    for (auto [rank, need] : needed) {
      if (!need || need == from || llvm::is_contained(seen, need))
        continue;
      seen.push_back(need);
      addSeed(viewThroughRule(rule, dims, need.getLayout(), meshShape));
    }
  };
  for (auto [i, v] : llvm::enumerate(operands))
    addNeeds(v, rule.operands[i]);
  for (auto [i, r] : llvm::enumerate(results))
    addNeeds(r, rule.results[i]);
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
      if (!s.sameLayouts(current) &&
          llvm::none_of(out, [&](const Strategy &o) {
            return o.sameLayouts(s);
          }))
        out.push_back(std::move(s));
    }
  return out;
}

void Propagator::change(Operation *op, Strategy s, Trial &trial) {
  for (Value v : affectedBy(op))
    if (trial.before.try_emplace(v, 0).second) {
      trial.before[v] = valueCost(v, nullptr);
      trial.touched.push_back(v);
    }
  Strategy &current = chosen[op];
  trial.workDelta += work(op, s) - work(op, current);
  moveNeeds(op, current, s);
  trial.undo.emplace_back(op, std::move(current));
  current = std::move(s);
}

double Propagator::costDelta(Trial &trial) {
  double delta = 0;
  for (Value v : trial.touched)
    delta += valueCost(v, nullptr) - trial.before[v];
  return delta;
}

void Propagator::revert(Trial &trial) {
  for (auto &[op, s] : llvm::reverse(trial.undo)) {
    Strategy &current = chosen[op];
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

bool Propagator::tryCascade(Operation *op, const Strategy &s, Trial &trial) {
  CascadeQueue queue(movable);
  auto enqueueNeighbours = [&](Operation *changed, const Strategy &old) {
    auto enqueueUsers = [&](Value v) {
      ArrayRef<unsigned> users = usesOf(v).movableUsers;
      if (users.size() > kFanOutLimit + 1)
        return;
      queue.addRun(users, position.find(changed)->second);
    };
    const Strategy &now = chosen[changed];
    for (auto [r, was, is] : llvm::zip(tensorValues(changed->getResults()),
                                       old.resultAttrs, now.resultAttrs))
      if (was != is)
        enqueueUsers(r);
    for (auto [v, was, is] : llvm::zip(tensorValues(changed->getOperands()),
                                       old.operandAttrs, now.operandAttrs))
      if (was != is)
        enqueueUsers(v);
  };
  Strategy old = chosen[op];
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
      for (const Layout &l : c.resultLayouts)
        partials += l.hasPartial();
      for (auto [v, l] : llvm::zip(operands, c.operandAttrs))
        mismatches += currentAttr(v) != l;
      return std::make_tuple(cost, partials, mismatches, work(user, c));
    };
    const Strategy &current = chosen[user];
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
  double delta = costDelta(trial) + trial.workDelta * usPerIteration;
  if (delta < -kTieUs || (delta <= kTieUs && trial.workDelta < -0.5))
    return true;
  revert(trial);
  return false;
}

void Propagator::markNeighbours(Operation *op) {
  for (Value v : op->getOperands()) {
    if (Operation *def = v.getDefiningOp(); def && position.count(def))
      dirty.insert(def);
    stamped[v] = ++clock;
  }
  for (Value r : op->getResults())
    stamped[r] = ++clock;
}

bool Propagator::isDirty(Operation *op) {
  if (dirty.contains(op))
    return true;
  auto it = cleared.find(op);
  uint64_t since = it == cleared.end() ? 0 : it->second;
  return llvm::any_of(op->getOperands(), [&](Value v) {
    auto s = stamped.find(v);
    return s != stamped.end() && s->second > since;
  });
}

bool Propagator::clearDirty(Operation *op) {
  if (!isDirty(op))
    return false;
  dirty.erase(op);
  cleared[op] = clock;
  return true;
}

int64_t Propagator::refine() {
  int64_t changes = 0;
  dirty.insert(movable.begin(), movable.end());
  auto visitOp = [&](Operation *op) -> bool {
    if (!clearDirty(op))
      return false;
    SmallVector<Value> affected = affectedBy(op);
    Strategy &current = chosen[op];
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
    changes += changed;
  }
  // The strategies lived in `chosen` during the search: write them once.
  for (Operation *op : movable)
    record(op, tensorValues(op->getOperands()), tensorValues(op->getResults()),
           chosen[op]);
  return changes;
}

void Propagator::computeHints() {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (OpOperand &o : ret->getOpOperands())
    if (auto declared = fn.getResultAttrOfType<LayoutAttr>(
            o.getOperandNumber(), ShardXDialect::getLayoutAttrName()))
      hints.try_emplace(o.get(), declared.getLayout());
  for (Operation &op : llvm::reverse(body)) {
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(&op);
    if (!ruleOp)
      continue;
    FailureOr<ShardingRule> rule = ruleOp.getShardingRule();
    SmallVector<Value> operands = tensorValues(op.getOperands());
    SmallVector<Value> results = tensorValues(op.getResults());
    if (failed(rule) || rule->operands.size() != operands.size() ||
        rule->results.size() != results.size())
      continue;
    Assignment a(rule->factorSizes.size());
    for (auto [i, r] : llvm::enumerate(results)) {
      auto it = hints.find(r);
      if (it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->results[i], it->second,
                                     meshShape));
    }
    for (auto [i, v] : llvm::enumerate(operands)) {
      if (isUserLayout(v))
        mergeInto(a, viewThroughRule(*rule, rule->operands[i], layoutOf(v),
                                     meshShape));
      else if (auto it = hints.find(v); it != hints.end())
        mergeInto(a, viewThroughRule(*rule, rule->operands[i], it->second,
                                     meshShape));
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
          hints.try_emplace(v, *l);
      }
    }
  }
}

LogicalResult Propagator::run() {
  // Arguments: declared layouts, replicated otherwise (recorded so that the
  // calling convention is explicit).
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (isa<RankedTensorType>(fn.getArgument(i).getType()) &&
        !fn.getArgAttr(i, ShardXDialect::getLayoutAttrName()))
      fn.setArgAttr(i, ShardXDialect::getLayoutAttrName(),
                    attr(Layout(meshRank)));
  if (!userLayoutsOnly)
    computeHints();
  for (Operation &op : fn.getBody().front())
    if (failed(visit(&op)))
      return failure();
  indexUses();
  double greedy = printCost ? totalCost() : 0;
  int64_t changes = refineGraph && !userLayoutsOnly ? refine() : 0;
  if (printCost)
    fn.emitRemark() << llvm::formatv(
        "reshard cost {0:F3} us in program order, {1:F3} us after {2} "
        "whole-graph change(s)",
        greedy, totalCost(), changes);
  return success();
}

struct PropagatePass : public mlir::shardx::impl::PropagatePassBase<PropagatePass> {
  using PropagatePassBase::PropagatePassBase;

  void runOnOperation() override {
    llvm::StringSet<> warned;
    auto run = [&](func::FuncOp fn, MeshOp mesh) -> LogicalResult {
      if (!fn.getBody().hasOneBlock())
        return fn.emitError(
            "functions with more than one block are not supported");
      ::shardx::MeshSpec spec = getMeshSpec(mesh);
      // Every choice is priced by the planner: a mesh it cannot plan on
      // would leave every reshard at an infinite cost.
      if (std::string reason = ::shardx::Planner::checkMesh(spec);
          !reason.empty())
        return mesh.emitError("cannot propagate layouts on this mesh: ")
               << reason;
      if (bandwidthOverride > 0 || latencyOverride >= 0) {
        spec.costs.resize(spec.shape.size());
        for (auto &c : spec.costs) {
          if (bandwidthOverride > 0)
            c.bandwidthGBps = bandwidthOverride / 1e9;
          if (latencyOverride >= 0)
            c.latencyUs = latencyOverride * 1e6;
        }
      }
      Propagator p(fn, mesh, std::move(spec), userLayoutsOnly, refineGraph,
                   printCost, computeRate, warned);
      return p.run();
    };
    // Functions without layouts stay as they are (replicated).
    if (failed(forEachShardedFunction(getOperation(), run)))
      signalPassFailure();
  }
};

//===----------------------------------------------------------------------===//
// Reshard insertion
//===----------------------------------------------------------------------===//

LayoutAttr layoutOrReplicated(Value v, FlatSymbolRefAttr mesh,
                              int64_t meshRank) {
  if (LayoutAttr a = getRecordedLayout(v))
    return a;
  return LayoutAttr::get(mesh, Layout(meshRank));
}

struct InsertReshardsPass
    : public mlir::shardx::impl::InsertReshardsPassBase<InsertReshardsPass> {
  void runOnOperation() override {
    if (failed(forEachShardedFunction(
            getOperation(),
            [&](func::FuncOp fn, MeshOp mesh) { return insert(fn, mesh); })))
      signalPassFailure();
  }

  LogicalResult insert(func::FuncOp fn, MeshOp mesh) {
    auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    int64_t meshRank = mesh.getShape().size();
    OpBuilder builder(fn.getContext());
    DenseMap<std::pair<Value, Attribute>, Value> cache;

    auto materialize = [&](Value v, LayoutAttr to, Operation *before) -> Value {
      LayoutAttr from = layoutOrReplicated(v, meshRef, meshRank);
      if (from == to)
        return v;
      auto key = std::make_pair(v, Attribute(to));
      auto it = cache.find(key);
      if (it != cache.end())
        return it->second;
      Value result;
      if (isRematerializable(v)) {
        // Clone the shape/splat chain with the needed layout.
        Operation *def = v.getDefiningOp();
        builder.setInsertionPoint(before);
        if (auto fill = dyn_cast<linalg::FillOp>(def)) {
          Layout whole = to.getLayout();
          for (int64_t a = 0; a < meshRank; ++a)
            whole.setPartial(a, std::nullopt);
          LayoutAttr wholeAttr = LayoutAttr::get(meshRef, whole);
          Operation *empty = builder.clone(*fill.getOutputs()[0].getDefiningOp());
          setResultLayout(cast<OpResult>(empty->getResult(0)), wholeAttr);
          IRMapping map;
          map.map(fill.getOutputs()[0], empty->getResult(0));
          Operation *clone = builder.clone(*fill, map);
          clone->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                         builder.getArrayAttr({wholeAttr}));
          setResultLayout(cast<OpResult>(clone->getResult(0)), wholeAttr);
          result = clone->getResult(0);
        } else {
          Operation *clone = builder.clone(*def);
          setResultLayout(cast<OpResult>(clone->getResult(0)), to);
          result = clone->getResult(0);
        }
        if (to.getLayout().hasPartial()) {
          // A splat cannot be Partial: redistribute from the replicated one.
          Layout rep = to.getLayout();
          for (int64_t a = 0; a < meshRank; ++a)
            rep.setPartial(a, std::nullopt);
          setResultLayout(cast<OpResult>(result),
                          LayoutAttr::get(meshRef, rep));
          result = RedistributeOp::create(builder, v.getLoc(), result,
                                          LayoutAttr::get(meshRef, rep), to);
        }
      } else {
        if (auto arg = dyn_cast<BlockArgument>(v))
          builder.setInsertionPointToStart(arg.getOwner());
        else
          builder.setInsertionPointAfter(v.getDefiningOp());
        result = RedistributeOp::create(builder, v.getLoc(), v, from, to);
      }
      cache[key] = result;
      return result;
    };

    for (Operation &op : llvm::make_early_inc_range(fn.getBody().front())) {
      if (auto annotate = dyn_cast<AnnotateOp>(op)) {
        Value v = materialize(annotate.getInput(), annotate.getLayout(), &op);
        annotate.getResult().replaceAllUsesWith(v);
        annotate.erase();
        continue;
      }
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (OpOperand &o : ret->getOpOperands()) {
          if (!isa<RankedTensorType>(o.get().getType()))
            continue;
          LayoutAttr to =
              resultLayout(fn, o.getOperandNumber(),
                           layoutOrReplicated(o.get(), meshRef, meshRank));
          o.set(materialize(o.get(), to, &op));
          fn.setResultAttr(o.getOperandNumber(),
                           ShardXDialect::getLayoutAttrName(), to);
        }
        continue;
      }
      // Tensors read from inside regions (captured) must be whole.
      if (op.getNumRegions() > 0) {
        SmallVector<OpOperand *> captured;
        op.walk([&](Operation *inner) {
          if (inner == &op)
            return;
          for (OpOperand &use : inner->getOpOperands()) {
            Value v = use.get();
            if (isa<RankedTensorType>(v.getType()) &&
                v.getParentRegion()->getParentOp() != &op &&
                !op.isProperAncestor(v.getParentRegion()->getParentOp()))
              captured.push_back(&use);
          }
        });
        auto tableLayout = op.getAttrOfType<LayoutAttr>(kTableLayoutAttrName);
        for (OpOperand *use : captured)
          use->set(materialize(use->get(),
                               tableLayout ? tableLayout
                                           : LayoutAttr::get(meshRef,
                                                             Layout(meshRank)),
                               &op));
      }
      if (!op.hasAttr(ShardXDialect::getOperandLayoutsAttrName()))
        continue;
      for (OpOperand &o : op.getOpOperands()) {
        if (!isa<RankedTensorType>(o.get().getType()))
          continue;
        LayoutAttr to = requiredLayout(o);
        if (to)
          o.set(materialize(o.get(), to, &op));
      }
    }
    // Remove rematerialized originals left without uses.
    for (Operation &op : llvm::make_early_inc_range(
             llvm::reverse(fn.getBody().front())))
      if (op.use_empty() && op.getNumResults() > 0 &&
          isRematerializable(op.getResult(0)))
        op.erase();
    for (Operation &op : llvm::make_early_inc_range(
             llvm::reverse(fn.getBody().front())))
      if (isa<tensor::EmptyOp>(op) && op.use_empty())
        op.erase();
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

struct VerifyLayoutsPass
    : public mlir::shardx::impl::VerifyLayoutsPassBase<VerifyLayoutsPass> {
  void runOnOperation() override {
    bool failedAny = false;
    auto check = [&](func::FuncOp fn, MeshOp mesh) -> LogicalResult {
      auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
      int64_t meshRank = mesh.getShape().size();
      fn.walk([&](Operation *op) {
        if (Operation *parent = op->getParentOp();
            parent && parent->hasAttr(kTableLayoutAttrName))
          return;
        if (isa<AnnotateOp>(op)) {
          op->emitError("shardx.annotate left after reshard insertion");
          failedAny = true;
          return;
        }
        if (auto ret = dyn_cast<func::ReturnOp>(op)) {
          for (OpOperand &o : ret->getOpOperands()) {
            if (!isa<RankedTensorType>(o.get().getType()))
              continue;
            auto declared = fn.getResultAttrOfType<LayoutAttr>(
                o.getOperandNumber(), ShardXDialect::getLayoutAttrName());
            LayoutAttr have = layoutOrReplicated(o.get(), meshRef, meshRank);
            if (!declared || declared != have) {
              op->emitError() << "result #" << o.getOperandNumber()
                              << " has layout " << have << " but "
                              << (declared ? "is declared " : "declares none")
                              << (declared ? Attribute(declared) : Attribute());
              failedAny = true;
            }
          }
          return;
        }
        if (auto redistribute = dyn_cast<RedistributeOp>(op)) {
          LayoutAttr have =
              layoutOrReplicated(redistribute.getInput(), meshRef, meshRank);
          if (have != redistribute.getSource()) {
            op->emitError() << "redistributes from " << redistribute.getSource()
                            << " but its operand has layout " << have;
            failedAny = true;
          }
          return;
        }
        if (!op->hasAttr(ShardXDialect::getOperandLayoutsAttrName())) {
          for (Value v : op->getOperands())
            if (isa<RankedTensorType>(v.getType()) &&
                !layoutOrReplicated(v, meshRef, meshRank)
                     .getLayout()
                     .isReplicated()) {
              op->emitError("op without a sharding strategy has a sharded "
                            "operand (run shardx-propagate)");
              failedAny = true;
              return;
            }
          return;
        }
        for (OpOperand &o : op->getOpOperands()) {
          if (!isa<RankedTensorType>(o.get().getType()))
            continue;
          LayoutAttr need = requiredLayout(o);
          LayoutAttr have = layoutOrReplicated(o.get(), meshRef, meshRank);
          if (need && need != have) {
            op->emitError() << "operand #" << o.getOperandNumber()
                            << " has layout " << have << " but the op needs "
                            << need;
            failedAny = true;
          }
        }
      });
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), check)) || failedAny)
      return signalPassFailure();
    // A check only: the IR is unchanged, so the pass manager skips the
    // verifier after it.
    markAllAnalysesPreserved();
  }
};

} // namespace
