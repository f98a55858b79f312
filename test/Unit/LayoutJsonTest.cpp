//===- LayoutJsonTest.cpp - Unit tests of the JSON form of layouts --------===//
//
// Part of ShardX.
//
// Every layout a small mesh can spell (all placements per axis, StridedShard,
// explicit split orders, uneven explicit sizes, Partials of each reduction)
// goes to JSON and back, as data and as text, and must come back equal; bad
// JSON must come back as an error, never as a layout.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/LayoutJson.h"

#include <gtest/gtest.h>

using namespace shardx;

namespace {

const ReduceOp kReductions[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                                ReduceOp::Min, ReduceOp::Prod};

/// Every placement of one mesh axis over a tensor of rank `rank`.
std::vector<Placement> axisPlacements(int64_t rank) {
  std::vector<Placement> out = {Placement::replicate()};
  for (ReduceOp op : kReductions)
    out.push_back(Placement::partial(op));
  for (int64_t d = 0; d < rank; ++d) {
    out.push_back(Placement::shard(d));
    out.push_back(Placement::stridedShard(d, 2));
  }
  return out;
}

/// All canonical layouts of placements over `mesh` for a rank-`rank`
/// tensor, plus, per layout, variants with the split order of each
/// multiply-split dim reversed and with explicit (uneven) sizes.
std::vector<Layout> allLayouts(const std::vector<int64_t> &mesh, int64_t rank) {
  std::vector<Placement> options = axisPlacements(rank);
  std::vector<Layout> out;
  std::vector<size_t> pick(mesh.size(), 0);
  while (true) {
    std::vector<Placement> placements;
    for (size_t i : pick)
      placements.push_back(options[i]);
    std::string error;
    if (std::optional<Layout> l =
            Layout::fromPlacements(placements, mesh, error)) {
      out.push_back(*l);
      for (const DimSharding &ds : l->getDims()) {
        // Uneven explicit sizes: shard k of n gets k + 1 elements.
        if (ds.splits.back().stride == 1) {
          int64_t n = 1;
          for (const Split &s : ds.splits)
            n *= mesh[s.axis];
          std::vector<int64_t> sizes(n);
          for (int64_t k = 0; k < n; ++k)
            sizes[k] = k + 1;
          Layout uneven = *l;
          uneven.setSizes(ds.dim, sizes);
          out.push_back(uneven);
        }
        // The same axes in the other order.
        if (ds.splits.size() > 1) {
          LayoutSpelling spelling = l->getCanonicalSpelling();
          std::vector<int64_t> order;
          for (auto it = ds.splits.rbegin(); it != ds.splits.rend(); ++it)
            order.push_back(it->axis);
          spelling.order[ds.dim] = order;
          spelling.strides.erase(ds.dim);
          if (std::optional<Layout> r =
                  Layout::fromSpelling(spelling, mesh, error))
            out.push_back(*r);
        }
      }
    }
    size_t i = 0;
    while (i < pick.size() && ++pick[i] == options.size())
      pick[i++] = 0;
    if (i == pick.size())
      break;
  }
  return out;
}

TEST(LayoutJson, RoundTripsEveryLayoutOfSmallMeshes) {
  size_t checked = 0, strided = 0, uneven = 0, partial = 0;
  for (const std::vector<int64_t> &mesh :
       {std::vector<int64_t>{4}, std::vector<int64_t>{2, 3},
        std::vector<int64_t>{2, 2, 2}}) {
    for (int64_t rank = 0; rank <= 3; ++rank) {
      for (const Layout &layout : allLayouts(mesh, rank)) {
        ASSERT_EQ(layout.verify(), "") << layout.str();
        std::string error;
        std::optional<Layout> back =
            layoutFromJson(layoutToJson(layout), error);
        ASSERT_TRUE(back) << layout.str() << ": " << error;
        EXPECT_EQ(*back, layout)
            << layout.str() << " came back as " << back->str();
        std::string text = layoutToJsonText(layout);
        std::optional<Layout> fromText = layoutFromJsonText(text, error);
        ASSERT_TRUE(fromText) << text << ": " << error;
        EXPECT_EQ(*fromText, layout) << text;
        EXPECT_EQ(layoutToJsonText(*fromText), text);
        ++checked;
        for (const DimSharding &ds : layout.getDims()) {
          strided += ds.splits.back().stride != 1;
          uneven += !ds.sizes.empty();
        }
        partial += layout.hasPartial();
      }
    }
  }
  // The sweep covers what it claims to.
  EXPECT_GT(checked, 1000u);
  EXPECT_GT(strided, 50u);
  EXPECT_GT(uneven, 100u);
  EXPECT_GT(partial, 500u);
}

TEST(LayoutJson, FormatIsTheProgramDescriptions) {
  // [S(0), P(sum)] with dim 1 split over axis 2 into uneven sizes.
  Layout layout(3);
  layout.addSplit(0, {0, 1});
  layout.addSplit(1, {2, 1});
  layout.setSizes(1, {3, 1});
  layout.setPartial(1, ReduceOp::Sum);
  EXPECT_EQ(layoutToJsonText(layout),
            R"({"dims":[{"dim":0,"sizes":[],"splits":[[0,1]]},)"
            R"({"dim":1,"sizes":[3,1],"splits":[[2,1]]}],)"
            R"("partials":[null,"sum",null]})");
  // Keys other than dims and partials (the compiler's "text") are ignored.
  std::string error;
  std::optional<Layout> l = layoutFromJsonText(
      R"({"text":"#shardx.layout<@m, [S(1)]>","dims":[{"dim":1,)"
      R"("splits":[[0,2]]}],"partials":[null]})",
      error);
  ASSERT_TRUE(l) << error;
  ASSERT_NE(l->getDim(1), nullptr);
  EXPECT_EQ(l->getDim(1)->splits[0].stride, 2);
  EXPECT_TRUE(l->getDim(1)->sizes.empty());
}

TEST(LayoutJson, BadInputIsAnError) {
  const char *bad[][2] = {
      {"[1, 2", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {R"({"dims":[]})", "'partials'"},
      {R"({"partials":[null]})", "'dims'"},
      {R"({"dims":[],"partials":["mean"]})", "sum, avg, max, min, prod"},
      {R"({"dims":[],"partials":[3]})", "sum, avg, max, min, prod"},
      {R"({"dims":[{"splits":[[0,1]]}],"partials":[null]})", "'dim'"},
      {R"({"dims":[{"dim":0}],"partials":[null]})", "'splits'"},
      {R"({"dims":[{"dim":0,"splits":[]}],"partials":[null]})", "'splits'"},
      {R"({"dims":[{"dim":0,"splits":[[0]]}],"partials":[null]})",
       "[axis, stride]"},
      {R"({"dims":[{"dim":0,"splits":[[0,"1"]]}],"partials":[null]})",
       "[axis, stride]"},
      {R"({"dims":[{"dim":0,"splits":[[0,1]],"sizes":[1.5]}],)"
       R"("partials":[null]})",
       "'sizes'"},
      {R"({"dims":[{"dim":1,"splits":[[0,1]]},{"dim":0,"splits":[[1,1]]}],)"
       R"("partials":[null,null]})",
       "sorted"},
      {R"({"dims":[{"dim":0,"splits":[[0,1]]},{"dim":0,"splits":[[1,1]]}],)"
       R"("partials":[null,null]})",
       "sorted"},
      {R"({"dims":[{"dim":0,"splits":[[1,1]]}],"partials":[null]})",
       "out of range"},
      {R"({"dims":[{"dim":0,"splits":[[0,1]]}],"partials":["sum"]})",
       "both Partial and sharding"},
      {R"({"dims":[{"dim":0,"splits":[[0,0]]}],"partials":[null]})",
       "stride below 1"},
      {R"({"dims":[{"dim":-1,"splits":[[0,1]]}],"partials":[null]})",
       "negative"},
  };
  for (const auto &[text, why] : bad) {
    std::string error;
    std::optional<Layout> l = layoutFromJsonText(text, error);
    EXPECT_FALSE(l) << text << " read as " << l->str();
    EXPECT_NE(error.find(why), std::string::npos)
        << text << ": error '" << error << "' does not mention '" << why << "'";
  }
}

} // namespace
