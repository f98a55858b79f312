//===- LayoutTest.cpp - Unit tests of the layout algebra ------------------===//
//
// Part of ShardX.
//
// Every rank's local shard is checked against an independent brute force:
// DTensor's own algorithm (torch.chunk per placement, in mesh order, with
// _StridedShard's "every n-th of sf*n chunks"), run on explicit index lists.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/Layout.h"
#include "shardx/Layout/SplitAlgebra.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

using namespace shardx;

namespace {

using Indices = std::vector<int64_t>;

/// torch.chunk of a list into `parts` pieces; missing trailing pieces are
/// empty (DTensor pads them).
std::vector<Indices> torchChunk(const Indices &v, int64_t parts) {
  std::vector<Indices> out(parts);
  int64_t size = v.size();
  int64_t chunk = (size + parts - 1) / parts;
  for (int64_t i = 0; i < parts; ++i)
    for (int64_t k = i * chunk; k < std::min(size, (i + 1) * chunk); ++k)
      out[i].push_back(v[k]);
  return out;
}

/// DTensor's local shard: placements applied in mesh order.
std::vector<Indices> dtensorShard(const std::vector<Placement> &placements,
                                  const std::vector<int64_t> &mesh,
                                  const std::vector<int64_t> &shape,
                                  const std::vector<int64_t> &coords) {
  std::vector<Indices> idx(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    idx[d].resize(shape[d]);
    std::iota(idx[d].begin(), idx[d].end(), 0);
  }
  for (size_t a = 0; a < placements.size(); ++a) {
    const Placement &p = placements[a];
    int64_t n = mesh[a], j = coords[a];
    if (p.kind == Placement::Kind::Shard) {
      idx[p.dim] = torchChunk(idx[p.dim], n)[j];
    } else if (p.kind == Placement::Kind::StridedShard) {
      std::vector<Indices> pieces = torchChunk(idx[p.dim], n * p.splitFactor);
      Indices mine;
      for (int64_t k = 0; k < p.splitFactor; ++k)
        for (int64_t e : pieces[j + k * n])
          mine.push_back(e);
      idx[p.dim] = mine;
    }
  }
  return idx;
}

/// Nested torch.chunk of each dim over an explicit axis order.
std::vector<Indices>
nestedShard(const std::map<int64_t, std::vector<int64_t>> &order,
            const std::vector<int64_t> &mesh, const std::vector<int64_t> &shape,
            const std::vector<int64_t> &coords) {
  std::vector<Indices> idx(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    idx[d].resize(shape[d]);
    std::iota(idx[d].begin(), idx[d].end(), 0);
    auto it = order.find(d);
    if (it == order.end())
      continue;
    for (int64_t axis : it->second)
      idx[d] = torchChunk(idx[d], mesh[axis])[coords[axis]];
  }
  return idx;
}

std::vector<Indices> flatten(const LocalShard &shard) {
  std::vector<Indices> out;
  for (const auto &runs : shard.runs) {
    Indices v;
    for (const Interval &r : runs)
      for (int64_t k = 0; k < r.size; ++k)
        v.push_back(r.offset + k);
    out.push_back(v);
  }
  return out;
}

/// Checks that every element is held by exactly `replicas` ranks.
void expectCovered(const Layout &l, const std::vector<int64_t> &mesh,
                   const std::vector<int64_t> &shape) {
  int64_t replicas = 1;
  for (int64_t a = 0; a < static_cast<int64_t>(mesh.size()); ++a)
    if (l.getShardedDim(a) < 0)
      replicas *= mesh[a];
  int64_t total = 1;
  for (int64_t s : shape)
    total *= s;
  std::vector<int64_t> count(total, 0);
  for (const auto &coords : allMeshCoords(mesh)) {
    std::vector<Indices> idx = flatten(l.getLocalShard(mesh, shape, coords));
    std::function<void(size_t, int64_t)> visit = [&](size_t d, int64_t lin) {
      if (d == shape.size()) {
        ++count[lin];
        return;
      }
      for (int64_t i : idx[d])
        visit(d + 1, lin * shape[d] + i);
    };
    visit(0, 0);
  }
  for (int64_t c : count)
    ASSERT_EQ(c, replicas) << l.str();
}

std::string str(const std::vector<Placement> &ps) {
  std::string s = "[";
  for (size_t i = 0; i < ps.size(); ++i)
    s += (i ? ", " : "") + ps[i].str();
  return s + "]";
}

Layout mustParse(const std::vector<Placement> &ps,
                 const std::vector<int64_t> &mesh) {
  std::string error;
  std::optional<Layout> l = Layout::fromPlacements(ps, mesh, error);
  EXPECT_TRUE(l.has_value()) << str(ps) << ": " << error;
  return l ? *l : Layout(mesh.size());
}

const std::vector<std::vector<int64_t>> kMeshes = {
    {4}, {2, 2}, {2, 3}, {3, 2}, {2, 2, 2}, {2, 1, 3, 2}, {3}, {2, 2, 2, 2}};

} // namespace

TEST(Placement, Strings) {
  EXPECT_EQ(Placement::shard(1).str(), "S(1)");
  EXPECT_EQ(Placement::stridedShard(0, 4).str(), "SS(0, 4)");
  EXPECT_EQ(Placement::replicate().str(), "R");
  EXPECT_EQ(Placement::partial(ReduceOp::Max).str(), "P(max)");
  for (const char *name : {"sum", "avg", "max", "min", "prod"})
    EXPECT_EQ(stringifyReduceOp(*parseReduceOp(name)), std::string(name));
  EXPECT_FALSE(parseReduceOp("mean").has_value());
}

TEST(Layout, StridedShardIsAReorderOnFsdpOverTp) {
  // [SS(0, tp), S(0)] on (dp, tp): dim 0 split by tp first, then dp.
  std::vector<int64_t> mesh = {2, 2};
  Layout ss =
      mustParse({Placement::stridedShard(0, 2), Placement::shard(0)}, mesh);
  LayoutSpelling spelling;
  spelling.placements = {Placement::shard(0), Placement::shard(0)};
  spelling.order[0] = {1, 0};
  std::string error;
  std::optional<Layout> ordered = Layout::fromSpelling(spelling, {}, error);
  ASSERT_TRUE(ordered) << error;
  EXPECT_EQ(ss, *ordered);
  EXPECT_EQ(ss.str(), "[S(0), S(0)], order = {0 = [1, 0]}");
  auto back = ss.toPlacements(mesh, error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(str(*back), "[SS(0, 2), S(0)]");
}

TEST(Layout, FlattenedShardIsStrided) {
  // Flattening a 6x4 tensor sharded on dim 1 over 2 ranks gives SS(0, 6).
  std::vector<int64_t> mesh = {2};
  Layout l = mustParse({Placement::stridedShard(0, 6)}, mesh);
  EXPECT_EQ(l.str(), "[S(0)], strides = {0 = [6]}");
  for (int64_t j = 0; j < 2; ++j) {
    LocalShard s = l.getLocalShard(mesh, {24}, {j});
    ASSERT_EQ(s.runs[0].size(), 6u);
    for (int64_t r = 0; r < 6; ++r)
      EXPECT_EQ(s.runs[0][r], (Interval{4 * r + 2 * j, 2}));
    EXPECT_EQ(s.shape, std::vector<int64_t>{12});
  }
}

TEST(Layout, NestedUnevenFollowsDTensor) {
  // 5 rows on [S(0), S(0)] over 2x2 give 2, 1, 1, 1 rows.
  std::vector<int64_t> mesh = {2, 2};
  Layout l = mustParse({Placement::shard(0), Placement::shard(0)}, mesh);
  std::vector<int64_t> rows;
  for (const auto &c : allMeshCoords(mesh))
    rows.push_back(l.getLocalShard(mesh, {5, 3}, c).shape[0]);
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_FALSE(l.isEvenFor(mesh, {5, 3}));
  EXPECT_TRUE(l.isEvenFor(mesh, {8, 3}));
}

TEST(Layout, ExplicitSizes) {
  LayoutSpelling spelling;
  spelling.placements = {Placement::shard(0), Placement::replicate()};
  spelling.sizes[0] = {3, 0};
  std::string error;
  std::optional<Layout> l = Layout::fromSpelling(spelling, {2, 3}, error);
  ASSERT_TRUE(l) << error;
  EXPECT_EQ(l->str(), "[S(0), R], sizes = {0 = [3, 0]}");
  EXPECT_EQ(l->getLocalShard({2, 3}, {3, 4}, {0, 1}).runs[0][0],
            (Interval{0, 3}));
  EXPECT_EQ(l->getLocalShard({2, 3}, {3, 4}, {1, 2}).shape,
            (std::vector<int64_t>{0, 4}));
  EXPECT_NE(l->verifyForShape({2, 3}, {4, 4}), "");
  EXPECT_FALSE(l->toPlacements({2, 3}, error).has_value());
}

TEST(Layout, Errors) {
  std::string error;
  auto fails = [&](LayoutSpelling s, std::vector<int64_t> mesh,
                   const std::string &needle) {
    error.clear();
    EXPECT_FALSE(Layout::fromSpelling(s, mesh, error).has_value()) << needle;
    EXPECT_NE(error.find(needle), std::string::npos) << error;
  };
  LayoutSpelling s;
  s.placements = {Placement::shard(-1)};
  fails(s, {}, "negative dim");
  s.placements = {Placement::stridedShard(0, 0)};
  fails(s, {4}, "split factor below 1");
  s.placements = {Placement::stridedShard(0, 3), Placement::shard(0)};
  fails(s, {2, 2}, "cannot split a block of 3");
  s.placements = {Placement::shard(0), Placement::shard(0)};
  s.order[0] = {1, 1};
  fails(s, {}, "twice");
  s.order[0] = {0};
  fails(s, {}, "shard it over [0, 1]");
  s.order.clear();
  s.order[1] = {0};
  fails(s, {}, "which no mesh axis shards");
  s.order.clear();
  s.strides[0] = {2, 3};
  fails(s, {}, "not a multiple");
  s.strides.clear();
  s.placements = {Placement::shard(0)};
  fails(s, {2, 2}, "1 placements but the mesh has 2 axes");
  s.placements = {Placement::stridedShard(0, 2)};
  fails(s, {}, "needs the mesh shape");
  s.placements = {Placement::shard(0), Placement::replicate()};
  s.sizes[0] = {1, 2, 3};
  fails(s, {2, 2}, "has 3 entries but the dim has 2 shards");
  // Shape checks.
  Layout l = mustParse({Placement::shard(2)}, {4});
  EXPECT_NE(l.verifyForShape({4}, {8, 8}).find("out of range"),
            std::string::npos);
  Layout strided = mustParse({Placement::stridedShard(0, 6)}, {2});
  EXPECT_NE(strided.verifyForShape({2}, {25}).find("not a multiple"),
            std::string::npos);
}

/// Enumerates every assignment of placements from `choices` to the mesh
/// axes and calls `fn` with it.
static void forAllPlacements(
    const std::vector<Placement> &choices, size_t rank,
    const std::function<void(const std::vector<Placement> &)> &fn) {
  std::vector<Placement> ps(rank);
  std::function<void(size_t)> rec = [&](size_t a) {
    if (a == rank)
      return fn(ps);
    for (const Placement &p : choices) {
      ps[a] = p;
      rec(a + 1);
    }
  };
  rec(0);
}

TEST(Layout, MatchesDTensorOnEveryRank) {
  // Every placement assignment on 1-D to 4-D meshes, for 2-D and 3-D shapes
  // with dims that divide and dims that do not.
  const std::vector<std::vector<int64_t>> shapes = {
      {8, 12}, {7, 5}, {1, 24}, {24, 7, 2}, {5, 4, 3}, {12, 12}};
  std::vector<Placement> choices = {
      Placement::replicate(),        Placement::shard(0),
      Placement::shard(1),           Placement::partial(ReduceOp::Sum),
      Placement::stridedShard(0, 2), Placement::stridedShard(1, 3),
      Placement::stridedShard(0, 4), Placement::stridedShard(0, 6)};
  int64_t checked = 0, rejected = 0;
  for (const auto &mesh : kMeshes) {
    forAllPlacements(choices, mesh.size(), [&](const auto &ps) {
      std::string error;
      std::optional<Layout> l = Layout::fromPlacements(ps, mesh, error);
      if (!l) {
        ++rejected;
        return;
      }
      bool strided = std::any_of(ps.begin(), ps.end(), [](auto &p) {
        return p.kind == Placement::Kind::StridedShard;
      });
      // Canonical -> placements -> canonical is the identity.
      auto back = l->toPlacements(mesh, error);
      ASSERT_TRUE(back) << str(ps) << ": " << error;
      std::optional<Layout> again = Layout::fromPlacements(*back, mesh, error);
      ASSERT_TRUE(again) << str(*back) << ": " << error;
      ASSERT_EQ(*l, *again) << str(ps) << " vs " << str(*back);
      // Printing then re-reading the canonical spelling is the identity.
      std::optional<Layout> reread =
          Layout::fromSpelling(l->getCanonicalSpelling(), {}, error);
      ASSERT_TRUE(reread) << l->str() << ": " << error;
      ASSERT_EQ(*l, *reread) << l->str();
      for (const auto &shape : shapes) {
        if (!l->verifyForShape(mesh, shape).empty())
          continue;
        // With SS, uneven sizes follow the nested meaning (see DESIGN), not
        // DTensor's shuffle: compare with DTensor only where it divides.
        if (strided && !l->isEvenFor(mesh, shape))
          continue;
        for (const auto &coords : allMeshCoords(mesh)) {
          LocalShard shard = l->getLocalShard(mesh, shape, coords);
          ASSERT_EQ(flatten(shard), dtensorShard(ps, mesh, shape, coords))
              << str(ps) << " shape " << shape[0] << "x" << shape[1];
          for (size_t d = 0; d < shape.size(); ++d)
            ASSERT_EQ(shard.shape[d],
                      static_cast<int64_t>(flatten(shard)[d].size()));
        }
        expectCovered(*l, mesh, shape);
        ++checked;
      }
    });
  }
  // The sweep must exercise a meaningful number of cases.
  EXPECT_GT(checked, 5000);
  EXPECT_GT(rejected, 0);
}

TEST(Layout, ExplicitOrderMatchesNestedChunks) {
  // Every order of the axes sharding one dim, uneven sizes included.
  const std::vector<std::vector<int64_t>> shapes = {{7, 3}, {24, 5}, {5, 1}};
  int64_t checked = 0;
  for (const auto &mesh : kMeshes) {
    std::vector<int64_t> axes(mesh.size());
    std::iota(axes.begin(), axes.end(), 0);
    do {
      LayoutSpelling s;
      s.placements.assign(mesh.size(), Placement::shard(0));
      s.order[0] = axes;
      std::string error;
      std::optional<Layout> l = Layout::fromSpelling(s, {}, error);
      ASSERT_TRUE(l) << error;
      for (const auto &shape : shapes) {
        ASSERT_EQ(l->verifyForShape(mesh, shape), "");
        for (const auto &coords : allMeshCoords(mesh))
          ASSERT_EQ(flatten(l->getLocalShard(mesh, shape, coords)),
                    nestedShard(s.order, mesh, shape, coords));
        expectCovered(*l, mesh, shape);
        ++checked;
      }
      // Even sizes: the DTensor spelling of the order gives the same shards.
      auto ps = l->toPlacements(mesh, error);
      ASSERT_TRUE(ps) << error;
      for (const auto &coords : allMeshCoords(mesh))
        ASSERT_EQ(flatten(l->getLocalShard(mesh, {48, 2}, coords)),
                  dtensorShard(*ps, mesh, {48, 2}, coords))
            << l->str() << " as " << str(*ps);
    } while (std::next_permutation(axes.begin(), axes.end()));
  }
  EXPECT_GT(checked, 50);
}

TEST(Layout, StridesMatchDigitDecoding) {
  // A dim with strides [s1, s2] over two axes is the mixed radix
  // [s1, A1, s2/s1, A2, rest]: decode every index digit by digit.
  for (const auto &mesh :
       {std::vector<int64_t>{2, 3}, std::vector<int64_t>{3, 2}}) {
    for (auto strides :
         {std::vector<int64_t>{1, 2}, {2, 2}, {2, 4}, {3, 6}, {1, 1}, {4, 4}}) {
      for (std::vector<int64_t> order : {std::vector<int64_t>{0, 1}, {1, 0}}) {
        LayoutSpelling s;
        s.placements = {Placement::shard(0), Placement::shard(0)};
        s.order[0] = order;
        s.strides[0] = strides;
        std::string error;
        std::optional<Layout> l = Layout::fromSpelling(s, mesh, error);
        ASSERT_TRUE(l) << error;
        int64_t n1 = mesh[order[0]], n2 = mesh[order[1]];
        int64_t size = strides[1] * n1 * n2 * 2;
        ASSERT_EQ(l->verifyForShape(mesh, {size}), "");
        for (const auto &coords : allMeshCoords(mesh)) {
          Indices expected;
          for (int64_t g = 0; g < size; ++g) {
            int64_t rest = size / (strides[1] * n1 * n2);
            int64_t r = g;
            r /= rest;
            int64_t a2 = r % n2;
            r /= n2;
            r /= strides[1] / strides[0];
            int64_t a1 = r % n1;
            if (a1 == coords[order[0]] && a2 == coords[order[1]])
              expected.push_back(g);
          }
          ASSERT_EQ(flatten(l->getLocalShard(mesh, {size}, coords))[0],
                    expected);
        }
      }
    }
  }
}

TEST(SplitAlgebra, Examples) {
  std::vector<int64_t> mesh = {2, 2};
  Layout ss = mustParse({Placement::shard(0), Placement::shard(0)}, mesh);
  std::optional<Layout> g = gatherSplits(ss, 0, 0, 1, mesh);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->str(), "[R, S(0)], strides = {0 = [2]}");
  g = gatherSplits(ss, 0, 0, 2, mesh);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->str(), "[R, R]");
  Layout rr = mustParse({Placement::replicate(), Placement::replicate()}, mesh);
  std::optional<Layout> c = carveSplits(rr, 0, {0}, 1, mesh);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->str(), "[S(0), R]");
  // Two axes as one flattened group, major first.
  c = carveSplits(rr, 1, {1, 0}, 1, mesh);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->str(), "[S(1), S(1)], order = {1 = [1, 0]}");
  // Partial axes are kept.
  Layout pr = mustParse(
      {Placement::partial(ReduceOp::Max), Placement::replicate()}, mesh);
  c = carveSplits(pr, 0, {1}, 1, mesh);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->str(), "[P(max), S(0)]");
}

TEST(SplitAlgebra, Refusals) {
  std::vector<int64_t> mesh = {2, 2};
  Layout ss = mustParse({Placement::shard(0), Placement::shard(0)}, mesh);
  EXPECT_FALSE(gatherSplits(ss, 1, 0, 1, mesh)); // dim 1 is not sharded
  EXPECT_FALSE(gatherSplits(ss, 0, 0, 0, mesh)); // nothing to gather
  EXPECT_FALSE(gatherSplits(ss, 0, 1, 2, mesh)); // past the last split
  EXPECT_FALSE(carveSplits(ss, 1, {}, 1, mesh)); // no axes
  // [R, S(0)], strides = {0 = [2]}: the local piece of dim 0 starts with a
  // free block of 2, so stride 3 is no block boundary of it; 2 is.
  std::optional<Layout> strided = gatherSplits(ss, 0, 0, 1, mesh);
  ASSERT_TRUE(strided);
  EXPECT_FALSE(carveSplits(*strided, 0, {0}, 3, mesh));
  std::optional<Layout> carved = carveSplits(*strided, 0, {0}, 2, mesh);
  ASSERT_TRUE(carved);
  EXPECT_EQ(carved->str(), "[S(0), S(0)], order = {0 = [1, 0]}, "
                           "strides = {0 = [2, 2]}");
  // Explicit sizes: only the minor-most splits go, and their shards merge.
  LayoutSpelling spelling;
  spelling.placements = {Placement::shard(0), Placement::shard(0)};
  spelling.sizes[0] = {3, 1, 2, 2};
  std::string error;
  std::optional<Layout> sized = Layout::fromSpelling(spelling, mesh, error);
  ASSERT_TRUE(sized) << error;
  EXPECT_FALSE(gatherSplits(*sized, 0, 0, 1, mesh));
  std::optional<Layout> merged = gatherSplits(*sized, 0, 1, 1, mesh);
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->str(), "[S(0), R], sizes = {0 = [4, 4]}");
  EXPECT_FALSE(carveSplits(*merged, 0, {1}, 1, mesh));
}

TEST(SplitAlgebra, GatherUnionsTheGroupsShards) {
  // After gathering a run of splits, every rank holds the union of the
  // shards of the ranks that differ from it only on the gathered axes; a
  // carve of the same axes at the same stride undoes the gather.
  for (const auto &mesh : kMeshes) {
    int64_t rank = static_cast<int64_t>(mesh.size());
    // Dim 0 split over every axis, in mesh order; 3 * all devices rows.
    std::vector<Placement> ps(rank, Placement::shard(0));
    Layout l = mustParse(ps, mesh);
    int64_t devices = 1;
    for (int64_t n : mesh)
      devices *= n;
    std::vector<int64_t> shape = {3 * devices, 2};
    for (int64_t first = 0; first < rank; ++first)
      for (int64_t count = 1; first + count <= rank; ++count) {
        std::optional<Layout> g = gatherSplits(l, 0, first, count, mesh);
        ASSERT_TRUE(g) << l.str();
        ASSERT_EQ(g->verifyForShape(mesh, shape), "") << g->str();
        for (const auto &coords : allMeshCoords(mesh)) {
          Indices expected;
          for (const auto &other : allMeshCoords(mesh)) {
            bool peer = true;
            for (int64_t a = 0; a < rank; ++a)
              if ((a < first || a >= first + count) && other[a] != coords[a])
                peer = false;
            if (!peer)
              continue;
            Indices rows = flatten(l.getLocalShard(mesh, shape, other))[0];
            expected.insert(expected.end(), rows.begin(), rows.end());
          }
          std::sort(expected.begin(), expected.end());
          EXPECT_EQ(flatten(g->getLocalShard(mesh, shape, coords))[0], expected)
              << g->str();
        }
        std::vector<int64_t> axes;
        int64_t n = 1;
        for (int64_t a = first; a < first + count; ++a) {
          axes.push_back(a);
          n *= mesh[a];
        }
        // The gathered axes left one free block of their size, the first
        // free block of the local piece: carving at stride 1 fills it again
        // (axes of size 1 leave no block; they carve minor-most).
        if (n == 1)
          continue;
        std::optional<Layout> back = carveSplits(*g, 0, axes, 1, mesh);
        ASSERT_TRUE(back) << g->str();
        EXPECT_EQ(*back, l) << g->str() << " -> " << back->str();
      }
  }
}
