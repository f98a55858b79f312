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
// The global forward (torchtitan's form, as the importer writes it after
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
// Where the tokens do not divide over their axes (propagation then keeps the
// flattened choices whole), the items' split is the tokens' and each rank's
// tokens are padded to the most any rank holds: the choices and gates read
// from their [T, k] forms, padded (the padding's choices past every
// expert: never counted, sorted last, never sent) and flattened, x padded
// with zero rows, and the output sliced to the rank's own tokens. A train
// step is not matched there (its gates' gradient leaves by item).
//
// A train step's backward (make_fx of torch.autograd.grad) is the same
// kind of program over the same rows: the output gradient's rows gathered
// by token (the combine's gradient), row-wise products with the gates and
// the experts' outputs, Rows grouped matmuls over transposed weights,
// Weights grouped matmuls (the experts' gradients), an index_add by token
// (the dispatch's gradient) and one by item (the gates'). The pass matches
// every op that reads the routed rows (the "rows' program", from the
// gathers by token or order to the adds back by token or item, the weights'
// gradients) and builds each in the rank's program, on one side or both: a
// value lives on the rank of its items ("sent": its own items sorted by
// expert), on the rank of its expert ("received"), or both. Gathers make
// sent values, grouped matmuls read and make received ones, a row-wise op
// runs received where all its operands are there and sent otherwise, and
// the adds run sent; a value crosses by the dispatch (sent -> received)
// or the combine (received -> sent), each at most once. A forward and
// backward so move four row sets: the tokens' rows out, the experts'
// outputs back, the output gradient's rows out (dispatched as the
// combine's gradient is) and the input rows' gradients back (combined as
// the dispatch's gradient is). The gate gradient is the row-wise product
// with the combined outputs, as the global program computes it; the
// experts' gradients stay on their ranks, a partial sum over the items'
// axes outside A (e.g. dp).
//
// The pass replaces the global ops with the rank's local ops, bracketed by
// `unrealized_conversion_cast`s as lowered reshards are: global -> local
// casts of the gathered tables, flat and the weights, read in the items'
// split on dim 0 (the tables, flat) or the weights' recorded layouts
// (shardx-insert-reshards reshards a table produced in another layout),
// and local -> global casts of the adds' and the weights' gradients'
// results, recorded in those layouts. shardx-localize maps the casts to
// the local values and clones the local ops, which carry no layouts, as
// they are. The range checks of the replaced gathers' indices (derived
// from a permutation, in range) become zeros. A rows' value read by any
// other op (or returned) leaves the whole dispatch to the propagated plan.
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

/// Whether `w` is `v` wrapped if negative: `select(v < 0, v + bound, v)`,
/// or `v` itself.
bool isWrapped(Value w, Value v, int64_t bound) {
  if (w == v)
    return true;
  auto select = def<arith::SelectOp>(w);
  auto neg = def<arith::CmpIOp>(select ? select.getCondition() : Value());
  auto add = def<arith::AddIOp>(select ? select.getTrueValue() : Value());
  return neg && add && select.getFalseValue() == v &&
         neg.getPredicate() == arith::CmpIPredicate::slt && neg.getLhs() == v &&
         isConstInt(neg.getRhs(), 0) &&
         ((add.getLhs() == v && isConstInt(add.getRhs(), bound)) ||
          (add.getRhs() == v && isConstInt(add.getLhs(), bound)));
}

/// The importer's index bounds check: `ok = generic(v)` (v, wrapped if
/// negative, in [0, bound)) and `idx = generic(v, ok)` (v wrapped where
/// ok, else 0). Returns (v, ok) for `idx` when the check's bound is
/// `bound`. (A v in range is then idx and ok true: the pass reads idx as
/// v, so both bodies must be these.)
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
      !isWrapped(select.getTrueValue(), arg(use, 0), bound) ||
      !isConstInt(select.getFalseValue(), 0))
    return std::nullopt;
  // and(w >= 0, w < bound) of the wrapped w.
  auto both = def<arith::AndIOp>(yielded(check));
  auto above = def<arith::CmpIOp>(both ? both.getLhs() : Value());
  auto below = def<arith::CmpIOp>(both ? both.getRhs() : Value());
  if (!above || !below || above.getPredicate() != arith::CmpIPredicate::sge ||
      !isConstInt(above.getRhs(), 0) ||
      below.getPredicate() != arith::CmpIPredicate::slt ||
      !isConstInt(below.getRhs(), bound) || above.getLhs() != below.getLhs() ||
      !isWrapped(below.getLhs(), arg(check, 0), bound))
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

/// out[i, ...] = sum_r select(i == idx[r], vals[r, ...], 0): rows added
/// into zeros at their index, of any rank (loops (i, ..., r)).
bool isScatterAdd(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 2 || op.getNumResults() != 1 ||
      !isZeros(op.getDpsInits()[0]))
    return false;
  int64_t rank = cast<RankedTensorType>(op.getResult(0).getType()).getRank();
  SmallVector<IteratorType> it(rank, par);
  it.push_back(red);
  SmallVector<unsigned> vals = {unsigned(rank)}, out;
  for (unsigned d = 0; d < rank; ++d) {
    if (d > 0)
      vals.push_back(d);
    out.push_back(d);
  }
  if (!shapeIs(op, it, {{unsigned(rank)}, vals, out}))
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

/// out[t, d] = sum_r select(t == idx[r], ys[r, d], 0): `index_add` of rows
/// into zeros, the 2-d scatter add.
bool isIndexAdd(linalg::GenericOp op) {
  return isScatterAdd(op) &&
         cast<RankedTensorType>(op.getResult(0).getType()).getRank() == 2;
}

//===----------------------------------------------------------------------===//
// The routed rows' program
//===----------------------------------------------------------------------===//

/// What an op of the routed rows' program is. Its values are indexed by
/// the sorted items' rows r in [R] ("rows"); the ops that make them from
/// the tokens or the items, run the experts on them, and add them back.
enum class RowOpKind {
  /// out[r] = table[token[r]]: the tokens' rows (x, an output's gradient).
  TokenGather,
  /// out[r] = table[order[r]]: the items' values (the gates).
  ItemGather,
  /// Elementwise, or a reduction within each row; never reads r itself.
  RowWise,
  /// [R, K] -> [K, R], read by a Weights grouped matmul only.
  Transpose,
  /// A Rows grouped matmul: rows x weights (maybe transposed) -> rows.
  GroupedRows,
  /// A Weights grouped matmul: the weights' gradient, [E, K, N].
  GroupedWeights,
  /// index_add of rows into zeros [T, ...] by token (the combine, and the
  /// dispatch's gradient).
  TokenAdd,
  /// The same by item into zeros [R, ...] (the gate gather's gradient).
  ItemAdd,
};

struct RowOp {
  linalg::LinalgOp op;
  RowOpKind kind;
  /// Gathers: the table. GroupedRows: the weight, before its transpose.
  Value source;
  bool transposed = false;
};

/// One matched MoE dispatch: the routing, and every op of its rows.
struct Dispatch {
  /// The routing: rank = stable argsort position of flat, order its
  /// inverse, token = order floordiv k.
  linalg::GenericOp rank, inverse, token;
  Value flat;
  int64_t k = 0, tokens = 0, items = 0;
  /// A grouped matmul's groups: bincount, cumsum, groups-of generics.
  linalg::GenericOp bincount, cumsum;
  SmallVector<linalg::GenericOp> groups;
  /// The rows' ops, in program order.
  SmallVector<RowOp> ops;
  SetVector<Value> weights;
  /// The bounds checks' masks of the replaced indices.
  SetVector<Value> masks;
  /// The mesh axes the experts are split over, in split order; the items'
  /// (and tokens') split on dim 0.
  SmallVector<int64_t> axes;
  DimSharding itemSplit;
  /// Whether the tokens do not divide over the items' axes: each rank's
  /// tokens (and their items, read from `[T, k]` before the flattening)
  /// are padded to the most any rank holds, `maxTokens`.
  bool padded = false;
  int64_t maxTokens = 0;
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

int64_t dimSize(Value v, unsigned d) {
  return cast<RankedTensorType>(v.getType()).getDimSize(d);
}

/// Whether `v` is a tensor of i64 (the routing's values: the local program
/// builds their clones, and the received rows' experts, in i64).
bool isI64(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isInteger(64);
}

class Matcher {
public:
  Matcher(linalg::GenericOp rank, MeshOp mesh) : mesh(mesh) { m.rank = rank; }

  /// The dispatch whose routing starts at `rank`, or nullopt.
  std::optional<Dispatch> match();

private:
  bool matchRouting();
  void matchIndices();
  bool matchRows();
  bool matchRowOp(Operation &op);
  bool matchGroups(Value g);
  bool matchSplits();
  /// Whether `op` is a row-wise generic over rows.
  bool isRowWise(linalg::GenericOp op);

  MeshOp mesh;
  Dispatch m;
  /// The items' order and tokens, and their bounds-checked copies: true
  /// for a token.
  DenseMap<Value, bool> indices;
  DenseMap<Value, Value> maskOf;
  /// The rows' values, and their transposes.
  DenseSet<Value> rows, transposed;
};

std::optional<Dispatch> Matcher::match() {
  if (!matchRouting())
    return std::nullopt;
  matchIndices();
  if (!matchRows() || !matchSplits())
    return std::nullopt;
  return m;
}

bool Matcher::matchRouting() {
  if (!isStableRank(m.rank))
    return false;
  m.flat = m.rank.getDpsInputs()[0];
  m.items = dimSize(m.flat, 0);
  if (ShapedType::isDynamic(m.items))
    return false;
  for (Operation *user : m.rank.getResult(0).getUsers())
    if (auto inv = dyn_cast<linalg::GenericOp>(user);
        inv && !m.inverse && isInverse(inv))
      m.inverse = inv;
  if (!m.inverse)
    return false;
  for (Operation *user : m.inverse.getResult(0).getUsers()) {
    auto token = dyn_cast<linalg::GenericOp>(user);
    std::optional<int64_t> k = token ? floorDivConstant(token) : std::nullopt;
    // order // k, not another input's quotient written into order's buffer.
    if (k && !m.token && token.getDpsInputs()[0] == m.inverse.getResult(0)) {
      m.token = token;
      m.k = *k;
    }
  }
  if (!m.token || m.items % m.k)
    return false;
  if (!isI64(m.flat) || !isI64(m.rank.getResult(0)) ||
      !isI64(m.inverse.getResult(0)) || !isI64(m.token.getResult(0)))
    return false;
  m.tokens = m.items / m.k;
  return true;
}

void Matcher::matchIndices() {
  for (auto [v, bound, isToken] :
       {std::make_tuple(m.inverse.getResult(0), m.items, false),
        std::make_tuple(m.token.getResult(0), m.tokens, true)}) {
    indices[v] = isToken;
    for (Operation *user : v.getUsers()) {
      if (user->getNumResults() != 1)
        continue;
      auto checked = throughBoundsCheck(user->getResult(0), bound);
      if (checked && checked->first == v) {
        indices[user->getResult(0)] = isToken;
        maskOf[user->getResult(0)] = checked->second;
      }
    }
  }
}

bool Matcher::isRowWise(linalg::GenericOp op) {
  if (op.getNumResults() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumLoops() < 1 || op.getIteratorTypesArray()[0] != par ||
      dimSize(op.getResult(0), 0) != m.items)
    return false;
  for (Value in : op.getDpsInputs())
    if (!rows.contains(in))
      return false;
  // Row r of every operand at loop 0, which nothing else indexes.
  for (AffineMap map : op.getIndexingMapsArray()) {
    if (map.getNumResults() == 0 || !isDim(map.getResult(0), 0))
      return false;
    for (AffineExpr e : map.getResults().drop_front())
      if (!isa<AffineDimExpr>(e) || isDim(e, 0))
        return false;
  }
  // The body never reads r (a rank's rows are others than the global's).
  WalkResult r = op.getRegion().walk([](linalg::IndexOp i) {
    return i.getDim() == 0 ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (r.wasInterrupted())
    return false;
  // An init read by the body is a fill (cloned as one).
  return op.getRegion().front().getArguments().back().use_empty() ||
         def<linalg::FillOp>(op.getDpsInits()[0]);
}

/// `op`, which reads the rows' values: one of RowOpKind's, else false.
bool Matcher::matchRowOp(Operation &op) {
  if (auto t = dyn_cast<linalg::TransposeOp>(op)) {
    if (!rows.contains(t.getInput()) ||
        t.getPermutation() != ArrayRef<int64_t>{1, 0})
      return false;
    transposed.insert(t.getResult()[0]);
    m.ops.push_back({t, RowOpKind::Transpose, {}});
    return true;
  }
  auto g = dyn_cast<linalg::GenericOp>(op);
  if (!g || g.getNumResults() != 1)
    return false;
  SmallVector<Value> in(g.getDpsInputs());
  auto index = [&](Value v) -> std::optional<bool> {
    auto it = indices.find(v);
    return it == indices.end() ? std::nullopt : std::optional<bool>(it->second);
  };
  if (isIndexAdd(g) && index(in[0]) == true && rows.contains(in[1]) &&
      dimSize(g.getResult(0), 0) == m.tokens) {
    if (Value mask = maskOf.lookup(in[0]))
      m.masks.insert(mask);
    m.ops.push_back({g, RowOpKind::TokenAdd, {}});
    return true;
  }
  if (isScatterAdd(g) && index(in[0]) == false && rows.contains(in[1]) &&
      dimSize(g.getResult(0), 0) == m.items) {
    if (Value mask = maskOf.lookup(in[0]))
      m.masks.insert(mask);
    m.ops.push_back({g, RowOpKind::ItemAdd, {}});
    return true;
  }
  std::optional<GroupedMatmulForm> form = matchGroupedMatmulForm(g);
  if (form == GroupedMatmulForm::Rows) {
    if (!rows.contains(in[0]) || rows.contains(in[1]) ||
        transposed.contains(in[1]) || !isZeros(g.getDpsInits()[0]) ||
        !matchGroups(in[2]))
      return false;
    RowOp row{g, RowOpKind::GroupedRows, in[1]};
    // A weight read transposed (the backward's x dY^T): [E, N, K].
    if (auto t = def<linalg::TransposeOp>(in[1]);
        t && t.getPermutation() == ArrayRef<int64_t>{0, 2, 1}) {
      row.source = t.getInput();
      row.transposed = true;
    }
    m.weights.insert(row.source);
    m.ops.push_back(row);
    rows.insert(g.getResult(0));
    return true;
  }
  if (form == GroupedMatmulForm::Weights) {
    if (!transposed.contains(in[0]) || !rows.contains(in[1]) ||
        !isZeros(g.getDpsInits()[0]) || !matchGroups(in[2]))
      return false;
    m.ops.push_back({g, RowOpKind::GroupedWeights, {}});
    return true;
  }
  if (form || !isRowWise(g))
    return false;
  m.ops.push_back({g, RowOpKind::RowWise, {}});
  rows.insert(g.getResult(0));
  return true;
}

/// The rows' program, in program order: the gathers by a (checked) token
/// or order, then every op that reads their values, which must be one of
/// RowOpKind's; no rows' value leaves it.
bool Matcher::matchRows() {
  for (Operation &op : *m.rank->getBlock()) {
    auto g = dyn_cast<linalg::GenericOp>(op);
    if (g && g.getNumDpsInputs() == 1 && indices.count(g.getDpsInputs()[0])) {
      Value idx = g.getDpsInputs()[0];
      Value table = gatherTable(g);
      bool isToken = indices.lookup(idx);
      if (table && !rows.contains(table) && !transposed.contains(table) &&
          dimSize(table, 0) == (isToken ? m.tokens : m.items)) {
        if (Value mask = maskOf.lookup(idx))
          m.masks.insert(mask);
        m.ops.push_back(
            {g, isToken ? RowOpKind::TokenGather : RowOpKind::ItemGather,
             table});
        rows.insert(g.getResult(0));
        continue;
      }
    }
    bool reads = llvm::any_of(op.getOperands(), [&](Value v) {
      return rows.contains(v) || transposed.contains(v);
    });
    if (reads && !matchRowOp(op))
      return false;
  }
  // Every use of a rows' value is an operand of a rows' op (not a capture,
  // not a result); a transpose is read by Weights grouped matmuls only.
  DenseSet<Operation *> ops;
  for (RowOp &r : m.ops)
    ops.insert(r.op);
  for (RowOp &r : m.ops) {
    for (Value v : r.op->getResults()) {
      if (!rows.contains(v) && !transposed.contains(v))
        continue;
      for (OpOperand &use : v.getUses()) {
        if (!ops.contains(use.getOwner()))
          return false;
        if (transposed.contains(v)) {
          auto g = dyn_cast<linalg::GenericOp>(use.getOwner());
          if (!g || use.getOperandNumber() != 0 ||
              matchGroupedMatmulForm(g) != GroupedMatmulForm::Weights)
            return false;
        }
      }
    }
  }
  return !m.weights.empty();
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
  if (!bincount || !isBincount(bincount) || !isI64(bincount.getResult(0)) ||
      !isI64(groups.getResult(0)) ||
      (m.bincount && (m.bincount != bincount || m.cumsum != cumsum)))
    return false;
  m.bincount = bincount;
  m.cumsum = cumsum;
  if (!llvm::is_contained(m.groups, groups))
    m.groups.push_back(groups);
  // The same items as the sort's.
  return bincount.getDpsInputs()[0] == m.flat;
}

/// The experts split alike on E over axes A; the items split on dim 0 over
/// axes that include A, in equal blocks of whole tokens (static local
/// shapes).
bool Matcher::matchSplits() {
  std::optional<DimSharding> split;
  for (Value w : m.weights) {
    std::optional<DimSharding> s = rowsSplit(w);
    if (!s || (split && *s != *split))
      return false;
    split = s;
  }
  if (!split)
    return false;
  for (const auto &s : split->splits)
    m.axes.push_back(s.axis);
  auto ranksOf = [&](const DimSharding &d) {
    int64_t ranks = 1;
    for (const auto &s : d.splits)
      ranks *= mesh.getShape()[s.axis];
    return ranks;
  };
  std::optional<DimSharding> items = rowsSplit(m.flat);
  if (items && !(axisMask(*split) & ~axisMask(*items)) &&
      m.tokens % ranksOf(*items) == 0) {
    m.itemSplit = *items;
    return true;
  }
  // Otherwise the items' split is the tokens' (flat and the items' tables
  // are read in it). Where the tokens divide, the items divide alike (a
  // slice where propagation kept them whole, e.g. a second block's routing
  // planned before the first's rewrite). Where they do not (propagation
  // then keeps the flattened choices whole), each rank's tokens are padded
  // to the most any rank holds; `flat` and the gathered items' tables are
  // read from their `[T, k]` forms, and no value leaves by item (an item
  // split that follows the tokens' has no layout on `[R]`).
  std::optional<DimSharding> tokens;
  for (RowOp &row : m.ops)
    if (row.kind == RowOpKind::TokenGather && !tokens)
      tokens = rowsSplit(row.source);
  if (!tokens || (axisMask(*split) & ~axisMask(*tokens)))
    return false;
  m.itemSplit = *tokens;
  if (m.tokens % ranksOf(*tokens) == 0)
    return true;
  auto isFlattened = [&](Value v) {
    auto c = def<tensor::CollapseShapeOp>(v);
    auto src =
        c ? cast<RankedTensorType>(c.getSrc().getType()) : RankedTensorType();
    return src && src.getRank() == 2 && src.getDimSize(0) == m.tokens &&
           src.getDimSize(1) == m.k;
  };
  if (!isFlattened(m.flat))
    return false;
  for (RowOp &row : m.ops)
    if ((row.kind == RowOpKind::ItemGather && !isFlattened(row.source)) ||
        row.kind == RowOpKind::ItemAdd)
      return false;
  m.padded = true;
  // The most tokens a rank holds.
  Layout l(mesh.getShape().size());
  for (const auto &s : tokens->splits)
    l.addSplit(0, s);
  std::vector<int64_t> meshShape(mesh.getShape().begin(),
                                 mesh.getShape().end());
  std::vector<int64_t> coords(meshShape.size(), 0);
  while (true) {
    std::vector<::shardx::Interval> runs;
    l.appendLocalRuns(meshShape, 0, m.tokens, coords, runs);
    int64_t count = 0;
    for (const auto &run : runs)
      count += run.size;
    m.maxTokens = std::max(m.maxTokens, count);
    size_t i = coords.size();
    while (i > 0 && ++coords[i - 1] == meshShape[i - 1])
      coords[--i] = 0;
    if (i == 0)
      break;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The local program
//===----------------------------------------------------------------------===//

/// Builds each rank's program of a matched dispatch. A rows' value lives on
/// the rank of its items ("sent": the rank's items sorted by expert, slot s
/// holding item inv[s]), on the rank of its expert ("received": the rows
/// of this rank's experts from every member of the group, sorted by local
/// expert, zero rows after them), or both: gathers make sent values,
/// grouped matmuls received ones, and the dispatch (sent -> received) and
/// combine (received -> sent) move a value once each way at most.
class Builder {
public:
  Builder(Dispatch &m, MeshOp mesh)
      : m(m), mesh(mesh), b(m.ops.front().op), loc(m.ops.front().op.getLoc()),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())) {}

  /// Replaces the rows' program by the local one.
  void build();

private:
  RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }
  /// `type` with `rows` rows.
  RankedTensorType withRows(Type type, int64_t rows) {
    auto t = cast<RankedTensorType>(type);
    SmallVector<int64_t> shape(t.getShape());
    shape[0] = rows;
    return tensorOf(shape, t.getElementType());
  }
  void mark(Operation *op) {
    op->setAttr(kRaggedDispatchAttrName, b.getUnitAttr());
  }
  /// A fresh init of `type` like `old`: a fill of the same scalar, or
  /// empty.
  Value initLike(Value old, RankedTensorType type, ValueRange dynamic = {}) {
    Value empty = tensor::EmptyOp::create(b, loc, type, dynamic);
    if (auto fill = def<linalg::FillOp>(old))
      return linalg::FillOp::create(b, loc, fill.getInputs()[0], empty)
          .getResult(0);
    return empty;
  }
  Value zeros(RankedTensorType type, ValueRange dynamic = {}) {
    Value zero = arith::ConstantOp::create(
        b, loc, type.getElementType(), b.getZeroAttr(type.getElementType()));
    Value empty = tensor::EmptyOp::create(b, loc, type, dynamic);
    return linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  }
  /// `op` again on `inputs` into `init`.
  Value clone(linalg::GenericOp op, ValueRange inputs, Value init) {
    auto fresh = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, inputs, ValueRange{init},
        op.getIndexingMapsArray(), op.getIteratorTypesArray());
    IRMapping captures;
    op.getRegion().cloneInto(&fresh.getRegion(), captures);
    mark(fresh);
    return fresh.getResult(0);
  }
  /// `layout`'s split of dim 0 as the items', the rest whole.
  LayoutAttr rowsLayout() {
    Layout l(mesh.getShape().size());
    for (const auto &s : m.itemSplit.splits)
      l.addSplit(0, s);
    return LayoutAttr::get(meshRef, l);
  }
  /// The local value of global `v` read in `layout` (a reshard first if
  /// it is produced in another).
  Value toLocal(Value v, LayoutAttr layout) {
    auto key = std::make_pair(v, Attribute(layout));
    if (Value done = locals.lookup(key))
      return done;
    auto type = layout.getLocalType(cast<RankedTensorType>(v.getType()),
                                    mesh.getShape());
    auto cast = UnrealizedConversionCastOp::create(b, loc, type, v);
    cast->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                  b.getArrayAttr({layout}));
    locals[key] = cast.getResult(0);
    return cast.getResult(0);
  }
  /// The rank's rows of global `v` (tokens or, with `items`, the items),
  /// read in the items' split; padded to `maxTokens` tokens with `pad`
  /// (zero if null) where the tokens do not divide.
  Value rowsLocal(Value v, bool items, TypedAttr pad = {}) {
    if (!m.padded)
      return toLocal(v, rowsLayout());
    if (items)
      v = def<tensor::CollapseShapeOp>(v).getSrc();
    Value local = toLocal(v, rowsLayout());
    Value count = tensor::DimOp::create(b, loc, local, 0);
    if (!ownTokens)
      ownTokens = count;
    auto type = cast<RankedTensorType>(local.getType());
    SmallVector<OpFoldResult> low(type.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> high(type.getRank(), b.getIndexAttr(0));
    high[0] =
        arith::SubIOp::create(
            b, loc, arith::ConstantIndexOp::create(b, loc, m.maxTokens), count)
            .getResult();
    Type elt = type.getElementType();
    Value padValue = arith::ConstantOp::create(
        b, loc, elt, pad ? pad : cast<TypedAttr>(b.getZeroAttr(elt)));
    Value padded = tensor::PadOp::create(b, loc, withRows(type, m.maxTokens),
                                         local, low, high, padValue);
    if (!items)
      return padded;
    return tensor::CollapseShapeOp::create(
        b, loc, padded, SmallVector<ReassociationIndices>{{0, 1}});
  }
  /// `v`, or the cast that replaced it.
  Value current(Value v) {
    Value cast = replaced.lookup(v);
    return cast ? cast : v;
  }
  /// The global value of `local` for `global`'s uses, recorded in `layout`.
  void replace(Value global, Value local, LayoutAttr layout) {
    auto result =
        UnrealizedConversionCastOp::create(b, loc, global.getType(), local);
    setResultLayout(result->getResult(0), layout);
    global.replaceAllUsesWith(result.getResult(0));
    replaced[global] = result.getResult(0);
  }
  /// `v` transposed by `perm` (dynamic sizes kept).
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, v);
    SmallVector<OpFoldResult> permuted;
    for (int64_t p : perm)
      permuted.push_back(sizes[p]);
    Value empty = tensor::EmptyOp::create(
        b, loc, permuted, cast<RankedTensorType>(v.getType()).getElementType());
    auto t = linalg::TransposeOp::create(b, loc, v, empty, perm);
    mark(t);
    return t.getResult()[0];
  }
  /// out[r, ...] = table[idx[r], ...].
  Value gatherRows(Value table, Value idx) {
    auto tableType = cast<RankedTensorType>(table.getType());
    RankedTensorType type = withRows(tableType, dimSize(idx, 0));
    int64_t rank = type.getRank();
    MLIRContext *ctx = b.getContext();
    AffineMap first = AffineMap::get(rank, 0, {getAffineDimExpr(0, ctx)}, ctx);
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{type}, ValueRange{idx},
        ValueRange{tensor::EmptyOp::create(b, loc, type.getShape(),
                                           type.getElementType())},
        ArrayRef<AffineMap>{first,
                            AffineMap::getMultiDimIdentityMap(rank, ctx)},
        SmallVector<IteratorType>(rank, par),
        [&](OpBuilder &nb, Location l, ValueRange a) {
          SmallVector<Value> at = {
              arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[0])};
          for (int64_t d = 1; d < rank; ++d)
            at.push_back(linalg::IndexOp::create(nb, l, d));
          linalg::YieldOp::create(
              nb, l, ValueRange{tensor::ExtractOp::create(nb, l, table, at)});
        });
    mark(op);
    return op.getResult(0);
  }
  /// sums[j] = sum_l counts[j * el + l] for counts [n * el].
  Value sumRuns(Value counts);
  /// A received row's local expert from its run `in[r]` among the
  /// (member, expert) runs: `in[r] mod el`, or `el` (no expert) for the rows
  /// past the last run (`in[r] == slots`: the buffer's zero rows).
  Value localExpert(Value in);
  /// The rank's routing: its items sorted by expert, the counts exchanged,
  /// the received rows' order and groups.
  void buildRouting();
  /// `v` on the experts' ranks: the dispatch (ragged all-to-all, then
  /// sorted by local expert).
  Value received(Value v);
  /// `v` on the items' ranks: the combine (unsorted, then the ragged
  /// all-to-all back).
  Value sent(Value v);
  /// The local weight `w`, maybe transposed to [E, N, K].
  Value localWeight(Value w, bool transposed) {
    Value local = toLocal(w, getRecordedLayout(w));
    return transposed ? transpose(local, {0, 2, 1}) : local;
  }
  void buildOp(RowOp &row);

  Dispatch &m;
  MeshOp mesh;
  OpBuilder b;
  Location loc;
  FlatSymbolRefAttr meshRef;
  DenseMap<std::pair<Value, Attribute>, Value> locals;
  /// The rows' values' local values, sent and received.
  DenseMap<Value, Value> sentRows, receivedRows;
  int64_t n = 1, el = 0, slots = 0, items = 0, receivedCount = 0;
  DenseI64ArrayAttr axesAttr;
  Value inv, token, sendCounts, recvCounts, rank, unrank, groups;
  /// The rank's own token count, where padded.
  Value ownTokens;
  /// The global results replaced, by their casts (a later gather of one
  /// reads the cast, not the replaced op).
  DenseMap<Value, Value> replaced;
};

Value Builder::sumRuns(Value counts) {
  Type i64 = b.getI64Type();
  Value runs =
      tensor::ExpandShapeOp::create(b, loc, tensorOf({n, el}, i64), counts,
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
  mark(sum);
  return sum.getResult(0);
}

Value Builder::localExpert(Value in) {
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
        Value past =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, a[0], all);
        Value expert = arith::RemSIOp::create(nb, l, a[0], perRank);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::SelectOp::create(nb, l, past, perRank, expert)});
      });
  mark(op);
  return op.getResult(0);
}

void Builder::buildRouting() {
  Type i64 = b.getI64Type();
  for (int64_t a : m.axes)
    n *= mesh.getShape()[a];
  int64_t experts = dimSize(m.weights.front(), 0);
  el = llvm::divideCeil(experts, n);
  slots = n * el;
  axesAttr = b.getDenseI64ArrayAttr(m.axes);
  // Padding items choose expert `slots`: counted for no member, sorted
  // last, never sent.
  Value flat = rowsLocal(m.flat, /*items=*/true, b.getI64IntegerAttr(slots));
  items = dimSize(flat, 0);
  receivedCount = n * items;

  // This rank's items sorted by expert (stable): slot s holds item inv[s]
  // of token inv[s] / k.
  auto items64 = tensorOf({items}, i64);
  Value pos =
      clone(m.rank, {flat, flat}, initLike(m.rank.getDpsInits()[0], items64));
  inv = clone(m.inverse, {pos}, initLike(m.inverse.getDpsInits()[0], items64));
  token = clone(m.token, {inv}, initLike(m.token.getDpsInits()[0], items64));
  // Per-expert counts, padded to n * el slots (member j's experts are
  // j * el ..): each member's, and what each member sends this rank.
  Value counts = clone(m.bincount, {flat}, zeros(tensorOf({slots}, i64)));
  sendCounts = sumRuns(counts);
  auto fromEach = AllToAllOp::create(
      b, loc, tensorOf({slots}, i64), counts, meshRef, axesAttr,
      b.getI64IntegerAttr(0), b.getI64IntegerAttr(0), b.getI64IntegerAttr(1),
      b.getI64IntegerAttr(1), DenseI64ArrayAttr());
  mark(fromEach);
  recvCounts = sumRuns(fromEach.getResult());
  // A received row's local expert: its run (member i, expert l) among the
  // runs' ends, l = run mod el; `el` for the zero rows after the last run.
  Type cumElt =
      cast<RankedTensorType>(m.cumsum.getResult(0).getType()).getElementType();
  auto received64 = tensorOf({receivedCount}, i64);
  Value ends =
      clone(m.cumsum, {fromEach.getResult()}, zeros(tensorOf({slots}, cumElt)));
  Value runs = clone(m.groups.front(), {ends}, zeros(received64));
  Value expert = localExpert(runs);
  // The received rows sorted by local expert (the same stable argsort;
  // torchtitan's permute), the zero rows last, and their groups counted as
  // the global program counts them: nondecreasing, so shardx-localize runs
  // each grouped matmul over the received rows only.
  rank = clone(m.rank, {expert, expert},
               initLike(m.rank.getDpsInits()[0], received64));
  unrank = clone(m.inverse, {rank},
                 initLike(m.inverse.getDpsInits()[0], received64));
  Value perExpert = clone(m.bincount, {expert}, zeros(tensorOf({el + 1}, i64)));
  Value expertEnds =
      clone(m.cumsum, {perExpert}, zeros(tensorOf({el + 1}, cumElt)));
  groups = clone(m.groups.front(), {expertEnds}, zeros(received64));
}

Value Builder::received(Value v) {
  if (Value done = receivedRows.lookup(v))
    return done;
  Value s = sentRows.lookup(v);
  assert(s && "a rows' value is sent or received");
  auto dispatch = RaggedAllToAllOp::create(
      b, loc, withRows(s.getType(), receivedCount), Type(), s, sendCounts,
      recvCounts, meshRef, axesAttr);
  mark(dispatch);
  return receivedRows[v] = gatherRows(dispatch.getResult(), unrank);
}

Value Builder::sent(Value v) {
  if (Value done = sentRows.lookup(v))
    return done;
  Value r = receivedRows.lookup(v);
  assert(r && "a rows' value is sent or received");
  Value unsorted = gatherRows(r, rank);
  auto combine = RaggedAllToAllOp::create(b, loc, withRows(r.getType(), items),
                                          Type(), unsorted, recvCounts,
                                          sendCounts, meshRef, axesAttr);
  mark(combine);
  return sentRows[v] = combine.getResult();
}

void Builder::buildOp(RowOp &row) {
  auto g = dyn_cast<linalg::GenericOp>(row.op.getOperation());
  Value result = row.op->getResult(0);
  switch (row.kind) {
  case RowOpKind::TokenGather:
    sentRows[result] = gatherRows(rowsLocal(current(row.source), false), token);
    return;
  case RowOpKind::ItemGather:
    sentRows[result] = gatherRows(rowsLocal(current(row.source), true), inv);
    return;
  case RowOpKind::Transpose:
    // Built where a Weights grouped matmul reads it, received.
    return;
  case RowOpKind::RowWise: {
    // On the experts' ranks where every operand is there already, else on
    // the items' ranks (which combines the others).
    bool there = llvm::all_of(
        g.getDpsInputs(), [&](Value in) { return receivedRows.contains(in); });
    SmallVector<Value> inputs;
    for (Value in : g.getDpsInputs())
      inputs.push_back(there ? received(in) : sent(in));
    Value local = clone(
        g, inputs,
        initLike(g.getDpsInits()[0],
                 withRows(result.getType(), there ? receivedCount : items)));
    (there ? receivedRows : sentRows)[result] = local;
    return;
  }
  case RowOpKind::GroupedRows: {
    Value x = received(g.getDpsInputs()[0]);
    Value w = localWeight(row.source, row.transposed);
    receivedRows[result] = clone(
        g, {x, w, groups}, zeros(withRows(result.getType(), receivedCount)));
    return;
  }
  case RowOpKind::GroupedWeights: {
    auto t = def<linalg::TransposeOp>(g.getDpsInputs()[0]);
    Value x = transpose(received(t.getInput()), {1, 0});
    Value y = received(g.getDpsInputs()[1]);
    // The gradient of this rank's experts, from the rows of the group's
    // tokens: a partial sum over the items' other axes.
    Layout layout = getRecordedLayout(m.weights.front()).getLayout();
    uint64_t experts = 0;
    for (int64_t a : m.axes)
      experts |= uint64_t(1) << a;
    for (const auto &s : m.itemSplit.splits)
      if (!(experts & (uint64_t(1) << s.axis)))
        layout.setPartial(s.axis, ::shardx::ReduceOp::Sum);
    auto attr = LayoutAttr::get(meshRef, layout);
    auto type = attr.getLocalType(cast<RankedTensorType>(result.getType()),
                                  mesh.getShape());
    SmallVector<Value> dynamic;
    if (type.isDynamicDim(0))
      dynamic.push_back(tensor::DimOp::create(
          b, loc, localWeight(m.weights.front(), false), 0));
    replace(result, clone(g, {x, y, groups}, zeros(type, dynamic)), attr);
    return;
  }
  case RowOpKind::TokenAdd:
  case RowOpKind::ItemAdd: {
    LayoutAttr layout = rowsLayout();
    auto type = layout.getLocalType(cast<RankedTensorType>(result.getType()),
                                    mesh.getShape());
    Value local =
        clone(g,
              {row.kind == RowOpKind::TokenAdd ? token : inv,
               sent(g.getDpsInputs()[1])},
              initLike(g.getDpsInits()[0],
                       m.padded ? withRows(type, m.maxTokens) : type));
    if (m.padded) {
      // The rank's own tokens (the padding's rows are zero).
      SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
      SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, local);
      SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
      sizes[0] = ownTokens;
      local = tensor::ExtractSliceOp::create(b, loc, type, local, offsets,
                                             sizes, strides);
    }
    replace(result, local, layout);
    return;
  }
  }
}

void Builder::build() {
  buildRouting();
  for (RowOp &row : m.ops) {
    b.setInsertionPoint(row.op);
    loc = row.op.getLoc();
    buildOp(row);
  }
}

/// Replaces the range checks' counts of the masks' false entries with
/// zeros: `sum(extui(not(mask)))`.
void zeroChecks(Dispatch &m) {
  for (Value mask : m.masks) {
    for (Operation *user : llvm::make_early_inc_range(mask.getUsers())) {
      auto negate = dyn_cast<linalg::GenericOp>(user);
      if (!negate || negate.getNumDpsInputs() != 1 ||
          negate.getDpsInputs()[0] != mask ||
          !shapeIs(negate, {par}, {{0}, {0}}))
        continue;
      // extui(xor(mask, true)).
      auto ext = def<arith::ExtUIOp>(yielded(negate));
      auto x = def<arith::XOrIOp>(ext ? ext.getIn() : Value());
      if (!x || !((x.getLhs() == arg(negate, 0) &&
                   matchPattern(x.getRhs(), m_One())) ||
                  (x.getRhs() == arg(negate, 0) &&
                   matchPattern(x.getLhs(), m_One()))))
        continue;
      for (Operation *sumUser :
           llvm::make_early_inc_range(negate.getResult(0).getUsers())) {
        auto sum = dyn_cast<linalg::GenericOp>(sumUser);
        if (!sum || sum.getNumDpsInputs() != 1 ||
            !shapeIs(sum, {red}, {{0}, {}}) || !isZeros(sum.getDpsInits()[0]) ||
            addToOut(sum, yielded(sum)) != arg(sum, 0))
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
      // One routing at a time, in program order: a later block's gathers
      // then read an earlier block's rewritten output (its cast), and an
      // earlier block's backward reads a later one's through the uses
      // its rewrite replaces.
      SmallVector<linalg::GenericOp> sorts;
      for (auto op : fn.getBody().front().getOps<linalg::GenericOp>())
        if (isStableRank(op))
          sorts.push_back(op);
      bool found = false;
      for (linalg::GenericOp sort : sorts) {
        std::optional<Dispatch> d = Matcher(sort, mesh).match();
        if (!d)
          continue;
        Builder(*d, mesh).build();
        zeroChecks(*d);
        found = true;
      }
      if (found)
        eraseDead(fn);
      return success();
    };
    if (failed(forEachShardedFunction(getOperation(), each)))
      return signalPassFailure();
  }
};

} // namespace
