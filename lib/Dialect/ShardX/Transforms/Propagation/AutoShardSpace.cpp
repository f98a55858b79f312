//===- AutoShardSpace.cpp - shardx-auto-shard's choices and solver --------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "AutoShardSpace.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <limits>
#include <set>
#include <tuple>

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

static constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Choice> autoshard::layoutChoices(RankedTensorType type,
                                             ArrayRef<int64_t> meshShape,
                                             bool batchOnly) {
  std::vector<Choice> out;
  int64_t rank = type.getRank();
  int64_t options = batchOnly ? std::min<int64_t>(rank, 1) + 1 : rank + 1;
  int64_t count = 1;
  for (size_t a = 0; a < meshShape.size(); ++a)
    count *= options;
  std::vector<int64_t> mesh(meshShape.begin(), meshShape.end());
  for (int64_t code = 0; code < count; ++code) {
    std::vector<Placement> ps;
    SmallVector<int64_t> splitBy(rank, 1);
    int64_t c = code;
    bool ok = true;
    for (size_t a = 0; a < meshShape.size(); ++a, c /= options) {
      int64_t pick = c % options;
      if (pick == 0) {
        ps.push_back(Placement::replicate());
        continue;
      }
      int64_t dim = pick - 1;
      splitBy[dim] *= meshShape[a];
      ps.push_back(Placement::shard(dim));
    }
    for (int64_t d = 0; d < rank; ++d)
      if (splitBy[d] > 1 &&
          (type.isDynamicDim(d) || type.getDimSize(d) % splitBy[d] != 0))
        ok = false;
    if (!ok)
      continue;
    std::string error;
    std::optional<Layout> layout = Layout::fromPlacements(ps, mesh, error);
    if (!layout)
      continue;
    out.push_back({ps, *layout, layout->str()});
  }
  return out;
}

std::pair<double, double> autoshard::evaluate(const Surrogate &s,
                                              ArrayRef<unsigned> pick) {
  double time = s.baseTime, peak = s.basePeak;
  for (size_t g = 0; g < pick.size(); ++g) {
    time += s.time[g][pick[g]];
    peak += s.bytes[g][pick[g]];
  }
  for (const Surrogate::Pair &p : s.pairs)
    time += p.time[pick[p.g]][pick[p.h]];
  return {time, peak};
}

std::optional<std::vector<unsigned>> autoshard::solve(const Surrogate &s,
                                                      double limit) {
  size_t n = s.time.size();
  if (!std::isfinite(s.baseTime))
    return std::nullopt;
  // The time and bytes group `g` adds with choice `c`, its pairs with the
  // others' current choices included.
  auto local = [&](ArrayRef<unsigned> pick, size_t g, unsigned c) {
    double t = s.time[g][c];
    for (unsigned i : s.pairsOf[g]) {
      const Surrogate::Pair &p = s.pairs[i];
      t += p.g == g ? p.time[c][pick[p.h]] : p.time[pick[p.g]][c];
    }
    return std::make_pair(t, s.bytes[g][c]);
  };
  // Minimizes time + lambda * bytes by coordinate descent from `pick`.
  auto descend = [&](std::vector<unsigned> &pick, double lambda) {
    for (int sweep = 0; sweep < 50; ++sweep) {
      bool changed = false;
      for (size_t g = 0; g < n; ++g) {
        auto [t0, m0] = local(pick, g, pick[g]);
        double best = t0 + lambda * m0;
        for (unsigned c = 0; c < s.time[g].size(); ++c) {
          auto [t, m] = local(pick, g, c);
          double v = t + lambda * m;
          if (v < best - 1e-12) {
            best = v;
            pick[g] = c;
            changed = true;
          }
        }
      }
      if (!changed)
        break;
    }
  };
  std::vector<unsigned> start = s.center;
  // Moves to plans of fewer bytes, the cheapest time per byte saved
  // first, until `pick` fits (or nothing saves bytes).
  auto repair = [&](std::vector<unsigned> &pick) {
    auto [t, m] = evaluate(s, pick);
    while (m > limit) {
      double bestRatio = kInf;
      size_t bg = n;
      unsigned bc = 0;
      for (size_t g = 0; g < n; ++g) {
        auto [t0, m0] = local(pick, g, pick[g]);
        for (unsigned c = 0; c < s.time[g].size(); ++c) {
          auto [t1, m1] = local(pick, g, c);
          if (m1 >= m0 || !std::isfinite(t1))
            continue;
          double ratio = (t1 - t0) / (m0 - m1);
          if (ratio < bestRatio) {
            bestRatio = ratio;
            bg = g;
            bc = c;
          }
        }
      }
      if (bg == n)
        return;
      pick[bg] = bc;
      std::tie(t, m) = evaluate(s, pick);
    }
  };
  // Local search among plans that fit: one group, or two groups, changed
  // at a time while that lowers the time.
  auto improve = [&](std::vector<unsigned> &pick) {
    double bestTime = evaluate(s, pick).first;
    bool improved = false;
    // Takes `p` when it fits and is faster.
    auto accept = [&](const std::vector<unsigned> &p) {
      auto [t, m] = evaluate(s, p);
      if (m <= limit && t < bestTime - 1e-9) {
        pick = p;
        bestTime = t;
        improved = true;
      }
    };
    for (int round = 0; round < 20; ++round) {
      improved = false;
      for (size_t g = 0; g < n; ++g)
        for (unsigned c = 0; c < s.time[g].size(); ++c) {
          if (c == pick[g])
            continue;
          std::vector<unsigned> p = pick;
          p[g] = c;
          accept(p);
        }
      // Swaps: one group gives up bytes another takes.
      for (size_t g = 0; g < n; ++g)
        for (size_t h = g + 1; h < n; ++h)
          for (unsigned c = 0; c < s.time[g].size(); ++c)
            for (unsigned d = 0; d < s.time[h].size(); ++d) {
              if (c == pick[g] || d == pick[h])
                continue;
              std::vector<unsigned> p = pick;
              p[g] = c;
              p[h] = d;
              accept(p);
            }
      if (!improved)
        break;
    }
  };
  // The Lagrangian relaxation over a geometric grid of lambdas (us per
  // byte): each minimum of time + lambda * bytes, repaired to fit, then
  // improved; the best plan that fits wins.
  std::optional<std::vector<unsigned>> best;
  double bestTime = kInf;
  std::set<std::vector<unsigned>> tried;
  std::vector<unsigned> warm = start;
  for (int k = -1; k < 40; ++k) {
    double lambda = k < 0 ? 0 : 1e-9 * std::pow(2.0, k);
    for (std::vector<unsigned> pick : {start, warm}) {
      descend(pick, lambda);
      warm = pick;
      repair(pick);
      if (!tried.insert(pick).second)
        continue;
      if (evaluate(s, pick).second > limit)
        continue;
      improve(pick);
      double t = evaluate(s, pick).first;
      if (t < bestTime) {
        bestTime = t;
        best = pick;
      }
    }
  }
  return best;
}
