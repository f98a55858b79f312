//===- RaggedExperts.cpp - Grouped matmuls' rows kept on their experts ----===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-ragged-experts: between grouped matmuls whose experts are split
// over mesh axes A, row-wise values stay on the ranks of their rows'
// experts instead of being all-reduced (docs/Rules.md, "Expert
// parallelism").
//
// A grouped matmul of the importer (`_grouped_mm`, rows form) computes
//   out[r, n] = sum_{e, k} select(g[r] == e, x[r, k] * w[e, k, n], 0)
// with `g` the rows' groups (counted from `offs`). With `w` split on E over
// A, rank j sums over its experts only: its `out` is exact on the rows whose
// group is one of its experts (its *own* rows) and zero elsewhere, a
// Partial(sum) over A whose terms do not overlap. A row-wise elementwise op
// of such values (and of values whole over A), or a 2-d transpose of one,
// is then exact on each rank's own rows, though not zero elsewhere
// (sigmoid(0) = 1/2), and a grouped matmul with the same groups and the
// same split of its experts reads row r only for its own experts: its own
// rows (the rows form's input; both operands of the weight-gradient form,
// `[K, R] x [R, N] -> [E, K, N]`). Such values need no reshard on the way.
// The pass grows the region from the rows-form matmuls' outputs, shrinks
// it until every use of a derived (not zero elsewhere) value is an op of
// the region or such a grouped matmul reading it by its rows, and records
// the region's values as Partial(sum) over A, marking its ops
// `shardx.ragged_rows`. A matmul's own output (a true partial sum) is
// still all-reduced for any other reader.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OperationSupport.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_RAGGEDEXPERTSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::axisMask;
using ::shardx::DimSharding;
using ::shardx::Layout;
using ::shardx::ReduceOp;

namespace {

/// The attribute marking the ops whose rows the pass kept on their experts.
constexpr llvm::StringLiteral kRaggedRowsAttrName = "shardx.ragged_rows";

/// A grouped matmul with its experts split: the groups it masks by and the
/// split of its experts.
struct GroupedMatmul {
  linalg::GenericOp op;
  /// Rows: `x [R, K] x w [E, K, N] -> [R, N]`, a partial sum over the
  /// experts' axes. Weights: `x [K, R] x w [R, N] -> [E, K, N]` (the
  /// weights' gradient), split on E.
  enum class Form { Rows, Weights } form;
  /// The rows' groups `g` (operand 2).
  Value groups;
  /// The split of the experts' dim and the mesh axes it uses.
  DimSharding experts;
  uint64_t axes = 0;
  int64_t numExperts = 0;

  /// The dim of its operand `i` (0 or 1) that the rows are, or -1 for an
  /// operand that is not read by rows.
  int64_t rowDim(unsigned i) const {
    if (form == Form::Rows)
      return i == 0 ? 0 : -1;
    return i == 0 ? 1 : i == 1 ? 0 : -1;
  }
};

/// The recorded layout `op` needs for its tensor operand `i`.
std::optional<Layout> operandLayout(Operation *op, unsigned i) {
  if (LayoutAttr a = requiredLayout(op->getOpOperand(i)))
    return a.getLayout();
  return std::nullopt;
}

/// `op` as a grouped matmul with its experts split: the rows form's
/// result pending a sum over the experts' axes, the weights form's split on
/// E.
std::optional<GroupedMatmul> matchGroupedMatmul(linalg::GenericOp op) {
  std::optional<GroupedMatmulForm> form = matchGroupedMatmulForm(op);
  LayoutAttr out = getRecordedLayout(op->getResult(0));
  if (!form || !out)
    return std::nullopt;
  GroupedMatmul m{op, GroupedMatmul::Form::Rows, op.getDpsInputs()[2], {}, 0,
                  0};
  if (*form == GroupedMatmulForm::Rows) {
    std::optional<Layout> w = operandLayout(op, 1);
    if (!w || !w->getDim(0))
      return std::nullopt;
    m.experts = *w->getDim(0);
    m.numExperts =
        cast<RankedTensorType>(op.getDpsInputs()[1].getType()).getDimSize(0);
    m.axes = axisMask(m.experts);
    for (int64_t a = 0; a < out.getLayout().getMeshRank(); ++a)
      if ((m.axes >> a & 1) &&
          out.getLayout().getPartials()[a] != ReduceOp::Sum)
        return std::nullopt;
    return m;
  }
  const DimSharding *e = out.getLayout().getDim(0);
  if (!e)
    return std::nullopt;
  m.form = GroupedMatmul::Form::Weights;
  m.experts = *e;
  m.numExperts =
      cast<RankedTensorType>(op.getResult(0).getType()).getDimSize(0);
  m.axes = axisMask(m.experts);
  return m;
}

/// Whether two row-group tensors hold the same values: one value, or the
/// results of equivalent ops of the same operands (the importer counts the
/// groups once per grouped matmul).
bool sameGroups(Value a, Value b) {
  if (a == b)
    return true;
  Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
  if (!x || !y || !isMemoryEffectFree(x) || !isMemoryEffectFree(y))
    return false;
  return OperationEquivalence::isEquivalentTo(
             x, y, OperationEquivalence::ignoreValueEquivalence, nullptr,
             OperationEquivalence::IgnoreLocations) &&
         [&] {
           // Equal operands, except inits that are equal splats (linalg.fill
           // of one constant on tensor.empty).
           for (auto [p, q] : llvm::zip(x->getOperands(), y->getOperands())) {
             if (p == q)
               continue;
             auto fp = p.getDefiningOp<linalg::FillOp>();
             auto fq = q.getDefiningOp<linalg::FillOp>();
             if (!fp || !fq || p.getType() != q.getType())
               return false;
             Attribute cp, cq;
             if (!matchPattern(fp.getInputs()[0], m_Constant(&cp)) ||
                 !matchPattern(fq.getInputs()[0], m_Constant(&cq)) || cp != cq)
               return false;
           }
           return true;
         }();
}

/// Whether `a` and `b` split their experts alike over the same groups.
bool sameKey(const GroupedMatmul &a, const GroupedMatmul &b) {
  return a.experts == b.experts && a.numExperts == b.numExperts &&
         sameGroups(a.groups, b.groups);
}

/// `layout` with the axes of `axes` pending a sum; nullopt when it splits a
/// dim over one of them or has another pending op on one.
std::optional<Layout> partialOver(const Layout &layout, uint64_t axes) {
  Layout l = layout;
  for (const DimSharding &d : l.getDims())
    if (axisMask(d) & axes)
      return std::nullopt;
  for (int64_t a = 0; a < l.getMeshRank(); ++a) {
    if (!(axes >> a & 1))
      continue;
    if (l.getPartials()[a] && *l.getPartials()[a] != ReduceOp::Sum)
      return std::nullopt;
    l.setPartial(a, ReduceOp::Sum);
  }
  return l;
}

/// Whether `layout` neither splits nor pends over an axis of `axes`.
bool wholeOver(const Layout &layout, uint64_t axes) {
  for (const DimSharding &d : layout.getDims())
    if (axisMask(d) & axes)
      return false;
  for (int64_t a = 0; a < layout.getMeshRank(); ++a)
    if ((axes >> a & 1) && layout.getPartials()[a])
      return false;
  return true;
}

/// A row-wise elementwise op: all loops parallel, its result's map the
/// identity.
bool isElementwise(linalg::GenericOp op) {
  return op.getNumResults() == 1 &&
         op.getNumParallelLoops() == op.getNumLoops() &&
         op.getNumLoops() >= 1 &&
         op.getMatchingIndexingMap(op.getDpsInitOperand(0)).isIdentity();
}

/// The regions of one function.
class RegionFinder {
public:
  RegionFinder(func::FuncOp fn, MeshOp mesh)
      : meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())) {
    fn.walk([&](linalg::GenericOp op) {
      if (auto m = matchGroupedMatmul(op))
        matmuls.try_emplace(op, *m);
    });
  }

  /// Rewrites the layouts of every region; returns the number of ops marked.
  unsigned run();

private:
  /// A region value's key (a rows-form grouped matmul: the one that made
  /// it, or the first of its operands') and the dim its rows are.
  struct Rows {
    const GroupedMatmul *key;
    int64_t dim;
  };
  std::optional<Rows> rowsOf(Value v) const {
    if (auto it = rows.find(v); it != rows.end())
      return it->second;
    return std::nullopt;
  }
  bool isMatmulOutput(Value v) const {
    Operation *def = v.getDefiningOp();
    auto it = def ? matmuls.find(def) : matmuls.end();
    return it != matmuls.end() && it->second.form == GroupedMatmul::Form::Rows;
  }
  /// The layout region value `v` gets: its own with the pending sum over
  /// its key's axes.
  std::optional<Layout> regionLayout(Value v) const {
    std::optional<Rows> r = rowsOf(v);
    LayoutAttr own = getRecordedLayout(v);
    if (!r || !own)
      return std::nullopt;
    return partialOver(own.getLayout(), r->key->axes);
  }
  /// Whether a reader that needs region value `v` in `need` can read it
  /// with the pending sum over `axes` instead: a matmul's output, a true
  /// partial sum, may be resharded on the other axes (a sum over dp
  /// reduced); a derived value must be read as it is.
  bool readsAs(Value v, const Layout &need, uint64_t axes) const {
    std::optional<Layout> want = partialOver(need, axes);
    if (!want)
      return false;
    return isMatmulOutput(v) || want == regionLayout(v);
  }
  /// Whether `use` of a region value reads only its own rows: an op kept
  /// in the region, or a grouped matmul of the same key reading it by
  /// rows.
  bool readsOwnRows(OpOperand &use) const;
  /// Whether `use` makes its owner a candidate, and the rows of its
  /// result.
  std::optional<Rows> joins(OpOperand &use) const;
  /// Grows the candidates from the matmuls' outputs.
  void grow();
  /// Drops candidates until every use of a derived value reads own rows.
  void shrink();

  FlatSymbolRefAttr meshRef;
  llvm::MapVector<Operation *, GroupedMatmul> matmuls;
  /// Row-wise ops of the region (elementwise generics, 2-d transposes).
  llvm::SetVector<Operation *> candidates;
  /// Region values (rows-form matmuls' outputs, candidates' results).
  DenseMap<Value, Rows> rows;
};

bool RegionFinder::readsOwnRows(OpOperand &use) const {
  Operation *owner = use.getOwner();
  if (candidates.contains(owner))
    return true;
  std::optional<Rows> r = rowsOf(use.get());
  auto it = matmuls.find(owner);
  if (!r || it == matmuls.end() || !sameKey(it->second, *r->key) ||
      it->second.rowDim(use.getOperandNumber()) != r->dim)
    return false;
  std::optional<Layout> need = operandLayout(owner, use.getOperandNumber());
  return need && readsAs(use.get(), *need, r->key->axes);
}

std::optional<RegionFinder::Rows> RegionFinder::joins(OpOperand &use) const {
  Operation *op = use.getOwner();
  Rows r = *rowsOf(use.get());
  int64_t dim = r.dim;
  if (auto t = dyn_cast<linalg::TransposeOp>(op)) {
    if (&use != &t.getInputMutable() || t.getPermutation().size() != 2)
      return std::nullopt;
    // The permutation maps result dim i to input dim perm[i].
    dim = t.getPermutation()[0] == r.dim ? 0 : 1;
  } else if (auto g = dyn_cast<linalg::GenericOp>(op)) {
    if (!isElementwise(g) || !g.isDpsInput(&use) ||
        !g.getMatchingIndexingMap(&use).isIdentity())
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  // Every other operand: a region value of the same key and rows read as
  // it is, or whole over the experts' axes.
  for (OpOperand &o : op->getOpOperands()) {
    if (!isa<RankedTensorType>(o.get().getType()))
      continue;
    std::optional<Layout> need = operandLayout(op, o.getOperandNumber());
    if (!need)
      return std::nullopt;
    if (std::optional<Rows> other = rowsOf(o.get())) {
      auto g = dyn_cast<linalg::GenericOp>(op);
      if (!sameKey(*other->key, *r.key) || other->dim != r.dim ||
          (g &&
           (!g.isDpsInput(&o) || !g.getMatchingIndexingMap(&o).isIdentity())) ||
          (!g && &o != &use) || !readsAs(o.get(), *need, r.key->axes))
        return std::nullopt;
      continue;
    }
    if (!wholeOver(*need, r.key->axes))
      return std::nullopt;
  }
  LayoutAttr result = getRecordedLayout(op->getResult(0));
  if (op->getNumResults() != 1 || !result ||
      !partialOver(result.getLayout(), r.key->axes))
    return std::nullopt;
  return Rows{r.key, dim};
}

void RegionFinder::grow() {
  SmallVector<Value> worklist;
  for (auto &[op, m] : matmuls) {
    if (m.form != GroupedMatmul::Form::Rows)
      continue;
    rows[op->getResult(0)] = Rows{&m, 0};
    worklist.push_back(op->getResult(0));
  }
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *op = use.getOwner();
      if (candidates.contains(op) || matmuls.contains(op))
        continue;
      std::optional<Rows> r = joins(use);
      if (!r)
        continue;
      candidates.insert(op);
      rows[op->getResult(0)] = *r;
      worklist.push_back(op->getResult(0));
    }
  }
}

void RegionFinder::shrink() {
  for (bool changed = true; changed;) {
    changed = false;
    SmallVector<Operation *> dropped;
    for (Operation *op : candidates) {
      Value result = op->getResult(0);
      bool keep = llvm::all_of(
          result.getUses(), [&](OpOperand &use) { return readsOwnRows(use); });
      // A candidate reads a region value: a matmul's output or a kept
      // candidate's result.
      keep &= llvm::any_of(op->getOperands(), [&](Value o) {
        Operation *def = o.getDefiningOp();
        return isMatmulOutput(o) || (def && candidates.contains(def));
      });
      if (!keep)
        dropped.push_back(op);
    }
    for (Operation *op : dropped) {
      candidates.remove(op);
      rows.erase(op->getResult(0));
      changed = true;
    }
  }
}

unsigned RegionFinder::run() {
  if (matmuls.empty())
    return 0;
  grow();
  shrink();
  MLIRContext *ctx = meshRef.getContext();
  auto setOperand = [&](Operation *op, OpOperand &o) {
    auto layout =
        LayoutAttr::get(meshRef, *partialOver(requiredLayout(o).getLayout(),
                                              rowsOf(o.get())->key->axes));
    auto old = op->getAttrOfType<ArrayAttr>(
        ShardXDialect::getOperandLayoutsAttrName());
    SmallVector<Attribute> entries(old.begin(), old.end());
    entries[tensorOperandIndex(o)] = layout;
    op->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                ArrayAttr::get(ctx, entries));
  };
  // The candidates' result layouts, before any is rewritten (each is read
  // from the recorded one).
  SmallVector<LayoutAttr> results;
  for (Operation *op : candidates)
    results.push_back(
        LayoutAttr::get(meshRef, *regionLayout(op->getResult(0))));
  unsigned marked = 0;
  for (auto [op, layout] : llvm::zip(candidates, results)) {
    for (OpOperand &o : op->getOpOperands())
      if (rowsOf(o.get()))
        setOperand(op, o);
    setResultLayout(op->getResult(0), layout);
    op->setAttr(kRaggedRowsAttrName, UnitAttr::get(ctx));
    ++marked;
  }
  for (auto &[op, m] : matmuls) {
    bool reads = false;
    for (unsigned i : {0u, 1u}) {
      OpOperand &o = op->getOpOperand(i);
      if (!rowsOf(o.get()) || !readsOwnRows(o))
        continue;
      setOperand(op, o);
      reads = true;
    }
    if (reads) {
      op->setAttr(kRaggedRowsAttrName, UnitAttr::get(ctx));
      ++marked;
    }
  }
  return marked;
}

struct RaggedExpertsPass
    : public mlir::shardx::impl::RaggedExpertsPassBase<RaggedExpertsPass> {
  void runOnOperation() override {
    auto each = [&](func::FuncOp fn, MeshOp mesh) {
      RegionFinder(fn, mesh).run();
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), each)))
      return signalPassFailure();
  }
};

} // namespace
