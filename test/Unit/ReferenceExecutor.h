//===- ReferenceExecutor.h - Runs reshard plans on simulated ranks -*- C++ -*-//
//
// Part of ShardX.
//
// A test-only executor: every rank's local tensor in memory, each plan step
// applied with the exact semantics of its collective, written here from the
// step's parameters alone (group axes, dims, outer blocks, sizes) and
// independent of the planner's code. Global data are small integers so data
// movement and sum/max/min reductions are bit-exact.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TEST_UNIT_REFERENCEEXECUTOR_H
#define SHARDX_TEST_UNIT_REFERENCEEXECUTOR_H

#include "shardx/Layout/Layout.h"
#include "shardx/Planner/Planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardx::testing {

struct LocalTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
};

class ReferenceExecutor {
public:
  explicit ReferenceExecutor(std::vector<int64_t> meshShape)
      : meshShape(std::move(meshShape)) {
    ranks = allMeshCoords(this->meshShape);
  }

  /// Global values 1, 2, ... in row-major order.
  static std::vector<double> iota(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<double>(i + 1);
    return v;
  }

  /// Every rank's local tensor of `global` under `layout`; Partial axes get
  /// terms that reduce (nested in mesh order, axis 0 outermost) to it.
  std::vector<LocalTensor> scatter(const Layout &layout,
                                   const std::vector<int64_t> &shape,
                                   const std::vector<double> &global) const {
    std::vector<LocalTensor> out;
    for (const auto &c : ranks) {
      LocalShard shard = layout.getLocalShard(meshShape, shape, c);
      LocalTensor t;
      t.shape = shard.shape;
      std::vector<std::vector<int64_t>> idx;
      for (const auto &runs : shard.runs) {
        std::vector<int64_t> v;
        for (const Interval &r : runs)
          for (int64_t k = 0; k < r.size; ++k)
            v.push_back(r.offset + k);
        idx.push_back(v);
      }
      forEachIndex(t.shape, [&](const std::vector<int64_t> &li) {
        int64_t g = 0;
        for (size_t d = 0; d < shape.size(); ++d)
          g = g * shape[d] + idx[d][li[d]];
        t.data.push_back(partialTerm(layout, c, global[g], g));
      });
      out.push_back(std::move(t));
    }
    return out;
  }

  /// Reduces pending Partial axes of `layout` (innermost first) so every
  /// rank holds plain values, for comparison.
  std::vector<LocalTensor> materialize(const Layout &layout,
                                       std::vector<LocalTensor> locals) const {
    for (int64_t a = layout.getMeshRank() - 1; a >= 0; --a)
      if (const auto &op = layout.getPartials()[a]) {
        Step s;
        s.kind = Step::Kind::AllReduce;
        s.axes = {a};
        s.reduce = *op;
        apply(s, locals);
      }
    return locals;
  }

  /// Applies one step to every rank's local tensor.
  void apply(const Step &step, std::vector<LocalTensor> &locals) const {
    std::vector<LocalTensor> next = locals;
    for (const std::vector<size_t> &group : groups(step.axes)) {
      size_t n = group.size();
      switch (step.kind) {
      case Step::Kind::AllGather: {
        std::vector<LocalTensor> pieces;
        for (size_t m : group)
          pieces.push_back(locals[m]);
        LocalTensor all = concat(pieces, step.dim, step.outer);
        for (size_t m : group)
          next[m] = all;
        break;
      }
      case Step::Kind::AllReduce:
      case Step::Kind::ReduceScatter: {
        LocalTensor sum = locals[group[0]];
        for (size_t i = 0; i < sum.data.size(); ++i) {
          std::vector<double> v;
          for (size_t m : group)
            v.push_back(locals[m].data.at(i));
          sum.data[i] = reduce(v, step.reduce);
        }
        for (size_t j = 0; j < n; ++j)
          next[group[j]] =
              step.kind == Step::Kind::AllReduce
                  ? sum
                  : piece(sum, step.dim, step.outer, n, j, step.sizes);
        break;
      }
      case Step::Kind::AllToAll: {
        for (size_t j = 0; j < n; ++j) {
          std::vector<LocalTensor> received;
          for (size_t i = 0; i < n; ++i)
            received.push_back(piece(locals[group[i]], step.splitDim,
                                     step.splitOuter, n, j, step.sizes));
          next[group[j]] = concat(received, step.dim, step.outer);
        }
        break;
      }
      case Step::Kind::Chunk:
        for (size_t j = 0; j < n; ++j)
          next[group[j]] =
              piece(locals[group[j]], step.dim, step.outer, n, j, step.sizes);
        break;
      case Step::Kind::PartitionValue:
        for (size_t j = 1; j < n; ++j)
          if (step.reduce == ReduceOp::Sum || step.reduce == ReduceOp::Prod)
            std::fill(next[group[j]].data.begin(), next[group[j]].data.end(),
                      step.reduce == ReduceOp::Sum ? 0.0 : 1.0);
        break;
      case Step::Kind::Rescale:
        for (size_t m : group)
          for (double &x : next[m].data)
            x *= step.scale;
        break;
      case Step::Kind::Permute:
        for (auto [source, target] : step.pairs)
          next[group.at(target)] = locals[group.at(source)];
        break;
      }
    }
    locals = std::move(next);
  }

  const std::vector<std::vector<int64_t>> &getRanks() const { return ranks; }

private:
  static void
  forEachIndex(const std::vector<int64_t> &shape,
               const std::function<void(const std::vector<int64_t> &)> &fn) {
    for (int64_t s : shape)
      if (s == 0)
        return;
    std::vector<int64_t> i(shape.size(), 0);
    while (true) {
      fn(i);
      int64_t d = static_cast<int64_t>(shape.size()) - 1;
      for (; d >= 0; --d) {
        if (++i[d] < shape[d])
          break;
        i[d] = 0;
      }
      if (d < 0)
        return;
    }
  }

  /// The ranks of each group over `axes`, in group order.
  std::vector<std::vector<size_t>>
  groups(const std::vector<int64_t> &axes) const {
    std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, size_t>>>
        byRest;
    for (size_t r = 0; r < ranks.size(); ++r) {
      std::vector<int64_t> rest = ranks[r];
      int64_t linear = 0;
      for (int64_t a : axes) {
        linear = linear * meshShape[a] + ranks[r][a];
        rest[a] = -1;
      }
      byRest[rest].push_back({linear, r});
    }
    std::vector<std::vector<size_t>> result;
    for (auto &[rest, members] : byRest) {
      std::sort(members.begin(), members.end());
      std::vector<size_t> g;
      for (auto &m : members)
        g.push_back(m.second);
      result.push_back(g);
    }
    return result;
  }

  static double reduce(const std::vector<double> &v, ReduceOp op) {
    double r = v[0];
    for (size_t i = 1; i < v.size(); ++i) {
      switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        r += v[i];
        break;
      case ReduceOp::Max:
        r = std::max(r, v[i]);
        break;
      case ReduceOp::Min:
        r = std::min(r, v[i]);
        break;
      case ReduceOp::Prod:
        r *= v[i];
        break;
      }
    }
    return op == ReduceOp::Avg ? r / static_cast<double>(v.size()) : r;
  }

  /// Views `dim` as (outer, inner) and keeps, per outer block, member j's
  /// piece of inner: torch.chunk of n, or the j-th of `sizes`.
  static LocalTensor piece(const LocalTensor &t, int64_t dim, int64_t outer,
                           size_t n, size_t j,
                           const std::vector<int64_t> &sizes) {
    int64_t inner = t.shape[dim] / outer;
    int64_t lo, hi;
    if (!sizes.empty()) {
      lo = 0;
      for (size_t k = 0; k < j; ++k)
        lo += sizes[k];
      hi = lo + sizes[j];
    } else {
      int64_t c =
          (inner + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
      lo = std::min<int64_t>(j * c, inner);
      hi = std::min<int64_t>(lo + c, inner);
    }
    int64_t pre = 1, post = 1;
    for (int64_t d = 0; d < dim; ++d)
      pre *= t.shape[d];
    for (size_t d = dim + 1; d < t.shape.size(); ++d)
      post *= t.shape[d];
    LocalTensor out;
    out.shape = t.shape;
    out.shape[dim] = outer * (hi - lo);
    for (int64_t p = 0; p < pre; ++p)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = lo; i < hi; ++i)
          for (int64_t q = 0; q < post; ++q)
            out.data.push_back(
                t.data.at(((p * t.shape[dim]) + o * inner + i) * post + q));
    return out;
  }

  /// Concatenates pieces along `dim`, each viewed as (outer, inner_i), per
  /// outer block.
  static LocalTensor concat(const std::vector<LocalTensor> &pieces, int64_t dim,
                            int64_t outer) {
    LocalTensor out;
    out.shape = pieces[0].shape;
    out.shape[dim] = 0;
    for (const LocalTensor &p : pieces)
      out.shape[dim] += p.shape[dim];
    int64_t pre = 1, post = 1;
    for (int64_t d = 0; d < dim; ++d)
      pre *= out.shape[d];
    for (size_t d = dim + 1; d < out.shape.size(); ++d)
      post *= out.shape[d];
    for (int64_t p = 0; p < pre; ++p)
      for (int64_t o = 0; o < outer; ++o)
        for (const LocalTensor &t : pieces) {
          int64_t inner = t.shape[dim] / outer;
          for (int64_t i = 0; i < inner; ++i)
            for (int64_t q = 0; q < post; ++q)
              out.data.push_back(
                  t.data.at(((p * t.shape[dim]) + o * inner + i) * post + q));
        }
    return out;
  }

  /// The term rank `c` holds of value `v` (element `g`) under the Partial
  /// axes of `layout`, split outermost axis first.
  double partialTerm(const Layout &layout, const std::vector<int64_t> &c,
                     double v, int64_t g) const {
    uint64_t h = static_cast<uint64_t>(g) * 2654435761u + 17;
    for (int64_t a = 0; a < layout.getMeshRank(); ++a) {
      const auto &op = layout.getPartials()[a];
      if (!op)
        continue;
      int64_t n = meshShape[a], i = c[a];
      auto r = [&](int64_t k) { // a small integer in [-3, 3]
        uint64_t x = (h + static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ull) *
                     0xbf58476d1ce4e5b9ull;
        return static_cast<double>(static_cast<int64_t>((x >> 33) % 7) - 3);
      };
      int64_t keeper = static_cast<int64_t>(h % static_cast<uint64_t>(n));
      switch (*op) {
      case ReduceOp::Sum: {
        double rest = 0;
        for (int64_t k = 1; k < n; ++k)
          rest += r(k);
        v = i == 0 ? v - rest : r(i);
        break;
      }
      case ReduceOp::Avg: {
        double r0 = 0;
        for (int64_t k = 1; k < n; ++k)
          r0 -= r(k);
        v = v + (i == 0 ? r0 : r(i));
        break;
      }
      case ReduceOp::Max:
        v = i == keeper ? v : v - std::abs(r(i)) - 1;
        break;
      case ReduceOp::Min:
        v = i == keeper ? v : v + std::abs(r(i)) + 1;
        break;
      case ReduceOp::Prod:
        v = i == 0 ? v / std::ldexp(1.0, static_cast<int>(n - 1)) : 2.0;
        break;
      }
      h = h * 31 + static_cast<uint64_t>(i) + 7;
    }
    return v;
  }

  std::vector<int64_t> meshShape;
  std::vector<std::vector<int64_t>> ranks;
};

} // namespace shardx::testing

#endif // SHARDX_TEST_UNIT_REFERENCEEXECUTOR_H
