//===- LayoutFuzzer.cpp - Fuzz target of the layout attribute -------------===//
//
// Part of ShardX.
//
// An input is zero or more `shardx.mesh` lines, then a layout attribute,
// optionally a second one after `to`, optionally a tensor type after `:`:
//
//   shardx.mesh @mesh(shape = 2x2)
//   #shardx.layout<@mesh, [SS(0, 2), S(0)]> to #shardx.layout<@mesh, [R, R]>
//     : tensor<8x4xf32>
//
// Besides "no crash, no hang", it checks invariants of the layout algebra:
// the printed attribute parses back to itself, DTensor placements round-trip,
// the local shards of all ranks cover every element equally often, and a
// plan between the two layouts chains from the first to the second.
//
//===----------------------------------------------------------------------===//

#include "FuzzTarget.h"

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Planner/Planner.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::shardx;
using mlir::shardx::fuzz::reportBug;

namespace {

/// The most ranks and elements whose shards are checked one by one.
constexpr int64_t kMaxCheckedRanks = 64;
constexpr int64_t kMaxCheckedElements = 4096;

std::string str(Attribute a) {
  std::string s;
  llvm::raw_string_ostream(s) << a;
  return s;
}

/// Parses one attribute at the front of `text` and drops it.
Attribute parseFront(StringRef &text, MLIRContext *context) {
  size_t numRead = 0;
  Attribute attr = parseAttribute(text, context, Type(), &numRead);
  if (!attr)
    return {};
  text = text.drop_front(numRead).ltrim();
  return attr;
}

/// The printed form is canonical and parses back to the same attribute.
void checkRoundTrip(LayoutAttr layout, MLIRContext *context) {
  std::string printed = str(layout);
  Attribute again = parseAttribute(printed, context);
  if (again != layout)
    reportBug("a layout does not parse back to itself",
              printed + " parsed as " + (again ? str(again) : "<error>"));
  if (LayoutAttr::get(layout.getMesh(), layout.getLayout()) != layout)
    reportBug("rebuilding a layout from its plain form changes it", printed);
}

/// Placements of a valid layout convert back to a layout that gives every
/// rank the same shard. (Not always the same layout: on an axis of size 1
/// the order of splits is lost, and the canonical form does not know the
/// mesh.)
void checkPlacements(const ::shardx::Layout &layout,
                     const std::vector<int64_t> &meshShape,
                     const std::vector<int64_t> &shape) {
  std::string error;
  std::optional<std::vector<::shardx::Placement>> placements =
      layout.toPlacements(meshShape, error);
  if (!placements)
    return; // an order DTensor cannot express: reported, not a bug
  std::optional<::shardx::Layout> back =
      ::shardx::Layout::fromPlacements(*placements, meshShape, error);
  std::string spelled;
  for (const ::shardx::Placement &p : *placements)
    spelled += p.str() + " ";
  if (!back)
    reportBug("the placements of a valid layout are rejected",
              layout.str() + " -> " + spelled + ": " + error);
  if (*back == layout)
    return;
  if (back->getPartials() != layout.getPartials())
    reportBug("placements do not keep the Partial axes",
              layout.str() + " -> " + spelled + "-> " + back->str());
  for (const std::vector<int64_t> &c : ::shardx::allMeshCoords(meshShape))
    if (layout.getLocalShard(meshShape, shape, c).runs !=
        back->getLocalShard(meshShape, shape, c).runs)
      reportBug("placements do not round-trip",
                layout.str() + " -> " + spelled + "-> " + back->str());
}

/// Every element is held by the same number of ranks: the mesh size over
/// the number of shards.
void checkCoverage(const ::shardx::Layout &layout,
                   const std::vector<int64_t> &meshShape,
                   const std::vector<int64_t> &shape) {
  int64_t elements = 1;
  for (int64_t size : shape)
    elements *= size;
  std::vector<int64_t> count(elements, 0);
  std::vector<std::vector<int64_t>> coords =
      ::shardx::allMeshCoords(meshShape);
  for (const std::vector<int64_t> &c : coords) {
    ::shardx::LocalShard shard = layout.getLocalShard(meshShape, shape, c);
    // Every index the rank holds, per dim, in local order.
    std::vector<std::vector<int64_t>> indices(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      for (const ::shardx::Interval &run : shard.runs[d]) {
        if (run.offset < 0 || run.size < 0 || run.offset + run.size > shape[d])
          reportBug("a local run lies outside its dim",
                    layout.str() + " dim " + std::to_string(d));
        for (int64_t i = 0; i < run.size; ++i)
          indices[d].push_back(run.offset + i);
      }
      if (static_cast<int64_t>(indices[d].size()) != shard.shape[d])
        reportBug("a local shape is not the size of its runs", layout.str());
    }
    // Walk the cartesian product of the held indices.
    std::vector<size_t> at(shape.size(), 0);
    bool empty = llvm::any_of(indices, [](auto &v) { return v.empty(); });
    while (!empty) {
      int64_t linear = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        linear = linear * shape[d] + indices[d][at[d]];
      ++count[linear];
      size_t d = shape.size();
      while (d-- > 0 && ++at[d] == indices[d].size())
        at[d] = 0;
      if (d == static_cast<size_t>(-1))
        break;
    }
  }
  int64_t shards = 1;
  for (const ::shardx::DimSharding &ds : layout.getDims())
    for (const ::shardx::Split &s : ds.splits)
      shards *= meshShape[s.axis];
  int64_t expected = static_cast<int64_t>(coords.size()) / shards;
  for (int64_t i = 0; i < elements; ++i)
    if (count[i] != expected)
      reportBug("the local shards do not cover the tensor evenly",
                layout.str() + ": element " + std::to_string(i) + " held " +
                    std::to_string(count[i]) + " times, expected " +
                    std::to_string(expected));
}

/// A plan, when there is one, chains from `src` to `dst`.
void checkPlan(const ::shardx::Layout &src, const ::shardx::Layout &dst,
               const std::vector<int64_t> &meshShape,
               const std::vector<int64_t> &shape) {
  ::shardx::Planner planner(::shardx::MeshSpec{meshShape, {}});
  std::string error;
  const ::shardx::Plan *plan = planner.plan(src, dst, shape, 4, error);
  if (!plan) {
    if (error.rfind("Cannot reshard: ", 0) != 0)
      reportBug("a planner error does not say 'Cannot reshard'", error);
    return;
  }
  ::shardx::Layout at = src;
  for (const ::shardx::Step &step : plan->steps) {
    if (step.before != at)
      reportBug("a plan step does not start where the previous one ended",
                src.str() + " -> " + dst.str() + ": " + step.str());
    at = step.after;
  }
  if (at != dst)
    reportBug("a plan does not end at its target",
              src.str() + " -> " + dst.str() + " ends at " + at.str());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StringRef input(reinterpret_cast<const char *>(data), size);
  // The mesh lines: everything up to the end of the last line that starts
  // with `shardx.mesh`.
  size_t split = 0;
  for (size_t begin = 0; begin < input.size();) {
    size_t end = input.find('\n', begin);
    end = end == StringRef::npos ? input.size() : end + 1;
    if (input.slice(begin, end).ltrim().starts_with("shardx.mesh"))
      split = end;
    begin = end;
  }
  std::unique_ptr<MLIRContext> context =
      fuzz::makeContext(/*allDialects=*/false);
  // Verified after parsing, as in a module: a layout that uses SS sees the
  // mesh shape before the mesh verifier has run. MLIR's lexer stops at a
  // nul character: each piece is parsed from a nul-terminated copy.
  std::string meshText = input.take_front(split).str();
  OwningOpRef<ModuleOp> meshes = parseSourceString<ModuleOp>(
      meshText, ParserConfig(context.get(), /*verifyAfterParse=*/false));
  bool meshesValid = meshes && succeeded(verify(*meshes));

  std::string restText = input.drop_front(split).str();
  StringRef rest = StringRef(restText).ltrim();
  auto first = dyn_cast_or_null<LayoutAttr>(parseFront(rest, context.get()));
  if (!first)
    return 0;
  LayoutAttr second;
  if (rest.consume_front("to")) {
    second = dyn_cast_or_null<LayoutAttr>(
        parseFront(rest = rest.ltrim(), context.get()));
    if (!second)
      return 0;
  }
  Type type;
  if (rest.consume_front(":")) {
    size_t numRead = 0;
    type = parseType(rest.ltrim(), context.get(), &numRead);
    if (!type)
      return 0;
  }

  checkRoundTrip(first, context.get());
  if (second)
    checkRoundTrip(second, context.get());
  if (!meshesValid)
    return 0;
  auto mesh = dyn_cast_or_null<MeshOp>(
      SymbolTable::lookupSymbolIn(*meshes, first.getMesh().getAttr()));
  if (!mesh)
    return 0;
  std::vector<int64_t> meshShape(mesh.getShape().begin(),
                                 mesh.getShape().end());
  for (LayoutAttr layout : {first, second})
    if (layout && (layout.getMesh() != first.getMesh() ||
                   !layout.verifyFor(meshShape, type).empty()))
      return 0;
  auto tensorType = dyn_cast_or_null<RankedTensorType>(type);
  if (!tensorType || !tensorType.hasStaticShape())
    return 0;
  std::vector<int64_t> shape(tensorType.getShape().begin(),
                             tensorType.getShape().end());
  if (second)
    checkPlan(first.getLayout(), second.getLayout(), meshShape, shape);
  int64_t ranks = 1, elements = 1;
  for (int64_t n : meshShape)
    if (llvm::MulOverflow(ranks, n, ranks) || ranks > kMaxCheckedRanks)
      return 0;
  // Each dim bounded too: the checks list a dim's indices, and a zero-sized
  // dim makes the product small whatever the others are (found by fuzzing:
  // tensor<0x2147483647xf32> listed 2^31 indices).
  for (int64_t n : shape)
    if (n > kMaxCheckedElements || llvm::MulOverflow(elements, n, elements) ||
        elements > kMaxCheckedElements)
      return 0;
  checkPlacements(first.getLayout(), meshShape, shape);
  checkCoverage(first.getLayout(), meshShape, shape);
  return 0;
}
