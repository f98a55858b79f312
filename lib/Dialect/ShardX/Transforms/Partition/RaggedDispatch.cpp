//===- RaggedDispatch.cpp - MoE dispatch by ragged all-to-alls ------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-ragged-dispatch: the dispatch and combine of a dropless MoE whose
// tokens are split over the experts' axes, as ragged all-to-alls
// (docs/Rules.md, "Expert parallelism").
//
// The global program (torchtitan's form, as the importer writes it after
// shardx-canonicalize) computes, for routed items p = (token p / k, choice
// p % k) with chosen experts `flat [R]` and gates `gates [R]`:
//   rank  = stable argsort position of flat      (a counting generic)
//   order = inverse of rank                       (order[r]: item of row r)
//   token = order floordiv k
//   xs[r] = x[token[r]]                           (gather)
//   offs  = cumsum(bincount(flat)), g[r] = #{e : offs[e] <= r}
//   Y     = experts(xs) by grouped matmuls over g (weights split on E over A)
//   out   = index_add(zeros [T, D], token, Y * gates[order])
// that is out[t] = sum over items p of token t of gates[p] *
// expert_{flat[p]}(x[t]): a sum over the items, whatever their order. So
// where x, flat and gates are split on their dim 0 over axes that include
// A, each rank computes its own tokens' part: it sorts its own items by
// expert (so by the member of its A group that holds the expert), sends
// each member the rows of its experts (`shardx.ragged_all_to_all`; the
// per-expert counts first by an even `shardx.all_to_all`, from which the
// rows each member sends and each received row's expert follow), sorts the
// received rows by expert (a worst-case buffer of every row of the group,
// zero after the received ones, which sort last), runs its experts over
// them (shardx-localize runs each grouped matmul over the received rows
// only: the groups are sorted), puts them back in the received order,
// sends them back with the counts it received, and adds them, weighted by
// their gates, to its tokens.
//
// The pass replaces the global ops with the rank's local ops, bracketed by
// `unrealized_conversion_cast`s as lowered reshards are: global -> local
// casts of x, flat, gates and the weights (which read them in their
// recorded layouts: no reshard), and a local -> global cast of the output,
// recorded with x's layout. shardx-localize maps the casts to the local
// values and clones the local ops, which carry no layouts, as they are.
// The range checks of the replaced gathers' indices (derived from a
// permutation, in range) become zeros. Anything not matched is left as it
// is, and runs the propagated plan.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SetVector.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_RAGGEDDISPATCHPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::axisMask;
using ::shardx::DimSharding;
using ::shardx::Layout;

namespace {

/// The attribute marking the local ops the pass built (print-plan prices
/// its collectives).
constexpr llvm::StringLiteral kRaggedDispatchAttrName =
    "shardx.ragged_dispatch";

//===----------------------------------------------------------------------===//
// Matching the bodies of the importer's generics
//===----------------------------------------------------------------------===//

using utils::IteratorType;
constexpr IteratorType par = IteratorType::parallel,
                       red = IteratorType::reduction;

bool isDim(AffineExpr e, unsigned d) {
  auto dim = dyn_cast<AffineDimExpr>(e);
  return dim && dim.getPosition() == d;
}

/// Whether `op` has the iterators `it` and maps `maps` (each the list of
/// loop dims its results are).
bool shapeIs(linalg::GenericOp op, ArrayRef<IteratorType> it,
             ArrayRef<SmallVector<unsigned>> maps) {
  if (op.getNumResults() != 1 || op.getIteratorTypesArray() != it)
    return false;
  SmallVector<AffineMap> have = op.getIndexingMapsArray();
  if (have.size() != maps.size())
    return false;
  for (auto [m, dims] : llvm::zip(have, maps)) {
    if (m.getNumResults() != dims.size())
      return false;
    for (auto [e, d] : llvm::zip(m.getResults(), dims))
      if (!isDim(e, d))
        return false;
  }
  return true;
}

/// The single value the body yields.
Value yielded(linalg::GenericOp op) {
  auto yield = cast<linalg::YieldOp>(op.getRegion().front().getTerminator());
  return yield.getNumOperands() == 1 ? yield.getOperand(0) : Value();
}

BlockArgument arg(linalg::GenericOp op, unsigned i) {
  return op.getRegion().front().getArgument(i);
}

template <typename OpT> OpT def(Value v) {
  return v ? v.getDefiningOp<OpT>() : OpT();
}

/// `linalg.index d`, maybe through an `index_cast`.
bool isIndex(Value v, unsigned d) {
  if (auto c = def<arith::IndexCastOp>(v))
    v = c.getIn();
  auto i = def<linalg::IndexOp>(v);
  return i && i.getDim() == d;
}

/// `v` maybe through an `index_cast` or `extsi`.
Value throughCast(Value v) {
  if (auto c = def<arith::IndexCastOp>(v))
    return c.getIn();
  if (auto c = def<arith::ExtSIOp>(v))
    return c.getIn();
  return v;
}

bool isConstInt(Value v, int64_t value) {
  APInt c;
  return v && matchPattern(v, m_ConstantInt(&c)) && c.getSExtValue() == value;
}

/// `add(out, x)` (either order) of integers or floats: `x`.
Value addToOut(linalg::GenericOp op, Value sum) {
  Value out = op.getRegion().front().getArguments().back();
  Operation *add = sum ? sum.getDefiningOp() : nullptr;
  if (!add || !isa<arith::AddIOp, arith::AddFOp>(add))
    return {};
  if (add->getOperand(0) == out)
    return add->getOperand(1);
  if (add->getOperand(1) == out)
    return add->getOperand(0);
  return {};
}

/// Whether `v` is a `linalg.fill` of zero.
bool isZeros(Value v) {
  auto fill = def<linalg::FillOp>(v);
  return fill && (matchPattern(fill.getInputs()[0], m_Zero()) ||
                  matchPattern(fill.getInputs()[0], m_AnyZeroFloat()));
}

/// rank[i] = #{j : flat[j] < flat[i] or (flat[j] == flat[i] and j < i)}:
/// the importer's stable argsort position, ascending.
bool isStableRank(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 ||
      op.getDpsInputs()[0] != op.getDpsInputs()[1] ||
      !shapeIs(op, {par, red}, {{0}, {1}, {0}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  auto ext = def<arith::ExtUIOp>(addToOut(op, yielded(op)));
  auto any = def<arith::OrIOp>(ext ? ext.getIn() : Value());
  if (!any)
    return false;
  auto lt = def<arith::CmpIOp>(any.getLhs());
  auto tie = def<arith::AndIOp>(any.getRhs());
  if (!lt || !tie || lt.getPredicate() != arith::CmpIPredicate::slt ||
      lt.getLhs() != arg(op, 1) || lt.getRhs() != arg(op, 0))
    return false;
  auto eq = def<arith::CmpIOp>(tie.getLhs());
  auto before = def<arith::CmpIOp>(tie.getRhs());
  return eq && before && eq.getPredicate() == arith::CmpIPredicate::eq &&
         eq.getLhs() == arg(op, 1) && eq.getRhs() == arg(op, 0) &&
         before.getPredicate() == arith::CmpIPredicate::ult &&
         isIndex(before.getLhs(), 1) && isIndex(before.getRhs(), 0);
}

/// order[i] = sum_j select(rank[j] == i, j, 0): the inverse permutation.
bool isInverse(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || !shapeIs(op, {par, red}, {{1}, {0}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  auto select = def<arith::SelectOp>(addToOut(op, yielded(op)));
  if (!select || !isIndex(select.getTrueValue(), 1) ||
      !isConstInt(select.getFalseValue(), 0))
    return false;
  auto eq = def<arith::CmpIOp>(select.getCondition());
  return eq && eq.getPredicate() == arith::CmpIPredicate::eq &&
         eq.getLhs() == arg(op, 0) && isIndex(eq.getRhs(), 0);
}

/// counts[e] = sum_r select(flat[r] == e, 1, 0): `bincount`.
bool isBincount(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || !shapeIs(op, {par, red}, {{1}, {0}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  // select(eq, 1, 0), or extui(eq) as canonicalized.
  Value term = addToOut(op, yielded(op)), cond;
  if (auto select = def<arith::SelectOp>(term)) {
    if (!isConstInt(select.getTrueValue(), 1) ||
        !isConstInt(select.getFalseValue(), 0))
      return false;
    cond = select.getCondition();
  } else if (auto ext = def<arith::ExtUIOp>(term)) {
    cond = ext.getIn();
  }
  auto eq = def<arith::CmpIOp>(cond);
  return eq && eq.getPredicate() == arith::CmpIPredicate::eq &&
         eq.getLhs() == arg(op, 0) && isIndex(eq.getRhs(), 0);
}

/// offs[e] = sum_{e' <= e} counts[e']: the inclusive cumulative sum.
bool isCumsum(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || !shapeIs(op, {par, red}, {{1}, {0}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  auto select = def<arith::SelectOp>(addToOut(op, yielded(op)));
  if (!select || !isConstInt(select.getFalseValue(), 0))
    return false;
  Value v = select.getTrueValue();
  if (auto t = def<arith::TruncIOp>(v))
    v = t.getIn();
  auto le = def<arith::CmpIOp>(select.getCondition());
  return v == arg(op, 0) && le &&
         le.getPredicate() == arith::CmpIPredicate::ule &&
         isIndex(le.getLhs(), 1) && isIndex(le.getRhs(), 0);
}

/// g[r] = #{e : offs[e] <= r}: the rows' groups from their ends.
bool isGroupsOf(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || !shapeIs(op, {par, red}, {{1}, {0}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  auto ext = def<arith::ExtUIOp>(addToOut(op, yielded(op)));
  auto le = def<arith::CmpIOp>(ext ? ext.getIn() : Value());
  return le && le.getPredicate() == arith::CmpIPredicate::sle &&
         throughCast(le.getLhs()) == arg(op, 0) && isIndex(le.getRhs(), 0);
}

/// out[r] = in[r] floordiv k: the item's token. Returns k.
std::optional<int64_t> floorDivConstant(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || !shapeIs(op, {par}, {{0}, {0}}))
    return std::nullopt;
  auto div = def<arith::FloorDivSIOp>(yielded(op));
  APInt k;
  if (!div || div.getLhs() != arg(op, 0) ||
      !matchPattern(div.getRhs(), m_ConstantInt(&k)) || k.getSExtValue() <= 0)
    return std::nullopt;
  return k.getSExtValue();
}

/// The importer's index bounds check: `ok = generic(v)` (v, wrapped if
/// negative, in [0, bound)) and `idx = generic(v, ok)` (v wrapped where
/// ok, else 0). Returns (v, ok) for `idx` when the check's bound is
/// `bound`.
std::optional<std::pair<Value, Value>> throughBoundsCheck(Value idx,
                                                          int64_t bound) {
  auto use = def<linalg::GenericOp>(idx);
  if (!use || use.getNumDpsInputs() != 2 ||
      !shapeIs(use, {par}, {{0}, {0}, {0}}))
    return std::nullopt;
  Value v = use.getDpsInputs()[0], ok = use.getDpsInputs()[1];
  auto check = def<linalg::GenericOp>(ok);
  if (!check || check.getNumDpsInputs() != 1 || check.getDpsInputs()[0] != v ||
      !shapeIs(check, {par}, {{0}, {0}}))
    return std::nullopt;
  // The yielded select(ok, wrapped, 0), and the check's upper bound.
  auto select = def<arith::SelectOp>(yielded(use));
  if (!select || select.getCondition() != arg(use, 1) ||
      !isConstInt(select.getFalseValue(), 0))
    return std::nullopt;
  auto both = def<arith::AndIOp>(yielded(check));
  auto below = def<arith::CmpIOp>(both ? both.getRhs() : Value());
  if (!below || below.getPredicate() != arith::CmpIPredicate::slt ||
      !isConstInt(below.getRhs(), bound))
    return std::nullopt;
  return std::make_pair(v, ok);
}

/// out[i, ...] = tensor.extract %table[index_cast(in[i]), index 1 ...]: a
/// gather of `table`'s rows by `in` (all of a row). Returns the table.
Value gatherTable(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1)
    return {};
  auto extract = def<tensor::ExtractOp>(yielded(op));
  if (!extract)
    return {};
  auto type = cast<RankedTensorType>(extract.getTensor().getType());
  int64_t rank = type.getRank();
  SmallVector<IteratorType> it(rank, par);
  SmallVector<unsigned> all;
  for (unsigned d = 0; d < rank; ++d)
    all.push_back(d);
  if (!shapeIs(op, it, {{0}, all}) ||
      throughCast(extract.getIndices()[0]) != arg(op, 0))
    return {};
  for (int64_t d = 1; d < rank; ++d)
    if (!isIndex(extract.getIndices()[d], d))
      return {};
  // The table is captured from above the op.
  if (op->isAncestor(extract.getTensor().getParentBlock()->getParentOp()))
    return {};
  return extract.getTensor();
}

/// out[t, d] = sum_r select(t == idx[r], ys[r, d], 0): `index_add` of rows
/// into zeros.
bool isIndexAdd(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 ||
      !shapeIs(op, {par, par, red}, {{2}, {2, 1}, {0, 1}}) ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  auto select = def<arith::SelectOp>(addToOut(op, yielded(op)));
  if (!select || select.getTrueValue() != arg(op, 1) ||
      !matchPattern(select.getFalseValue(), m_AnyZeroFloat()))
    return false;
  auto eq = def<arith::CmpIOp>(select.getCondition());
  return eq && eq.getPredicate() == arith::CmpIPredicate::eq &&
         ((isIndex(eq.getLhs(), 0) && throughCast(eq.getRhs()) == arg(op, 0)) ||
          (isIndex(eq.getRhs(), 0) && throughCast(eq.getLhs()) == arg(op, 0)));
}

/// out[r, d] = ys[r, d] * w[r]: rows weighted by their gates.
bool isRowScale(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 ||
      !shapeIs(op, {par, par}, {{0, 1}, {0}, {0, 1}}))
    return false;
  auto mul = def<arith::MulFOp>(yielded(op));
  return mul && mul.getLhs() == arg(op, 0) && mul.getRhs() == arg(op, 1);
}

/// An elementwise generic over rows: all loops parallel, every map the
/// identity, inits only written.
bool isRowElementwise(linalg::GenericOp op) {
  if (op.getNumResults() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumParallelLoops() != op.getNumLoops() || op.getNumLoops() != 2)
    return false;
  for (AffineMap m : op.getIndexingMapsArray())
    if (!m.isIdentity())
      return false;
  return op.getRegion().front().getArguments().back().use_empty();
}

//===----------------------------------------------------------------------===//
// The dispatch
//===----------------------------------------------------------------------===//

/// One matched MoE dispatch and combine.
struct Dispatch {
  linalg::GenericOp indexAdd, rowScale, gateGather, tokenGather, token, inverse,
      rank;
  /// The experts' ops, rows [R, *] in, rows out, in program order; the
  /// last one's result is the rows `rowScale` weights.
  SmallVector<linalg::GenericOp> experts;
  /// A grouped matmul's groups: bincount, cumsum, groups-of generics.
  linalg::GenericOp bincount, cumsum;
  SmallVector<linalg::GenericOp> groups;
  /// The tokens [T, D], the items' experts and gates [R], the weights.
  Value x, flat, gates;
  SetVector<Value> weights;
  /// The bounds checks' masks of the replaced indices.
  SmallVector<Value> masks;
  int64_t k = 0;
  /// The mesh axes the experts are split over, in split order.
  SmallVector<int64_t> axes;
  DimSharding expertSplit;
};

/// The layout `v` is produced in, if it is `[S(0) over ..., whole]` with
/// block splits and no pending op.
std::optional<DimSharding> rowsSplit(Value v) {
  LayoutAttr attr = getRecordedLayout(v);
  if (!attr)
    return std::nullopt;
  const Layout &l = attr.getLayout();
  if (l.hasPartial())
    return std::nullopt;
  const DimSharding *d0 = l.getDim(0);
  if (!d0 || !d0->sizes.empty())
    return std::nullopt;
  for (const auto &s : d0->splits)
    if (s.stride != 1)
      return std::nullopt;
  for (const DimSharding &d : l.getDims())
    if (d.dim != 0)
      return std::nullopt;
  return *d0;
}

class Matcher {
public:
  explicit Matcher(linalg::GenericOp indexAdd) { m.indexAdd = indexAdd; }

  /// The dispatch ending at `indexAdd`, or nullopt.
  std::optional<Dispatch> match();

private:
  bool matchExperts(Value rows);
  bool matchGroups(Value g);

  Dispatch m;
};

std::optional<Dispatch> Matcher::match() {
  linalg::GenericOp ia = m.indexAdd;
  if (!isIndexAdd(ia))
    return std::nullopt;
  auto outType = cast<RankedTensorType>(ia.getResult(0).getType());
  int64_t tokens = outType.getDimSize(0);
  // The rows weighted by their gates: ys = Y * gates[order].
  m.rowScale = def<linalg::GenericOp>(ia.getDpsInputs()[1]);
  if (!m.rowScale || !isRowScale(m.rowScale))
    return std::nullopt;
  auto rowType = cast<RankedTensorType>(m.rowScale.getResult(0).getType());
  int64_t rows = rowType.getDimSize(0);
  if (ShapedType::isDynamic(rows) || ShapedType::isDynamic(tokens) ||
      rows % tokens)
    return std::nullopt;
  m.gateGather = def<linalg::GenericOp>(m.rowScale.getDpsInputs()[1]);
  if (!m.gateGather)
    return std::nullopt;
  m.gates = gatherTable(m.gateGather);
  auto orderIdx = throughBoundsCheck(m.gateGather.getDpsInputs()[0], rows);
  if (!m.gates || !orderIdx)
    return std::nullopt;
  m.masks.push_back(orderIdx->second);
  m.inverse = def<linalg::GenericOp>(orderIdx->first);
  if (!m.inverse || !isInverse(m.inverse))
    return std::nullopt;
  m.rank = def<linalg::GenericOp>(m.inverse.getDpsInputs()[0]);
  if (!m.rank || !isStableRank(m.rank))
    return std::nullopt;
  m.flat = m.rank.getDpsInputs()[0];
  // The token of each row: order floordiv k, through the index_add's
  // bounds check.
  auto tokenIdx = throughBoundsCheck(ia.getDpsInputs()[0], tokens);
  if (!tokenIdx)
    return std::nullopt;
  m.masks.push_back(tokenIdx->second);
  m.token = def<linalg::GenericOp>(tokenIdx->first);
  std::optional<int64_t> k = m.token ? floorDivConstant(m.token) : std::nullopt;
  if (!k || m.token.getDpsInputs()[0] != orderIdx->first || *k * tokens != rows)
    return std::nullopt;
  m.k = *k;
  // The experts, from the rows the gates weight back to the gathered
  // tokens' rows.
  Value y = m.rowScale.getDpsInputs()[0];
  if (!matchExperts(y))
    return std::nullopt;
  // The gathered rows: x[token], through the gather's bounds check.
  auto xsIdx = throughBoundsCheck(m.tokenGather.getDpsInputs()[0], tokens);
  if (!xsIdx || xsIdx->first != m.token.getResult(0))
    return std::nullopt;
  m.masks.push_back(xsIdx->second);
  m.x = gatherTable(m.tokenGather);
  if (!m.x || cast<RankedTensorType>(m.x.getType()).getRank() != 2 ||
      cast<RankedTensorType>(m.x.getType()).getDimSize(0) != tokens ||
      m.x.getType() != ia.getResult(0).getType())
    return std::nullopt;
  // The experts' split: one for every weight, on E over axes A.
  std::optional<DimSharding> split;
  for (Value w : m.weights) {
    std::optional<DimSharding> s = rowsSplit(w);
    if (!s || (split && *s != *split))
      return std::nullopt;
    split = s;
  }
  if (!split)
    return std::nullopt;
  m.expertSplit = *split;
  for (const auto &s : split->splits)
    m.axes.push_back(s.axis);
  // The tokens, their experts and gates split alike on dim 0, over axes
  // that include A.
  std::optional<DimSharding> tokenSplit = rowsSplit(m.x);
  if (!tokenSplit || rowsSplit(m.flat) != tokenSplit ||
      rowsSplit(m.gates) != tokenSplit ||
      (axisMask(*split) & ~axisMask(*tokenSplit)))
    return std::nullopt;
  return m;
}

/// Collects the experts' ops backward from `rows`: rows-form grouped
/// matmuls (the weights split, the groups `matchGroups`) and row-wise
/// elementwise ops, down to one gather of the tokens' rows.
bool Matcher::matchExperts(Value rows) {
  SmallVector<Value> worklist = {rows};
  SetVector<Operation *> seen;
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    auto op = def<linalg::GenericOp>(v);
    if (!op)
      return false;
    if (seen.contains(op))
      continue;
    if (Value table = gatherTable(op)) {
      if (m.tokenGather && m.tokenGather != op)
        return false;
      m.tokenGather = op;
      continue;
    }
    seen.insert(op);
    std::optional<GroupedMatmulForm> form = matchGroupedMatmulForm(op);
    if (form == GroupedMatmulForm::Rows) {
      if (!isZeros(op.getDpsInits()[0]) || !matchGroups(op.getDpsInputs()[2]))
        return false;
      m.weights.insert(op.getDpsInputs()[1]);
      worklist.push_back(op.getDpsInputs()[0]);
      continue;
    }
    if (form || !isRowElementwise(op))
      return false;
    for (Value in : op.getDpsInputs())
      worklist.push_back(in);
  }
  if (!m.tokenGather)
    return false;
  // Program order; every value but the last read by the experts' ops only
  // (a train step's backward reads them too: not matched).
  for (Operation &op : *m.indexAdd->getBlock())
    if (seen.contains(&op))
      m.experts.push_back(cast<linalg::GenericOp>(op));
  for (linalg::GenericOp op : m.experts)
    for (Operation *user : op.getResult(0).getUsers())
      if (!seen.contains(user) &&
          !(op.getResult(0) == rows && user == m.rowScale))
        return false;
  return llvm::hasSingleElement(rows.getUsers());
}

/// `g` is the groups of the sorted items: groupsOf(cumsum(bincount(flat))).
bool Matcher::matchGroups(Value g) {
  auto groups = def<linalg::GenericOp>(g);
  if (!groups || !isGroupsOf(groups))
    return false;
  auto cumsum = def<linalg::GenericOp>(groups.getDpsInputs()[0]);
  if (!cumsum || !isCumsum(cumsum))
    return false;
  auto bincount = def<linalg::GenericOp>(cumsum.getDpsInputs()[0]);
  if (!bincount || !isBincount(bincount) ||
      (m.bincount && (m.bincount != bincount || m.cumsum != cumsum)))
    return false;
  m.bincount = bincount;
  m.cumsum = cumsum;
  m.groups.push_back(groups);
  // The same items as the sort's (checked against the rank's input later:
  // the bincount reads `flat`).
  return !m.flat || bincount.getDpsInputs()[0] == m.flat;
}

//===----------------------------------------------------------------------===//
// The local program
//===----------------------------------------------------------------------===//

class Builder {
public:
  Builder(Dispatch &m, MeshOp mesh)
      : m(m), mesh(mesh), b(m.indexAdd), loc(m.indexAdd.getLoc()) {}

  /// Builds the local program before the index_add; returns its global
  /// result (a cast recorded with x's layout).
  Value build();

private:
  RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }
  /// A fresh init of `type` like `old`: a fill of the same scalar, or
  /// empty.
  Value initLike(Value old, RankedTensorType type) {
    Value empty =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    if (auto fill = def<linalg::FillOp>(old))
      return linalg::FillOp::create(b, loc, fill.getInputs()[0], empty)
          .getResult(0);
    return empty;
  }
  Value zeros(RankedTensorType type) {
    Value zero = arith::ConstantOp::create(
        b, loc, type.getElementType(), b.getZeroAttr(type.getElementType()));
    Value empty =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    return linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  }
  /// `op` again on `inputs` into `init`, captured values mapped by
  /// `captures`.
  Value clone(linalg::GenericOp op, ValueRange inputs, Value init,
              IRMapping captures = {}) {
    auto fresh = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, inputs, ValueRange{init},
        op.getIndexingMapsArray(), op.getIteratorTypesArray());
    op.getRegion().cloneInto(&fresh.getRegion(), captures);
    fresh->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
    return fresh.getResult(0);
  }
  /// The local value of global `v` (read in its recorded layout).
  Value toLocal(Value v) {
    LayoutAttr layout = getRecordedLayout(v);
    auto type = layout.getLocalType(cast<RankedTensorType>(v.getType()),
                                    mesh.getShape());
    auto cast = UnrealizedConversionCastOp::create(b, loc, type, v);
    cast->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                  b.getArrayAttr({layout}));
    return cast.getResult(0);
  }
  /// sums[j] = sum_l counts[j * el + l] for counts [n * el].
  Value sumRuns(Value counts, int64_t n, int64_t el) {
    Type i64 = b.getI64Type();
    Value runs = tensor::ExpandShapeOp::create(
        b, loc, tensorOf({n, el}, i64), counts,
        SmallVector<ReassociationIndices>{{0, 1}});
    MLIRContext *ctx = b.getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(2, ctx);
    AffineMap first = AffineMap::get(2, 0, {getAffineDimExpr(0, ctx)}, ctx);
    auto sum = linalg::GenericOp::create(
        b, loc, TypeRange{tensorOf({n}, i64)}, ValueRange{runs},
        ValueRange{zeros(tensorOf({n}, i64))}, ArrayRef<AffineMap>{id, first},
        ArrayRef<IteratorType>{par, red},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          linalg::YieldOp::create(
              nb, l, ValueRange{arith::AddIOp::create(nb, l, a[0], a[1])});
        });
    sum->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
    return sum.getResult(0);
  }
  /// A received row's local expert from its run `in[r]` among the
  /// (member, expert) runs: `in[r] mod el`, or `el` (no expert) for the rows
  /// past the last run (`in[r] == slots`: the buffer's zero rows).
  Value localExpert(Value in, int64_t el, int64_t slots) {
    auto type = cast<RankedTensorType>(in.getType());
    MLIRContext *ctx = b.getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(1, ctx);
    Value perRank = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(el));
    Value all = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(slots));
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{type}, ValueRange{in},
        ValueRange{tensor::EmptyOp::create(b, loc, type.getShape(),
                                           type.getElementType())},
        ArrayRef<AffineMap>{id, id}, ArrayRef<IteratorType>{par},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value past = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge,
                                             a[0], all);
          Value expert = arith::RemSIOp::create(nb, l, a[0], perRank);
          linalg::YieldOp::create(nb, l,
                                  ValueRange{arith::SelectOp::create(
                                      nb, l, past, perRank, expert)});
        });
    op->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
    return op.getResult(0);
  }

  Dispatch &m;
  MeshOp mesh;
  OpBuilder b;
  Location loc;
};

Value Builder::build() {
  Type i64 = b.getI64Type();
  int64_t n = 1;
  for (int64_t a : m.axes)
    n *= mesh.getShape()[a];
  auto weight0 = cast<RankedTensorType>(m.weights.front().getType());
  int64_t experts = weight0.getDimSize(0);
  int64_t el = llvm::divideCeil(experts, n), slots = n * el;
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  auto axesAttr = b.getDenseI64ArrayAttr(m.axes);

  Value x = toLocal(m.x), flat = toLocal(m.flat), gates = toLocal(m.gates);
  auto xType = cast<RankedTensorType>(x.getType());
  int64_t tokens = xType.getDimSize(0), dim = xType.getDimSize(1);
  int64_t items = tokens * m.k, received = n * items;
  IRMapping weights;
  for (Value w : m.weights)
    weights.map(w, toLocal(w));

  // This rank's items sorted by expert (stable): slot s holds item inv[s]
  // of token inv[s] / k.
  auto items64 = tensorOf({items}, i64);
  Value pos =
      clone(m.rank, {flat, flat}, initLike(m.rank.getDpsInits()[0], items64));
  Value inv =
      clone(m.inverse, {pos}, initLike(m.inverse.getDpsInits()[0], items64));
  Value token =
      clone(m.token, {inv}, initLike(m.token.getDpsInits()[0], items64));
  IRMapping fromX;
  fromX.map(m.x, x);
  Value send = clone(m.tokenGather, {token},
                     initLike(m.tokenGather.getDpsInits()[0],
                              tensorOf({items, dim}, xType.getElementType())),
                     fromX);
  // Per-expert counts, padded to n * el slots (member j's experts are
  // j * el ..): each member's, and what each member sends this rank.
  Value counts = clone(m.bincount, {flat}, zeros(tensorOf({slots}, i64)));
  Value sendCounts = sumRuns(counts, n, el);
  auto fromEach = AllToAllOp::create(
      b, loc, tensorOf({slots}, i64), counts, meshRef, axesAttr,
      b.getI64IntegerAttr(0), b.getI64IntegerAttr(0), b.getI64IntegerAttr(1),
      b.getI64IntegerAttr(1), DenseI64ArrayAttr());
  fromEach->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
  Value recvCounts = sumRuns(fromEach.getResult(), n, el);
  // Dispatch: the received rows, by member, by expert within a member's.
  auto dispatch = RaggedAllToAllOp::create(
      b, loc, tensorOf({received, dim}, xType.getElementType()), Type(), send,
      sendCounts, recvCounts, meshRef, axesAttr);
  dispatch->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
  Value rows = dispatch.getResult();
  // A received row's local expert: its run (member i, expert l) among the
  // runs' ends, l = run mod el; `el` for the zero rows after the last run.
  auto cumType = cast<RankedTensorType>(m.cumsum.getResult(0).getType());
  Type cumElt = cumType.getElementType();
  Value ends =
      clone(m.cumsum, {fromEach.getResult()}, zeros(tensorOf({slots}, cumElt)));
  Value runs =
      clone(m.groups.front(), {ends}, zeros(tensorOf({received}, i64)));
  Value expert = localExpert(runs, el, slots);
  // The rows sorted by local expert (the same stable argsort; torchtitan's
  // permute), the zero rows last, and their groups counted as the global
  // program counts them: nondecreasing, so shardx-localize runs each grouped
  // matmul over the received rows only.
  auto received64 = tensorOf({received}, i64);
  Value rank = clone(m.rank, {expert, expert},
                     initLike(m.rank.getDpsInits()[0], received64));
  Value unrank = clone(m.inverse, {rank},
                       initLike(m.inverse.getDpsInits()[0], received64));
  auto rowsType = tensorOf({received, dim}, xType.getElementType());
  IRMapping fromRows;
  fromRows.map(m.x, rows);
  Value sorted =
      clone(m.tokenGather, {unrank},
            initLike(m.tokenGather.getDpsInits()[0], rowsType), fromRows);
  Value perExpert = clone(m.bincount, {expert}, zeros(tensorOf({el + 1}, i64)));
  Value expertEnds =
      clone(m.cumsum, {perExpert}, zeros(tensorOf({el + 1}, cumElt)));
  Value groups = clone(m.groups.front(), {expertEnds}, zeros(received64));
  // The experts over the sorted rows.
  IRMapping values;
  values.map(m.tokenGather.getResult(0), sorted);
  for (linalg::GenericOp op : m.experts) {
    SmallVector<Value> inputs;
    for (Value in : op.getDpsInputs()) {
      if (weights.contains(in))
        inputs.push_back(weights.lookup(in));
      else if (llvm::is_contained(m.groups, def<linalg::GenericOp>(in)))
        inputs.push_back(groups);
      else
        inputs.push_back(values.lookup(in));
    }
    auto type = cast<RankedTensorType>(op.getResult(0).getType());
    Value init =
        initLike(op.getDpsInits()[0], tensorOf({received, type.getDimSize(1)},
                                               type.getElementType()));
    values.map(op.getResult(0), clone(op, inputs, init));
  }
  // Back in the received order.
  IRMapping fromSorted;
  fromSorted.map(m.x, values.lookup(m.experts.back().getResult(0)));
  Value unsorted =
      clone(m.tokenGather, {rank},
            initLike(m.tokenGather.getDpsInits()[0], rowsType), fromSorted);
  // Combine: the rows back to their items' slots.
  auto combine = RaggedAllToAllOp::create(
      b, loc, tensorOf({items, dim}, xType.getElementType()), Type(), unsorted,
      recvCounts, sendCounts, meshRef, axesAttr);
  combine->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
  Value back = combine.getResult();
  // Weighted by their gates and added to their tokens.
  IRMapping fromGates;
  fromGates.map(m.gates, gates);
  auto gatesType = cast<RankedTensorType>(gates.getType());
  Value slotGates =
      clone(m.gateGather, {inv},
            initLike(m.gateGather.getDpsInits()[0],
                     tensorOf({items}, gatesType.getElementType())),
            fromGates);
  Value weighted =
      clone(m.rowScale, {back, slotGates},
            initLike(m.rowScale.getDpsInits()[0],
                     tensorOf({items, dim}, xType.getElementType())));
  Value out = clone(m.indexAdd, {token, weighted},
                    initLike(m.indexAdd.getDpsInits()[0], xType));
  auto result = UnrealizedConversionCastOp::create(
      b, loc, m.indexAdd.getResult(0).getType(), out);
  setResultLayout(result->getResult(0), getRecordedLayout(m.x));
  return result.getResult(0);
}

/// Replaces the range checks' counts of the masks' false entries with
/// zeros: `sum(extui(not(mask)))`.
void zeroChecks(Dispatch &m) {
  for (Value mask : m.masks) {
    for (Operation *user : llvm::make_early_inc_range(mask.getUsers())) {
      auto negate = dyn_cast<linalg::GenericOp>(user);
      if (!negate || negate.getNumDpsInputs() != 1 ||
          !shapeIs(negate, {par}, {{0}, {0}}))
        continue;
      auto ext = def<arith::ExtUIOp>(yielded(negate));
      auto x = def<arith::XOrIOp>(ext ? ext.getIn() : Value());
      if (!x || !(x.getLhs() == arg(negate, 0) || x.getRhs() == arg(negate, 0)))
        continue;
      for (Operation *sumUser :
           llvm::make_early_inc_range(negate.getResult(0).getUsers())) {
        auto sum = dyn_cast<linalg::GenericOp>(sumUser);
        if (!sum || sum.getNumDpsInputs() != 1 ||
            !shapeIs(sum, {red}, {{0}, {}}) || !isZeros(sum.getDpsInits()[0]) ||
            !addToOut(sum, yielded(sum)))
          continue;
        OpBuilder b(sum);
        auto type = cast<RankedTensorType>(sum.getResult(0).getType());
        auto zero = arith::ConstantOp::create(
            b, sum.getLoc(), cast<TypedAttr>(b.getZeroAttr(type)));
        if (LayoutAttr layout = getRecordedLayout(sum.getResult(0)))
          setResultLayout(zero->getResult(0), layout);
        sum.getResult(0).replaceAllUsesWith(zero.getResult());
      }
    }
  }
}

/// Erases the ops of `fn` whose results are unused and that have no other
/// effect, last first.
void eraseDead(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body))) {
      if (op.hasTrait<OpTrait::IsTerminator>() || !op.use_empty() ||
          !isMemoryEffectFree(&op))
        continue;
      op.erase();
      changed = true;
    }
  }
}

struct RaggedDispatchPass
    : public mlir::shardx::impl::RaggedDispatchPassBase<RaggedDispatchPass> {
  void runOnOperation() override {
    auto each = [&](func::FuncOp fn, MeshOp mesh) {
      if (!fn.getBody().hasOneBlock())
        return success();
      SmallVector<Dispatch, 1> found;
      fn.walk([&](linalg::GenericOp op) {
        if (std::optional<Dispatch> d = Matcher(op).match())
          found.push_back(*d);
      });
      for (Dispatch &d : found) {
        Value out = Builder(d, mesh).build();
        d.indexAdd.getResult(0).replaceAllUsesWith(out);
        zeroChecks(d);
      }
      if (!found.empty())
        eraseDead(fn);
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), each)))
      return signalPassFailure();
  }
};

} // namespace
