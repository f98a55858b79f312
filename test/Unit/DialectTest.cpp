//===- DialectTest.cpp - Unit tests of the shardx attributes --------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::shardx;

namespace {

class ShardXDialectTest : public ::testing::Test {
protected:
  ShardXDialectTest() {
    context.loadDialect<ShardXDialect>();
    context.getLoadedDialect<ShardXDialect>()->recordMeshShape("mesh", {2, 4});
  }

  LayoutAttr parse(StringRef text) {
    return dyn_cast_or_null<LayoutAttr>(parseAttribute(text, &context));
  }

  MLIRContext context;
};

} // namespace

TEST_F(ShardXDialectTest, SpellingsOfOneDistributionAreOneAttribute) {
  LayoutAttr ss = parse("#shardx.layout<@mesh, [SS(0, 4), S(0)]>");
  LayoutAttr order =
      parse("#shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>");
  ASSERT_TRUE(ss && order);
  EXPECT_EQ(ss, order); // uniqued: the same storage
  EXPECT_EQ(ss.getAsOpaquePointer(), order.getAsOpaquePointer());

  LayoutAttr strided = parse("#shardx.layout<@mesh, [SS(0, 6), R]>");
  LayoutAttr strides = parse("#shardx.layout<@mesh, [S(0), R], strides = "
                             "{0 = [6]}>");
  ASSERT_TRUE(strided && strides);
  EXPECT_EQ(strided, strides);
  EXPECT_NE(strided, parse("#shardx.layout<@mesh, [S(0), R]>"));
}

TEST_F(ShardXDialectTest, BuildsFromThePlainLayout) {
  std::string error;
  std::optional<::shardx::Layout> layout = ::shardx::Layout::fromPlacements(
      {::shardx::Placement::partial(::shardx::ReduceOp::Avg),
       ::shardx::Placement::shard(1)},
      {2, 4}, error);
  ASSERT_TRUE(layout) << error;
  LayoutAttr built =
      LayoutAttr::get(FlatSymbolRefAttr::get(&context, "mesh"), *layout);
  EXPECT_EQ(built, parse("#shardx.layout<@mesh, [P(avg), S(1)]>"));
  EXPECT_EQ(built.getLayout(), *layout);
  EXPECT_EQ(built.getMeshRank(), 2);
  EXPECT_EQ(built.verifyFor({2, 4}, {}), "");
  EXPECT_NE(built.verifyFor({2}, {}), "");
}

TEST_F(ShardXDialectTest, VerifierRejectsPartialShardAxes) {
  // Only reachable from C++: the same axis both Partial and sharding.
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto dim = DimShardingAttr::get(&context, 0, {0}, {1}, {});
  LayoutAttr bad = LayoutAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&context)); }, &context,
      FlatSymbolRefAttr::get(&context, "mesh"), {dim}, {0, -1});
  EXPECT_FALSE(bad);
  EXPECT_NE(message.find("mesh axis 0 is both Partial and sharding dim 0"),
            std::string::npos)
      << message;
  LayoutAttr unknownPartial = LayoutAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&context)); }, &context,
      FlatSymbolRefAttr::get(&context, "mesh"), {}, {7, -1});
  EXPECT_FALSE(unknownPartial);
  EXPECT_NE(message.find("unknown Partial kind 7"), std::string::npos)
      << message;
}

TEST_F(ShardXDialectTest, ReductionKindsMatchTheLayoutLibrary) {
  for (auto op : {::shardx::ReduceOp::Sum, ::shardx::ReduceOp::Avg,
                  ::shardx::ReduceOp::Max, ::shardx::ReduceOp::Min,
                  ::shardx::ReduceOp::Prod}) {
    EXPECT_EQ(stringifyReductionKind(toReductionKind(op)),
              ::shardx::stringifyReduceOp(op));
    EXPECT_EQ(toReduceOp(toReductionKind(op)), op);
  }
}

TEST_F(ShardXDialectTest, StorageHoldsTheLayoutAndItsAnswers) {
  LayoutAttr a = parse("#shardx.layout<@mesh, [S(0), S(1)]>");
  ASSERT_TRUE(a);
  // Built once: every call returns the same object.
  EXPECT_EQ(&a.getLayout(), &a.getLayout());
  EXPECT_EQ(a.getLayout().str(), "[S(0), S(1)]");

  // Local types, cached per (global type, mesh shape), agree with the
  // uncached computation and do not mix meshes.
  auto global = RankedTensorType::get({7, 8}, Float32Type::get(&context));
  for (const std::vector<int64_t> &mesh :
       {std::vector<int64_t>{2, 4}, std::vector<int64_t>{2, 2}}) {
    RankedTensorType expected = getLocalType(global, a.getLayout(), mesh);
    EXPECT_EQ(a.getLocalType(global, mesh), expected);
    EXPECT_EQ(a.getLocalType(global, mesh), expected);
  }
  EXPECT_EQ(a.getLocalType(global, {2, 4}).getDimSize(1), 2);
  EXPECT_EQ(a.getLocalType(global, {2, 2}).getDimSize(1), 4);
  EXPECT_TRUE(a.getLocalType(global, {2, 4}).isDynamicDim(0)); // 4 and 3

  // verifyFor, cached per (type, mesh shape): a rank-1 tensor is wrong for
  // S(1), the rank-2 one right, whatever order they are asked in.
  auto vector = RankedTensorType::get({8}, Float32Type::get(&context));
  EXPECT_NE(a.verifyFor({2, 4}, vector), "");
  EXPECT_EQ(a.verifyFor({2, 4}, global), "");
  EXPECT_NE(a.verifyFor({2, 4}, vector), "");
  EXPECT_NE(a.verifyFor({2}, global), "");
  EXPECT_EQ(a.verifyFor({2, 4}, global), "");
}
