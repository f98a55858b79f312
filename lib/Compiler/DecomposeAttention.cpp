//===- DecomposeAttention.cpp - shardx.attention as linalg ops ------------===//
//
// Part of ShardX.
//
// The attention ops as linalg ops on 3-D views: the query side
// `[B, H, Sq, X]` as `[B * Hk, G * Sq, X]` (the G query heads of a key/value
// head stacked on the rows) and the key side `[B, Hk, Sk, X]` as
// `[B * Hk, Sk, X]`, so that every product is one batched GEMM the targets
// hand to BLAS or cuBLAS. With `N = B * Hk`, `M = G * Sq`:
//
//   S   = (c q) @ (c k)^T, c = sqrt(scale) (as PyTorch's math attention
//         scales them), -inf where a key is not seen   [N, M, Sk]
//   attention:   m = rowmax(S), l = rowsum(exp(S - m)), lse = m + log(l),
//                P = exp(S - lse), out = P @ v
//   backward:    P = exp(S - lse), dP = dout @ v^T,
//                delta = rowsum(dout * out), dS = P * (dP - delta),
//                dq = c dS @ (c k), dk = c dS^T @ (c q), dv = P^T @ dout
//
// A row that sees no key (m = -inf) gets l = 0: out = 0 and lse = -inf.
// The three ops build S and P alike, so CSE shares them between the
// forward and the backward ops of one attention where they are in one
// function, and dS between `attention_dq` and `attention_dkv`.
//
//===----------------------------------------------------------------------===//

#include "DecomposeAttention.h"

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::shardx;

namespace {

using Body = function_ref<Value(OpBuilder &, Location, ValueRange)>;

/// Builds the linalg ops of one attention op at its position. Sizes are
/// static or `tensor.dim`s (an uneven split leaves a rank's sequence, or
/// heads, dynamic).
class AttentionBuilder {
public:
  AttentionBuilder(RewriterBase &rewriter, Operation *op)
      : b(rewriter), loc(op->getLoc()),
        element(cast<RankedTensorType>(op->getOperand(0).getType())
                    .getElementType()) {
    Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
    batch = size(q, 0);
    heads = size(q, 1);
    kvHeads = size(k, 1);
    queries = size(q, 2);
    keys = size(k, 2);
    width = size(q, 3);
    valueWidth = size(v, 3);
    groups = divide(heads, kvHeads);
    // Head counts of a rank's uneven piece are dynamic, and so is their
    // ratio: a view that splits the query heads in two dynamic dims is not
    // one the reshape folds take. There the key/value heads are repeated
    // to the query heads instead (keyHeads below), one group each.
    if (!getConstantIntValue(groups)) {
      groupCount = index(groups);
      kvHeads = heads;
      groups = b.getIndexAttr(1);
    }
    n = multiply(batch, kvHeads);
    m = multiply(groups, queries);
  }

  /// `k` or `v` (`[B, Hk, S, X]`) with a head per query head: itself, or
  /// (dynamic groups) `[B, H, S, X]` with head `h` key/value head
  /// `h / groups`.
  Value keyHeads(Value kv) {
    if (!groupCount)
      return kv;
    SmallVector<OpFoldResult> shape = {batch, heads, size(kv, 2),
                                       size(kv, 3)};
    Value out = empty(shape, element);
    SmallVector<utils::IteratorType> iterators(4,
                                               utils::IteratorType::parallel);
    return linalg::GenericOp::create(
               b, loc, out.getType(), ValueRange{}, ValueRange{out},
               SmallVector<AffineMap>{b.getMultiDimIdentityMap(4)}, iterators,
               [&](OpBuilder &nb, Location l, ValueRange) {
                 SmallVector<Value> at;
                 for (int64_t d = 0; d < 4; ++d)
                   at.push_back(linalg::IndexOp::create(nb, l, d));
                 at[1] = arith::DivUIOp::create(nb, l, at[1], groupCount);
                 linalg::YieldOp::create(
                     nb, l, tensor::ExtractOp::create(nb, l, kv, at).getResult());
               })
        .getResult(0);
  }
  /// The inverse for a gradient: `[B, H, S, X]` summed over each key/value
  /// head's query heads into `like`'s type (`[B, Hk, S, X]`); itself when
  /// the heads were not repeated.
  Value sumKeyHeads(Value grad, Value like) {
    if (!groupCount)
      return grad;
    SmallVector<OpFoldResult> shape = {batch, size(like, 1), size(grad, 2),
                                       size(grad, 3)};
    Value out = linalg::FillOp::create(b, loc, constant(0.0),
                                       empty(shape, element))
                    .getResult(0);
    // The group loop's extent, from a tensor of that size.
    Value extent = empty({OpFoldResult(groupCount)}, element);
    SmallVector<utils::IteratorType> iterators(4,
                                               utils::IteratorType::parallel);
    iterators.push_back(utils::IteratorType::reduction);
    return linalg::GenericOp::create(
               b, loc, out.getType(), ValueRange{extent}, ValueRange{out},
               SmallVector<AffineMap>{map(5, {4}), map(5, {0, 1, 2, 3})},
               iterators,
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 SmallVector<Value> at;
                 for (int64_t d = 0; d < 4; ++d)
                   at.push_back(linalg::IndexOp::create(nb, l, d));
                 Value g = linalg::IndexOp::create(nb, l, 4);
                 at[1] = arith::AddIOp::create(
                     nb, l, arith::MulIOp::create(nb, l, at[1], groupCount),
                     g);
                 Value x = tensor::ExtractOp::create(nb, l, grad, at);
                 linalg::YieldOp::create(
                     nb, l, arith::AddFOp::create(nb, l, args[1], x).getResult());
               })
        .getResult(0);
  }

  OpFoldResult size(Value v, int64_t d) {
    return tensor::getMixedSize(b, loc, v, d);
  }
  Value index(OpFoldResult x) {
    return getValueOrCreateConstantIndexOp(b, loc, x);
  }
  OpFoldResult multiply(OpFoldResult x, OpFoldResult y) {
    std::optional<int64_t> cx = getConstantIntValue(x),
                           cy = getConstantIntValue(y);
    if (cx && cy)
      return b.getIndexAttr(*cx * *cy);
    return arith::MulIOp::create(b, loc, index(x), index(y)).getResult();
  }
  OpFoldResult divide(OpFoldResult x, OpFoldResult y) {
    std::optional<int64_t> cx = getConstantIntValue(x),
                           cy = getConstantIntValue(y);
    if (cx && cy)
      return b.getIndexAttr(*cx / *cy);
    return arith::DivUIOp::create(b, loc, index(x), index(y)).getResult();
  }
  RankedTensorType typeOf(ArrayRef<OpFoldResult> sizes, Type elementType) {
    SmallVector<int64_t> shape;
    for (OpFoldResult x : sizes)
      shape.push_back(getConstantIntValue(x).value_or(ShapedType::kDynamic));
    return RankedTensorType::get(shape, elementType);
  }
  Value empty(ArrayRef<OpFoldResult> sizes, Type elementType) {
    return tensor::EmptyOp::create(b, loc, sizes, elementType);
  }
  /// `v` as `like`'s type (a cast where one side's dims are static).
  Value castTo(Value v, Type like) {
    if (v.getType() == like)
      return v;
    return tensor::CastOp::create(b, loc, like, v);
  }

  /// `[B, H, Sq, X]` (or `[B, H, Sq]`) as `[N, M, X]` (`[N, M]`).
  Value queryView(Value v) {
    return regroupQueries(v, {{0}, {1, 2}, {3}}, {{0, 1}, {2, 3}});
  }
  /// `[B, Hk, Sk, X]` as `[N, Sk, X]` (the heads repeated where the
  /// groups are dynamic).
  Value keyView(Value v) {
    return tensor::CollapseShapeOp::create(
        b, loc, keyHeads(v),
        SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
  }
  /// The inverse of queryView of a `[N, M, X]` (`[N, M]`) tensor, as
  /// `like`'s type.
  Value fromQueryView(Value v, Type like) {
    return castTo(regroupQueries(v, {{0, 1}, {2, 3}}, {{0}, {1, 2}, {3}}),
                  like);
  }
  /// `v` expanded by `split` to `[B, Hk, G, Sq(, X)]`, then collapsed by
  /// `merge` (the query side's two groupings; a trailing width dim, where
  /// `v` has one, kept).
  Value regroupQueries(Value v, SmallVector<ReassociationIndices> split,
                       SmallVector<ReassociationIndices> merge) {
    SmallVector<OpFoldResult> five = {batch, kvHeads, groups, queries};
    int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
    if (rank == static_cast<int64_t>(split.size()) + 1) {
      five.push_back(size(v, rank - 1));
      split.push_back({4});
      merge.push_back({4});
    }
    Value expanded = tensor::ExpandShapeOp::create(
        b, loc, typeOf(five, element), v, split, five);
    return tensor::CollapseShapeOp::create(b, loc, expanded, merge);
  }
  /// The inverse of keyView of a gradient, as `like`'s type.
  Value fromKeyView(Value v, Value like) {
    SmallVector<OpFoldResult> four = {batch, kvHeads, size(v, 1),
                                      size(v, 2)};
    Value expanded = tensor::ExpandShapeOp::create(
        b, loc, typeOf(four, element), v,
        SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}}, four);
    return castTo(sumKeyHeads(expanded, like), like.getType());
  }

  Value constant(double x) {
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(element, x));
  }

  /// A generic over `loops` dims (`reduced` of them reductions) writing a
  /// tensor of `shape`, reading `inputs` through `maps` (the output's map
  /// last). A reduction's output starts as `init`.
  Value generic(ArrayRef<OpFoldResult> shape, double init, ValueRange inputs,
                ArrayRef<AffineMap> maps, ArrayRef<bool> reduced, Body body) {
    SmallVector<utils::IteratorType> iterators;
    for (bool r : reduced)
      iterators.push_back(r ? utils::IteratorType::reduction
                            : utils::IteratorType::parallel);
    Value out = empty(shape, element);
    if (llvm::is_contained(reduced, true))
      out = linalg::FillOp::create(b, loc, constant(init), out).getResult(0);
    auto op = linalg::GenericOp::create(
        b, loc, out.getType(), inputs, ValueRange{out}, maps, iterators,
        [&](OpBuilder &nested, Location l, ValueRange args) {
          linalg::YieldOp::create(nested, l, body(nested, l, args));
        });
    return op.getResult(0);
  }

  AffineMap map(unsigned count, ArrayRef<unsigned> dimsOf) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dimsOf)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(count, 0, exprs, b.getContext());
  }

  /// `out[n, x, y] = sum_r lhs * rhs`, the operands' dims given as lists of
  /// the loop dims n = 0, x = 1, y = 2, r = 3.
  Value gemm(Value lhs, ArrayRef<unsigned> lhsDims, Value rhs,
             ArrayRef<unsigned> rhsDims, OpFoldResult x, OpFoldResult y) {
    return generic({n, x, y}, 0.0, {lhs, rhs},
                   {map(4, lhsDims), map(4, rhsDims), map(4, {0, 1, 2})},
                   {false, false, false, true},
                   [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                     Value p = arith::MulFOp::create(nb, l, a[0], a[1]);
                     return arith::AddFOp::create(nb, l, a[2], p);
                   });
  }

  /// The rows' positions `[M]`: `qpos` repeated for each of the G query
  /// heads of a key/value head.
  Value rowPositions(Value qpos) {
    Type type = cast<RankedTensorType>(qpos.getType()).getElementType();
    Value count = index(queries);
    Value out = empty({m}, type);
    auto op = linalg::GenericOp::create(
        b, loc, out.getType(), ValueRange{}, ValueRange{out},
        SmallVector<AffineMap>{map(1, {0})},
        SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
        [&](OpBuilder &nb, Location l, ValueRange) {
          Value row = linalg::IndexOp::create(nb, l, 0);
          Value query = arith::RemUIOp::create(nb, l, row, count);
          Value pos = tensor::ExtractOp::create(nb, l, qpos, query);
          linalg::YieldOp::create(nb, l, pos);
        });
    return op.getResult(0);
  }
  /// Whether query `rowPos` sees key `keyPos`.
  static Value sees(OpBuilder &nb, Location l, Value rowPos, Value keyPos) {
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, keyPos,
                                 rowPos);
  }

  RewriterBase &b;
  Location loc;
  Type element;
  OpFoldResult batch, heads, kvHeads, groups, queries, keys, width,
      valueWidth, n, m;
  /// The query heads per key/value head when they are dynamic (then the
  /// key/value heads are repeated), else null.
  Value groupCount;
};

/// The scaled query and key views (each times the root of the scale, as
/// PyTorch's math attention scales them) and the logits `s = qs @ ks^T`,
/// -inf where a key is not seen.
struct Scores {
  Value qs, ks, s, root;
};

/// `x * root`, elementwise.
Value scaled(AttentionBuilder &a, Value x, Value root) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<OpFoldResult> shape;
  for (int64_t d = 0; d < type.getRank(); ++d)
    shape.push_back(a.size(x, d));
  SmallVector<unsigned> all = {0, 1, 2};
  return a.generic(shape, 0.0, {x}, {a.map(3, all), a.map(3, all)},
                   {false, false, false},
                   [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                     return arith::MulFOp::create(nb, l, args[0], root);
                   });
}

template <typename OpT>
Scores scores(AttentionBuilder &a, OpT op, Value q, Value k) {
  Scores sc;
  sc.root = a.constant(std::sqrt(op.getScale().convertToDouble()));
  sc.qs = scaled(a, q, sc.root);
  sc.ks = scaled(a, k, sc.root);
  sc.s = a.gemm(sc.qs, {0, 1, 3}, sc.ks, {0, 2, 3}, a.m, a.keys);
  if (!op.getQpos())
    return sc;
  Value rowPos = a.rowPositions(op.getQpos());
  Value minusInf = a.constant(-std::numeric_limits<double>::infinity());
  sc.s = a.generic(
      {a.n, a.m, a.keys}, 0.0, {sc.s, rowPos, op.getKpos()},
      {a.map(3, {0, 1, 2}), a.map(3, {1}), a.map(3, {2}),
       a.map(3, {0, 1, 2})},
      {false, false, false},
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value seen = AttentionBuilder::sees(nb, l, args[1], args[2]);
        return arith::SelectOp::create(nb, l, seen, args[0], minusInf);
      });
  return sc;
}

/// A reduction over the keys of the logits (loops n, x, y; y reduced) with
/// the extra `rows` inputs `[N, M]`; `body` gets the logit, the extras and
/// the accumulator.
Value overKeys(AttentionBuilder &a, Value s, ValueRange rows, double init,
               Body body) {
  SmallVector<Value> operands = {s};
  operands.append(rows.begin(), rows.end());
  SmallVector<AffineMap> maps = {a.map(3, {0, 1, 2})};
  maps.append(rows.size() + 1, a.map(3, {0, 1}));
  return a.generic({a.n, a.m}, init, operands, maps, {false, false, true},
                   body);
}

/// Elementwise over `[N, M]` rows.
Value overRows(AttentionBuilder &a, ValueRange inputs, Body body) {
  SmallVector<AffineMap> maps(inputs.size() + 1, a.map(2, {0, 1}));
  return a.generic({a.n, a.m}, 0.0, inputs, maps, {false, false}, body);
}

/// P = exp(s - lse) (0 where masked: s = -inf; a row that sees no key has
/// lse = -inf, taken as 0). The forward and the backward build the same ops
/// from the same logits and lse, so where both are in one function CSE
/// keeps one P (recomputation, shardx-recompute-activations, decides
/// whether the backward computes it again, not this decomposition).
Value probabilities(AttentionBuilder &a, Value s, Value lse) {
  Value zero = a.constant(0.0);
  Value minusInf = a.constant(-std::numeric_limits<double>::infinity());
  return a.generic(
      {a.n, a.m, a.keys}, 0.0, {s, lse},
      {a.map(3, {0, 1, 2}), a.map(3, {0, 1}), a.map(3, {0, 1, 2})},
      {false, false, false},
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                           args[1], minusInf);
        Value ref = arith::SelectOp::create(nb, l, none, zero, args[1]);
        return math::ExpOp::create(
            nb, l, arith::SubFOp::create(nb, l, args[0], ref));
      });
}

LogicalResult lowerForward(RewriterBase &rewriter, AttentionOp op) {
  AttentionBuilder a(rewriter, op);
  Value q = a.queryView(op.getQ()), k = a.keyView(op.getK()),
        v = a.keyView(op.getV());
  Scores sc = scores(a, op, q, k);
  double inf = std::numeric_limits<double>::infinity();
  Value minusInf = a.constant(-inf), zero = a.constant(0.0);
  Value rowMax = overKeys(a, sc.s, {}, -inf,
                          [](OpBuilder &nb, Location l, ValueRange args) {
                            return arith::MaximumFOp::create(nb, l, args[1],
                                                             args[0])
                                .getResult();
                          });
  // A row that sees no key has max -inf: 0 instead, so that its exponents
  // are exp(-inf) = 0 rather than NaN.
  Value safeMax = overRows(a, {rowMax}, [&](OpBuilder &nb, Location l,
                                            ValueRange args) -> Value {
    Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                       args[0], minusInf);
    return arith::SelectOp::create(nb, l, none, zero, args[0]);
  });
  Value sum = overKeys(
      a, sc.s, {safeMax}, 0.0,
      [](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value e = math::ExpOp::create(
            nb, l, arith::SubFOp::create(nb, l, args[0], args[1]));
        return arith::AddFOp::create(nb, l, args[2], e);
      });
  Value lse = overRows(a, {safeMax, sum}, [&](OpBuilder &nb, Location l,
                                              ValueRange args) -> Value {
    Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                       args[1], zero);
    Value x = arith::AddFOp::create(nb, l, args[0],
                                    math::LogOp::create(nb, l, args[1]));
    return arith::SelectOp::create(nb, l, none, minusInf, x);
  });
  Value p = probabilities(a, sc.s, lse);
  Value out = a.gemm(p, {0, 1, 3}, v, {0, 3, 2}, a.m, a.valueWidth);
  rewriter.replaceOp(op, {a.fromQueryView(out, op.getOut().getType()),
                          a.fromQueryView(lse, op.getLse().getType())});
  return success();
}

/// The backward's shared part on the 3-D views: P and dS = P * (dP -
/// delta), dP = dout @ v^T, delta = rowsum(dout * out).
struct Backward {
  Value dout, p, ds;
  Scores sc;
};

template <typename OpT>
Backward backward(AttentionBuilder &a, OpT op) {
  Backward g;
  Value q = a.queryView(op.getQ()), k = a.keyView(op.getK());
  Value v = a.keyView(op.getV()), out = a.queryView(op.getOut());
  g.dout = a.queryView(op.getDout());
  g.sc = scores(a, op, q, k);
  g.p = probabilities(a, g.sc.s, a.queryView(op.getLse()));
  Value dp = a.gemm(g.dout, {0, 1, 3}, v, {0, 2, 3}, a.m, a.keys);
  Value delta = a.generic(
      {a.n, a.m}, 0.0, {g.dout, out},
      {a.map(3, {0, 1, 2}), a.map(3, {0, 1, 2}), a.map(3, {0, 1})},
      {false, false, true}, [](OpBuilder &nb, Location l, ValueRange args) {
        Value x = arith::MulFOp::create(nb, l, args[0], args[1]);
        return arith::AddFOp::create(nb, l, args[2], x).getResult();
      });
  AffineMap rows = a.map(3, {0, 1}), full = a.map(3, {0, 1, 2});
  g.ds = a.generic({a.n, a.m, a.keys}, 0.0, {g.p, dp, delta},
                   {full, full, rows, full}, {false, false, false},
                   [](OpBuilder &nb, Location l, ValueRange args) {
                     Value d = arith::SubFOp::create(nb, l, args[1], args[2]);
                     return arith::MulFOp::create(nb, l, args[0], d)
                         .getResult();
                   });
  return g;
}

LogicalResult lowerDq(RewriterBase &rewriter, AttentionDqOp op) {
  AttentionBuilder a(rewriter, op);
  Backward g = backward(a, op);
  // d(q * root) = dS @ (k * root); dq = that * root.
  Value dq = a.gemm(g.ds, {0, 1, 3}, g.sc.ks, {0, 3, 2}, a.m, a.width);
  rewriter.replaceOp(op, a.fromQueryView(scaled(a, dq, g.sc.root),
                                         op.getDq().getType()));
  return success();
}

LogicalResult lowerDkv(RewriterBase &rewriter, AttentionDkvOp op) {
  AttentionBuilder a(rewriter, op);
  Backward g = backward(a, op);
  // Over the loops (n, key, x, row): dk = root * dS^T @ (q * root),
  // dv = P^T @ dout.
  Value dk = a.gemm(g.ds, {0, 3, 1}, g.sc.qs, {0, 3, 2}, a.keys, a.width);
  Value dv = a.gemm(g.p, {0, 3, 1}, g.dout, {0, 3, 2}, a.keys,
                    a.valueWidth);
  rewriter.replaceOp(op, {a.fromKeyView(scaled(a, dk, g.sc.root), op.getK()),
                          a.fromKeyView(dv, op.getV())});
  return success();
}

} // namespace

LogicalResult mlir::shardx::decomposeAttention(RewriterBase &rewriter,
                                               Operation *op) {
  rewriter.setInsertionPoint(op);
  if (auto forward = dyn_cast<AttentionOp>(op))
    return lowerForward(rewriter, forward);
  if (auto dq = dyn_cast<AttentionDqOp>(op))
    return lowerDq(rewriter, dq);
  return lowerDkv(rewriter, cast<AttentionDkvOp>(op));
}
