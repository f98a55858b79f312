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
// Under `products = bf16|f16` every product's operands are rounded to that
// type first (q, k, v, dout, P or the blocks' exponentials, dS): the numbers
// of a fused GPU kernel, written out for the targets without one. There the
// scale multiplies S (and dq, dk) rather than q and k, so every product reads
// rounded values (bf16 GEMMs on the cuda target, shardx-narrow-gemm-operands).
// Where S fits the block budget the three ops build S and P alike, so CSE
// shares them between the forward and the backward ops of one attention
// where they are in one function. Larger S are written over blocks of keys:
// the forward an online softmax (a running m, l and unnormalized output,
// rescaled by exp(m - m') as a block raises the max), the backward each
// block key-major (`ks_j @ qs^T`: not the forward's op, so CSE does not keep
// every block alive from the forward), `attention_dq` and `attention_dkv`
// of one attention written together, block by block.
//
//===----------------------------------------------------------------------===//

#include "DecomposeAttention.h"

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
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
    if (auto attr = op->getAttrOfType<TypeAttr>("products"))
      products = attr.getValue();
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

  /// `x` with its elements rounded to the products' type and back: the
  /// value a product reads under `products` (itself without).
  Value rounded(Value x) {
    if (!products)
      return x;
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    AffineMap identity = b.getMultiDimIdentityMap(rank);
    return generic(tensor::getMixedSizes(b, loc, x), 0.0, {x},
                   {identity, identity}, SmallVector<bool>(rank, false),
                   [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                     Value narrow =
                         arith::TruncFOp::create(nb, l, products, args[0]);
                     return arith::ExtFOp::create(nb, l, element, narrow);
                   });
  }

  AffineMap map(unsigned count, ArrayRef<unsigned> dimsOf) {
    return AffineMap::getMultiDimMapWithTargets(count, dimsOf,
                                                b.getContext());
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
  /// The type of every product's operands (`products`), or null.
  Type products;
  OpFoldResult batch, heads, kvHeads, groups, queries, keys, width,
      valueWidth, n, m;
  /// The query heads per key/value head when they are dynamic (then the
  /// key/value heads are repeated), else null.
  Value groupCount;
};

/// The most key blocks one attention op is written as.
constexpr int64_t kMaxKeyBlocks = 16;

/// The scaled query and key views (each times the root of the scale, as
/// PyTorch's math attention scales them), the value view and the key
/// blocks: `[start, start + size)` ranges of the keys, one block where the
/// scores of every key fit the block budget. Under `products` the views are
/// the rounded values themselves, so that every product reads values of
/// the narrow type (the cuda target's bf16 GEMMs, shardx-narrow-gemm-
/// operands), and the scale multiplies the logits (`logitScale`) instead.
struct Scores {
  Value qs, ks, v, qpos, kpos;
  /// What the logits are still multiplied by (null: nothing), and what dq
  /// and dk are multiplied by at the end (the chain rule through the
  /// scaled views, or the scale).
  Value logitScale, gradScale;
  SmallVector<std::pair<int64_t, int64_t>> blocks;
};

/// `x * root`, elementwise.
Value scaled(AttentionBuilder &a, Value x, Value root) {
  SmallVector<unsigned> all = {0, 1, 2};
  return a.generic(tensor::getMixedSizes(a.b, a.loc, x), 0.0, {x}, {a.map(3, all), a.map(3, all)},
                   {false, false, false},
                   [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                     return arith::MulFOp::create(nb, l, args[0], root);
                   });
}

template <typename OpT>
Scores scores(AttentionBuilder &a, OpT op, int64_t blockBytes) {
  Scores sc;
  double scale = op.getScale().convertToDouble();
  if (a.products) {
    sc.logitScale = sc.gradScale = a.constant(scale);
    sc.qs = a.rounded(a.queryView(op.getQ()));
    sc.ks = a.rounded(a.keyView(op.getK()));
  } else {
    sc.gradScale = a.constant(std::sqrt(scale));
    sc.qs = scaled(a, a.queryView(op.getQ()), sc.gradScale);
    sc.ks = scaled(a, a.keyView(op.getK()), sc.gradScale);
  }
  sc.v = a.rounded(a.keyView(op.getV()));
  if (op.getQpos()) {
    sc.qpos = a.rowPositions(op.getQpos());
    sc.kpos = op.getKpos();
  }
  // Blocks of keys whose [N, M, block] scores fit `blockBytes` (static
  // sizes only; otherwise one block), at most kMaxKeyBlocks of them: each
  // block is its own ops, and a program's size is time to its first step.
  std::optional<int64_t> n = getConstantIntValue(a.n),
                         m = getConstantIntValue(a.m),
                         keys = getConstantIntValue(a.keys);
  int64_t bytes = a.element.getIntOrFloatBitWidth() / 8;
  int64_t block = keys.value_or(0);
  if (n && m && keys && blockBytes > 0 && *n * *m * *keys * bytes > blockBytes)
    block = std::max({int64_t(1), blockBytes / (*n * *m * bytes),
                      static_cast<int64_t>(
                          llvm::divideCeil(*keys, kMaxKeyBlocks))});
  if (!keys || block >= *keys) {
    sc.blocks.push_back({0, -1}); // every key, whatever their count
    return sc;
  }
  for (int64_t start = 0; start < *keys; start += block)
    sc.blocks.push_back({start, std::min(block, *keys - start)});
  return sc;
}

/// The keys of `block` of a `[N, Sk, X]` view (or of the `[Sk]` positions):
/// the view itself for the block of every key.
Value keyBlock(AttentionBuilder &a, Value v, std::pair<int64_t, int64_t> block) {
  if (block.second < 0)
    return v;
  auto type = cast<RankedTensorType>(v.getType());
  int64_t dim = type.getRank() == 1 ? 0 : 1;
  SmallVector<OpFoldResult> offsets(type.getRank(), a.b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(a.b, a.loc, v);
  SmallVector<OpFoldResult> strides(type.getRank(), a.b.getIndexAttr(1));
  offsets[dim] = a.b.getIndexAttr(block.first);
  sizes[dim] = a.b.getIndexAttr(block.second);
  return tensor::ExtractSliceOp::create(a.b, a.loc, v, offsets, sizes,
                                        strides);
}

/// The logits of one key block, `qs @ ks^T` (times `logitScale`), -inf
/// where a key is not seen.
Value logits(AttentionBuilder &a, const Scores &sc,
             std::pair<int64_t, int64_t> block) {
  Value ks = keyBlock(a, sc.ks, block);
  OpFoldResult keys = a.size(ks, 1);
  Value s = a.gemm(sc.qs, {0, 1, 3}, ks, {0, 2, 3}, a.m, keys);
  if (!sc.qpos && !sc.logitScale)
    return s;
  Value minusInf = a.constant(-std::numeric_limits<double>::infinity());
  SmallVector<Value> inputs = {s};
  SmallVector<AffineMap> maps = {a.map(3, {0, 1, 2})};
  if (sc.qpos) {
    inputs.append({sc.qpos, keyBlock(a, sc.kpos, block)});
    maps.append({a.map(3, {1}), a.map(3, {2})});
  }
  maps.push_back(a.map(3, {0, 1, 2}));
  return a.generic({a.n, a.m, keys}, 0.0, inputs, maps, {false, false, false},
                   [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                     Value x = args[0];
                     if (sc.logitScale)
                       x = arith::MulFOp::create(nb, l, x, sc.logitScale);
                     if (!sc.qpos)
                       return x;
                     Value seen =
                         AttentionBuilder::sees(nb, l, args[1], args[2]);
                     return arith::SelectOp::create(nb, l, seen, x, minusInf);
                   });
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

/// Elementwise over `[N, M, X]` (the shape of `like`), `rows` inputs read
/// per row.
Value overRowsOf(AttentionBuilder &a, Value like, ValueRange full,
                 ValueRange rows, Body body) {
  SmallVector<Value> operands(full);
  operands.append(rows.begin(), rows.end());
  SmallVector<AffineMap> maps(full.size(), a.map(3, {0, 1, 2}));
  maps.append(rows.size(), a.map(3, {0, 1}));
  maps.push_back(a.map(3, {0, 1, 2}));
  return a.generic({a.n, a.m, a.size(like, 2)}, 0.0, operands, maps,
                   {false, false, false}, body);
}

/// `ref`, or 0 where it is -inf (the max or lse of a row that has seen no
/// key: its exponents are then exp(-inf) = 0 rather than NaN).
Value finiteRef(OpBuilder &nb, Location l, Value ref, Value minusInf,
                Value zero) {
  Value none =
      arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, ref, minusInf);
  return arith::SelectOp::create(nb, l, none, zero, ref);
}

/// exp(x - finiteRef(ref)).
Value expFrom(OpBuilder &nb, Location l, Value x, Value ref, Value minusInf,
              Value zero) {
  Value safe = finiteRef(nb, l, ref, minusInf, zero);
  return math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, x, safe));
}

/// P = exp(s - lse) of one block (0 where masked: s = -inf). The forward
/// (in one block) and the backward build the same ops from the same logits
/// and lse, so where both are in one function CSE keeps one P
/// (recomputation, shardx-recompute-activations, decides whether the
/// backward computes it again, not this decomposition).
Value probabilities(AttentionBuilder &a, Value s, Value lse) {
  Value zero = a.constant(0.0);
  Value minusInf = a.constant(-std::numeric_limits<double>::infinity());
  return overRowsOf(a, s, {s}, {lse},
                    [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                      return expFrom(nb, l, args[0], args[1], minusInf, zero);
                    });
}

LogicalResult lowerForward(RewriterBase &rewriter, AttentionOp op,
                           int64_t blockBytes) {
  AttentionBuilder a(rewriter, op);
  Scores sc = scores(a, op, blockBytes);
  double inf = std::numeric_limits<double>::infinity();
  Value minusInf = a.constant(-inf), zero = a.constant(0.0);
  auto rowMax = [&](Value s) {
    return overKeys(a, s, {}, -inf,
                    [](OpBuilder &nb, Location l, ValueRange args) {
                      return arith::MaximumFOp::create(nb, l, args[1], args[0])
                          .getResult();
                    });
  };
  auto rowSumExp = [&](Value s, Value ref) {
    return overKeys(a, s, {ref}, 0.0,
                    [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                      Value e = expFrom(nb, l, args[0], args[1], minusInf, zero);
                      return arith::AddFOp::create(nb, l, args[2], e);
                    });
  };
  // lse = max + log(sum), -inf where the sum is 0 (no key seen).
  auto logSumExp = [&](Value max, Value sum) {
    return overRows(a, {max, sum}, [&](OpBuilder &nb, Location l,
                                       ValueRange args) -> Value {
      Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                         args[1], zero);
      Value safe = finiteRef(nb, l, args[0], minusInf, zero);
      Value x = arith::AddFOp::create(nb, l, safe,
                                      math::LogOp::create(nb, l, args[1]));
      return arith::SelectOp::create(nb, l, none, minusInf, x);
    });
  };
  Value out, lse;
  if (sc.blocks.size() == 1) {
    Value s = logits(a, sc, sc.blocks[0]);
    Value max = rowMax(s);
    lse = logSumExp(max, rowSumExp(s, max));
    out = a.gemm(a.rounded(probabilities(a, s, lse)), {0, 1, 3}, sc.v,
                 {0, 3, 2}, a.m, a.valueWidth);
  } else {
    // The online softmax over key blocks (flash attention's forward): the
    // running max m, sum l and unnormalized output acc, rescaled by
    // exp(m - m') when a block raises the max to m'.
    Value max = linalg::FillOp::create(a.b, a.loc, minusInf,
                                       a.empty({a.n, a.m}, a.element))
                    .getResult(0);
    Value sum, acc;
    for (auto block : sc.blocks) {
      Value s = logits(a, sc, block);
      Value newMax = overRows(
          a, {max, rowMax(s)},
          [](OpBuilder &nb, Location l, ValueRange args) -> Value {
            return arith::MaximumFOp::create(nb, l, args[0], args[1]);
          });
      Value rescale = overRows(
          a, {max, newMax},
          [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
            return expFrom(nb, l, args[0], args[1], minusInf, zero);
          });
      Value e = overRowsOf(
          a, s, {s}, {newMax},
          [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
            return expFrom(nb, l, args[0], args[1], minusInf, zero);
          });
      Value blockSum = overKeys(
          a, e, {}, 0.0, [](OpBuilder &nb, Location l, ValueRange args) {
            return arith::AddFOp::create(nb, l, args[1], args[0]).getResult();
          });
      // Under `products` the exponentials are rounded before the product
      // (normalized after it, as a fused kernel's blocks are).
      Value pv = a.gemm(a.rounded(e), {0, 1, 3}, keyBlock(a, sc.v, block),
                        {0, 3, 2}, a.m, a.valueWidth);
      if (!sum) {
        sum = blockSum;
        acc = pv;
      } else {
        auto rescaled = [](OpBuilder &nb, Location l, ValueRange args) {
          Value x = arith::MulFOp::create(nb, l, args[0], args[2]);
          return arith::AddFOp::create(nb, l, x, args[1]).getResult();
        };
        sum = overRows(a, {sum, blockSum, rescale}, rescaled);
        acc = overRowsOf(a, acc, {acc, pv}, {rescale}, rescaled);
      }
      max = newMax;
    }
    lse = logSumExp(max, sum);
    out = overRowsOf(a, acc, {acc}, {sum},
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       Value none = arith::CmpFOp::create(
                           nb, l, arith::CmpFPredicate::OEQ, args[1], zero);
                       Value x = arith::DivFOp::create(nb, l, args[0], args[1]);
                       return arith::SelectOp::create(nb, l, none, zero, x);
                     });
  }
  rewriter.replaceOp(op, {a.fromQueryView(out, op.getOut().getType()),
                          a.fromQueryView(lse, op.getLse().getType())});
  return success();
}

/// One key block of the backward on the 3-D views: P and dS = P * (dP -
/// delta), dP = dout @ v^T.
struct BackwardBlock {
  Value p, ds;
  /// Whether p and ds are `[N, keys, M]` (the key-major layout of several
  /// blocks) rather than `[N, M, keys]`.
  bool keyMajor = false;
};

/// The backward's per-op part: the scores' inputs, dout, lse and delta =
/// rowsum(dout * out).
struct Backward {
  Scores sc;
  /// dout as the products read it (rounded under `products`).
  Value dout, lse, delta;

  /// One block's P and dS. One block of every key builds them as the
  /// forward does (CSE shares the logits and P with it: nothing computed
  /// twice). Several blocks build them key-major, `ks_j @ qs^T`, an op the
  /// forward does not have: so CSE does not keep every block's logits from
  /// the forward to the backward, and one block's are alive at a time.
  BackwardBlock block(AttentionBuilder &a,
                      std::pair<int64_t, int64_t> keys) const {
    BackwardBlock g;
    Value v = keyBlock(a, sc.v, keys);
    auto subtractDelta = [](OpBuilder &nb, Location l, ValueRange args) {
      Value d = arith::SubFOp::create(nb, l, args[1], args[2]);
      return arith::MulFOp::create(nb, l, args[0], d).getResult();
    };
    if (keys.second < 0) {
      g.p = probabilities(a, logits(a, sc, keys), lse);
      Value dp = a.gemm(dout, {0, 1, 3}, v, {0, 2, 3}, a.m, a.size(v, 1));
      g.ds = overRowsOf(a, g.p, {g.p, dp}, {delta}, subtractDelta);
      return g;
    }
    g.keyMajor = true;
    Value ks = keyBlock(a, sc.ks, keys);
    OpFoldResult count = a.b.getIndexAttr(keys.second);
    SmallVector<OpFoldResult> shape = {a.n, count, a.m};
    AffineMap all = a.map(3, {0, 1, 2}), rows = a.map(3, {0, 2});
    // P^T = exp(ks @ qs^T - lse), 0 where the key is not seen.
    Value st = a.gemm(ks, {0, 1, 3}, sc.qs, {0, 2, 3}, count, a.m);
    Value zero = a.constant(0.0);
    Value minusInf = a.constant(-std::numeric_limits<double>::infinity());
    SmallVector<Value> inputs = {st, lse};
    SmallVector<AffineMap> maps = {all, rows};
    if (sc.qpos) {
      inputs.append({keyBlock(a, sc.kpos, keys), sc.qpos});
      maps.append({a.map(3, {1}), a.map(3, {2})});
    }
    maps.push_back(all);
    bool causal = static_cast<bool>(sc.qpos);
    Value logitScale = sc.logitScale;
    g.p = a.generic(shape, 0.0, inputs, maps, {false, false, false},
                    [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                      Value x = args[0];
                      if (logitScale)
                        x = arith::MulFOp::create(nb, l, x, logitScale);
                      Value e = expFrom(nb, l, x, args[1], minusInf, zero);
                      if (!causal)
                        return e;
                      Value seen =
                          AttentionBuilder::sees(nb, l, args[3], args[2]);
                      return arith::SelectOp::create(nb, l, seen, e, zero);
                    });
    Value dpt = a.gemm(v, {0, 1, 3}, dout, {0, 2, 3}, count, a.m);
    g.ds = a.generic(shape, 0.0, {g.p, dpt, delta}, {all, all, rows, all},
                     {false, false, false}, subtractDelta);
    return g;
  }
};

template <typename OpT>
Backward backward(AttentionBuilder &a, OpT op, int64_t blockBytes) {
  Backward g;
  g.sc = scores(a, op, blockBytes);
  Value dout = a.queryView(op.getDout());
  g.dout = a.rounded(dout);
  g.lse = a.queryView(op.getLse());
  Value out = a.queryView(op.getOut());
  g.delta = a.generic(
      {a.n, a.m}, 0.0, {dout, out},
      {a.map(3, {0, 1, 2}), a.map(3, {0, 1, 2}), a.map(3, {0, 1})},
      {false, false, true}, [](OpBuilder &nb, Location l, ValueRange args) {
        Value x = arith::MulFOp::create(nb, l, args[0], args[1]);
        return arith::AddFOp::create(nb, l, args[2], x).getResult();
      });
  return g;
}

/// The backward ops of one attention (either may be null), written
/// together: per key block, P and dS once, then dq's part and dk's, dv's
/// rows, so that a block's P and dS are freed before the next block's.
LogicalResult lowerBackward(RewriterBase &rewriter, AttentionDqOp dqOp,
                            AttentionDkvOp dkvOp, int64_t blockBytes) {
  // At the earlier of the two (the scheduling of collectives may have put
  // either first): both read the same operands.
  Operation *first = dqOp ? dqOp.getOperation() : dkvOp.getOperation();
  if (dqOp && dkvOp && dkvOp->isBeforeInBlock(dqOp))
    first = dkvOp;
  rewriter.setInsertionPoint(first);
  AttentionBuilder a(rewriter, first);
  Backward g = dqOp ? backward(a, dqOp, blockBytes)
                    : backward(a, dkvOp, blockBytes);
  Value dq, dk, dv;
  if (dkvOp && g.sc.blocks.size() > 1) {
    dk = a.empty({a.n, a.keys, a.width}, a.element);
    dv = a.empty({a.n, a.keys, a.valueWidth}, a.element);
  }
  auto add = [](OpBuilder &nb, Location l, ValueRange args) {
    return arith::AddFOp::create(nb, l, args[0], args[1]).getResult();
  };
  for (auto keys : g.sc.blocks) {
    BackwardBlock blk = g.block(a, keys);
    if (dqOp) {
      // d(q * root) = sum over blocks of dS @ (k * root).
      SmallVector<unsigned> byRow = blk.keyMajor
                                        ? SmallVector<unsigned>{0, 3, 1}
                                        : SmallVector<unsigned>{0, 1, 3};
      Value part = a.gemm(a.rounded(blk.ds), byRow, keyBlock(a, g.sc.ks, keys),
                          {0, 3, 2}, a.m, a.width);
      dq = dq ? overRowsOf(a, dq, {dq, part}, {}, add) : part;
    }
    if (!dkvOp)
      continue;
    // Over the loops (n, key, x, row): d(k * root) = dS^T @ (q * root),
    // dv = P^T @ dout; a block's rows inserted at its keys.
    OpFoldResult count = a.size(blk.p, blk.keyMajor ? 1 : 2);
    SmallVector<unsigned> byKey = blk.keyMajor
                                      ? SmallVector<unsigned>{0, 1, 3}
                                      : SmallVector<unsigned>{0, 3, 1};
    Value dkBlock =
        a.gemm(a.rounded(blk.ds), byKey, g.sc.qs, {0, 3, 2}, count, a.width);
    Value dvBlock =
        a.gemm(a.rounded(blk.p), byKey, g.dout, {0, 3, 2}, count, a.valueWidth);
    if (keys.second < 0) {
      dk = dkBlock;
      dv = dvBlock;
      continue;
    }
    auto insert = [&](Value part, Value into) {
      SmallVector<OpFoldResult> offsets = {a.b.getIndexAttr(0),
                                           a.b.getIndexAttr(keys.first),
                                           a.b.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {a.n, count, a.size(part, 2)};
      SmallVector<OpFoldResult> strides(3, a.b.getIndexAttr(1));
      return tensor::InsertSliceOp::create(a.b, a.loc, part, into, offsets,
                                           sizes, strides)
          .getResult();
    };
    dk = insert(dkBlock, dk);
    dv = insert(dvBlock, dv);
  }
  // dq, dk: times the root once more (the chain rule through q * root), or
  // under `products` times the scale.
  if (dqOp)
    rewriter.replaceOp(dqOp, a.fromQueryView(scaled(a, dq, g.sc.gradScale),
                                             dqOp.getDq().getType()));
  if (dkvOp)
    rewriter.replaceOp(
        dkvOp, {a.fromKeyView(scaled(a, dk, g.sc.gradScale), dkvOp.getK()),
                a.fromKeyView(dv, dkvOp.getV())});
  return success();
}

} // namespace

LogicalResult mlir::shardx::decomposeAttention(RewriterBase &rewriter,
                                               Operation *op,
                                               int64_t blockBytes,
                                               Operation *partner) {
  rewriter.setInsertionPoint(op);
  if (auto forward = dyn_cast<AttentionOp>(op))
    return lowerForward(rewriter, forward, blockBytes);
  auto dq = dyn_cast<AttentionDqOp>(op);
  auto dkv = dyn_cast<AttentionDkvOp>(op);
  if (partner) {
    dq = dq ? dq : cast<AttentionDqOp>(partner);
    dkv = dkv ? dkv : cast<AttentionDkvOp>(partner);
  }
  return lowerBackward(rewriter, dq, dkv, blockBytes);
}

Operation *mlir::shardx::findAttentionPartner(Operation *op) {
  if (!isa<AttentionDqOp, AttentionDkvOp>(op))
    return nullptr;
  for (Operation *user : op->getOperand(0).getUsers()) {
    if (user == op || user->getBlock() != op->getBlock() ||
        isa<AttentionDqOp>(user) == isa<AttentionDqOp>(op) ||
        !isa<AttentionDqOp, AttentionDkvOp>(user) ||
        user->getOperands() != op->getOperands() ||
        user->getAttrDictionary() != op->getAttrDictionary())
      continue;
    return user;
  }
  return nullptr;
}
