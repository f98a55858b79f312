//===- ShardXAttrs.cpp - ShardX attributes --------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Runtime/CApi.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::shardx;

#include "shardx/Dialect/ShardX/IR/ShardXEnums.cpp.inc"

static Layout fromParameters(ArrayRef<DimShardingAttr> dims,
                             ArrayRef<int64_t> partials, std::string &error);

namespace mlir::shardx::detail {
/// The storage of a LayoutAttr: its parameters, the canonical layout they
/// spell (built once, when the attribute is uniqued) and, behind a lock,
/// what passes ask of it again and again: its local type for a global type
/// on a mesh shape, and the result of checking it against them.
struct LayoutAttrStorage : public AttributeStorage {
  using KeyTy = std::tuple<FlatSymbolRefAttr, ArrayRef<DimShardingAttr>,
                           ArrayRef<int64_t>>;

  LayoutAttrStorage(FlatSymbolRefAttr mesh, ArrayRef<DimShardingAttr> dims,
                    ArrayRef<int64_t> partials)
      : mesh(mesh), dims(dims), partials(partials) {
    std::string error;
    layout = fromParameters(dims, partials, error);
  }

  KeyTy getAsKey() const { return KeyTy(mesh, dims, partials); }
  bool operator==(const KeyTy &key) const { return key == getAsKey(); }
  static llvm::hash_code hashKey(const KeyTy &key) {
    return llvm::hash_combine(std::get<0>(key), std::get<1>(key),
                              std::get<2>(key));
  }
  static LayoutAttrStorage *construct(AttributeStorageAllocator &allocator,
                                      KeyTy &&key) {
    return new (allocator.allocate<LayoutAttrStorage>()) LayoutAttrStorage(
        std::get<0>(key), allocator.copyInto(std::get<1>(key)),
        allocator.copyInto(std::get<2>(key)));
  }

  /// What the attribute knows about one (global type, mesh shape) pair.
  struct Facts {
    SmallVector<int64_t, 4> meshShape;
    std::optional<std::string> error;      // verifyFor's answer
    std::optional<RankedTensorType> local; // getLocalType's answer
  };
  /// The facts of (type, meshShape), created empty on first use. The
  /// caller holds `mutex`.
  Facts &factsFor(Type type, ArrayRef<int64_t> meshShape) const {
    SmallVector<Facts, 1> &list = facts[type];
    for (Facts &f : list)
      if (ArrayRef<int64_t>(f.meshShape) == meshShape)
        return f;
    list.push_back(Facts{SmallVector<int64_t, 4>(meshShape), {}, {}});
    return list.back();
  }

  FlatSymbolRefAttr mesh;
  ArrayRef<DimShardingAttr> dims;
  ArrayRef<int64_t> partials;
  Layout layout;
  mutable llvm::sys::SmartMutex<true> mutex;
  mutable llvm::DenseMap<Type, SmallVector<Facts, 1>> facts;
};
} // namespace mlir::shardx::detail

#define GET_ATTRDEF_CLASSES
#include "shardx/Dialect/ShardX/IR/ShardXAttrs.cpp.inc"

void ShardXDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "shardx/Dialect/ShardX/IR/ShardXAttrs.cpp.inc"
      >();
}

// One encoding of the reduction everywhere: the dialect's enum, the layout
// algebra's ReduceOp and the runtime C ABI's SHARDX_RT_* (also checked in
// lib/Runtime/CApi.cpp) number sum, avg, max, min, prod alike, and none has
// a kind the others lack. The names agree too (test/Unit/DialectTest.cpp).
#define SHARDX_CHECK_REDUCTION(KIND, RT)                                       \
  static_assert(static_cast<uint32_t>(ReductionKind::KIND) ==                  \
                        static_cast<uint32_t>(ReduceOp::KIND) &&               \
                    static_cast<uint32_t>(ReductionKind::KIND) == RT,          \
                "ReductionKind, ReduceOp and SHARDX_RT_* disagree on " #KIND);
SHARDX_CHECK_REDUCTION(Sum, SHARDX_RT_SUM)
SHARDX_CHECK_REDUCTION(Avg, SHARDX_RT_AVG)
SHARDX_CHECK_REDUCTION(Max, SHARDX_RT_MAX)
SHARDX_CHECK_REDUCTION(Min, SHARDX_RT_MIN)
SHARDX_CHECK_REDUCTION(Prod, SHARDX_RT_PROD)
#undef SHARDX_CHECK_REDUCTION
static_assert(getMaxEnumValForReductionKind() ==
                      static_cast<uint32_t>(ReduceOp::Prod) &&
                  SHARDX_RT_PROD == static_cast<int>(ReduceOp::Prod),
              "a reduction kind exists in one encoding but not the others");

ReductionKind mlir::shardx::toReductionKind(ReduceOp op) {
  return static_cast<ReductionKind>(static_cast<uint32_t>(op));
}

ReduceOp mlir::shardx::toReduceOp(ReductionKind kind) {
  return static_cast<ReduceOp>(static_cast<uint32_t>(kind));
}

//===----------------------------------------------------------------------===//
// DimShardingAttr
//===----------------------------------------------------------------------===//

static ParseResult parseIntList(AsmParser &parser,
                                SmallVectorImpl<int64_t> &values) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    return parser.parseInteger(values.emplace_back());
  });
}

static void printIntList(AsmPrinter &printer, ArrayRef<int64_t> values) {
  printer << "[";
  llvm::interleaveComma(values, printer);
  printer << "]";
}

// #shardx.dim_sharding<0, axes = [1, 0], strides = [1, 1], sizes = []>
Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  int64_t dim;
  SmallVector<int64_t> axes, strides, sizes;
  if (parser.parseLess() || parser.parseInteger(dim) || parser.parseComma() ||
      parser.parseKeyword("axes") || parser.parseEqual() ||
      parseIntList(parser, axes) || parser.parseComma() ||
      parser.parseKeyword("strides") || parser.parseEqual() ||
      parseIntList(parser, strides) || parser.parseComma() ||
      parser.parseKeyword("sizes") || parser.parseEqual() ||
      parseIntList(parser, sizes) || parser.parseGreater())
    return {};
  return DimShardingAttr::get(parser.getContext(), dim, axes, strides, sizes);
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getDim() << ", axes = ";
  printIntList(printer, getAxes());
  printer << ", strides = ";
  printIntList(printer, getStrides());
  printer << ", sizes = ";
  printIntList(printer, getSizes());
  printer << ">";
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

/// Builds the attribute parameters of a canonical layout.
static void toParameters(MLIRContext *ctx, const Layout &layout,
                         SmallVectorImpl<DimShardingAttr> &dims,
                         SmallVectorImpl<int64_t> &partials) {
  for (const DimSharding &ds : layout.getDims()) {
    SmallVector<int64_t> axes, strides;
    for (const Split &s : ds.splits) {
      axes.push_back(s.axis);
      strides.push_back(s.stride);
    }
    dims.push_back(DimShardingAttr::get(ctx, ds.dim, axes, strides, ds.sizes));
  }
  for (const auto &p : layout.getPartials())
    partials.push_back(p ? static_cast<int64_t>(*p) : -1);
}

/// Rebuilds the plain layout from attribute parameters; `error` is set when
/// a parameter is out of range.
static Layout fromParameters(ArrayRef<DimShardingAttr> dims,
                             ArrayRef<int64_t> partials, std::string &error) {
  Layout layout(partials.size());
  for (auto [axis, p] : llvm::enumerate(partials)) {
    if (p < -1 || p > static_cast<int64_t>(ReduceOp::Prod)) {
      error = "mesh axis " + std::to_string(axis) +
              " has an unknown Partial kind " + std::to_string(p);
      continue;
    }
    if (p >= 0)
      layout.setPartial(axis, static_cast<ReduceOp>(p));
  }
  for (DimShardingAttr ds : dims) {
    if (!ds) {
      error = "null dim sharding";
      continue;
    }
    if (ds.getAxes().size() != ds.getStrides().size())
      error = "dim " + std::to_string(ds.getDim()) +
              " has a different number of axes and strides";
    for (auto [i, axis] : llvm::enumerate(ds.getAxes()))
      layout.addSplit(
          ds.getDim(),
          {axis, i < ds.getStrides().size() ? ds.getStrides()[i] : 1});
    if (!ds.getSizes().empty())
      layout.setSizes(ds.getDim(), std::vector<int64_t>(ds.getSizes().begin(),
                                                        ds.getSizes().end()));
  }
  return layout;
}

LayoutAttr LayoutAttr::get(FlatSymbolRefAttr mesh, const Layout &layout) {
  SmallVector<DimShardingAttr> dims;
  SmallVector<int64_t> partials;
  toParameters(mesh.getContext(), layout, dims, partials);
  return LayoutAttr::get(mesh.getContext(), mesh, dims, partials);
}

// The parameter accessors (tblgen writes them only with its own storage).
FlatSymbolRefAttr LayoutAttr::getMesh() const { return getImpl()->mesh; }
ArrayRef<DimShardingAttr> LayoutAttr::getDims() const {
  return getImpl()->dims;
}
ArrayRef<int64_t> LayoutAttr::getPartials() const {
  return getImpl()->partials;
}

const Layout &LayoutAttr::getLayout() const { return getImpl()->layout; }

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 FlatSymbolRefAttr mesh,
                                 ArrayRef<DimShardingAttr> dims,
                                 ArrayRef<int64_t> partials) {
  if (!mesh)
    return emitError() << "layout needs a mesh";
  std::string error;
  Layout layout = fromParameters(dims, partials, error);
  if (error.empty())
    error = layout.verify();
  if (!error.empty())
    return emitError() << "invalid layout: " << error;
  return success();
}

/// Checks the counts the layout algebra multiplies (devices, the blocks a
/// strided dim is cut into) against int64 overflow, and that a strided dim
/// has elements: its local runs are enumerated block by block. `shape` is
/// empty when there is no tensor.
static std::string verifyCounts(const Layout &layout,
                                ArrayRef<int64_t> meshShape,
                                ArrayRef<int64_t> shape) {
  int64_t devices = 1;
  for (int64_t size : meshShape)
    if (llvm::MulOverflow(devices, size, devices))
      return "the mesh has more devices than a 64-bit integer counts";
  for (const DimSharding &ds : layout.getDims()) {
    int64_t stride = ds.splits.back().stride, blocks = stride;
    for (const Split &s : ds.splits)
      if (llvm::MulOverflow(blocks, meshShape[s.axis], blocks))
        return "dim " + std::to_string(ds.dim) +
               " is cut into more blocks than a 64-bit integer counts";
    if (stride != 1 && ds.dim < static_cast<int64_t>(shape.size()) &&
        shape[ds.dim] == 0)
      return "dim " + std::to_string(ds.dim) +
             " of size 0 cannot be strided";
  }
  return "";
}

std::string LayoutAttr::verifyFor(ArrayRef<int64_t> meshShape,
                                  Type type) const {
  llvm::sys::SmartScopedLock<true> lock(getImpl()->mutex);
  detail::LayoutAttrStorage::Facts &facts =
      getImpl()->factsFor(type, meshShape);
  if (!facts.error)
    facts.error = verifyForUncached(meshShape, type);
  return *facts.error;
}

RankedTensorType LayoutAttr::getLocalType(RankedTensorType global,
                                          ArrayRef<int64_t> meshShape) const {
  llvm::sys::SmartScopedLock<true> lock(getImpl()->mutex);
  detail::LayoutAttrStorage::Facts &facts =
      getImpl()->factsFor(global, meshShape);
  if (!facts.local)
    facts.local = mlir::shardx::getLocalType(global, getLayout(), meshShape);
  return *facts.local;
}

std::string LayoutAttr::verifyForUncached(ArrayRef<int64_t> meshShape,
                                          Type type) const {
  const Layout &layout = getLayout();
  std::vector<int64_t> mesh(meshShape.begin(), meshShape.end());
  if (std::string error = layout.verifyForMesh(mesh); !error.empty())
    return error;
  std::vector<int64_t> shape;
  if (type) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType)
      return "a layout needs a ranked tensor, got a value of another type";
    for (int64_t size : tensorType.getShape())
      shape.push_back(ShapedType::isDynamic(size) ? -1 : size);
  }
  if (std::string error = verifyCounts(layout, meshShape, shape);
      !error.empty())
    return error;
  return type ? layout.verifyForShape(mesh, shape) : "";
}

/// Parses `{d = [v, ...], ...}` into `map`.
static ParseResult parseDimMap(AsmParser &parser, StringRef clause,
                               std::map<int64_t, std::vector<int64_t>> &map) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Braces, [&]() -> ParseResult {
        SMLoc loc = parser.getCurrentLocation();
        int64_t dim;
        SmallVector<int64_t> values;
        if (parser.parseInteger(dim) || parser.parseEqual() ||
            parseIntList(parser, values))
          return failure();
        if (!map.emplace(dim,
                         std::vector<int64_t>(values.begin(), values.end()))
                 .second)
          return parser.emitError(loc)
                 << "'" << clause << "' lists dim " << dim << " twice";
        return success();
      });
}

/// One placement of a layout: S(d), SS(d, sf), R or P(op).
static ParseResult parsePlacement(AsmParser &parser, LayoutSpelling &spelling,
                                  bool &hasStrided) {
  SMLoc ploc = parser.getCurrentLocation();
  StringRef kind;
  if (failed(parser.parseOptionalKeyword(&kind)))
    return parser.emitError(ploc, "expected a placement: S(d), SS(d, sf), "
                                  "R or P(op)");
  Placement p;
  if (kind == "R") {
    p = Placement::replicate();
  } else if (kind == "S") {
    int64_t dim;
    if (parser.parseLParen() || parser.parseInteger(dim) ||
        parser.parseRParen())
      return failure();
    p = Placement::shard(dim);
  } else if (kind == "SS") {
    int64_t dim, sf;
    if (parser.parseLParen() || parser.parseInteger(dim) ||
        parser.parseComma() || parser.parseInteger(sf) || parser.parseRParen())
      return failure();
    p = Placement::stridedShard(dim, sf);
    hasStrided = true;
  } else if (kind == "P") {
    StringRef opName;
    if (parser.parseLParen())
      return failure();
    SMLoc oloc = parser.getCurrentLocation();
    if (parser.parseKeyword(&opName))
      return failure();
    std::optional<ReduceOp> op = parseReduceOp(opName.str());
    if (!op)
      return parser.emitError(oloc, "unknown Partial reduction '")
             << opName << "'; expected sum, avg, max, min or prod";
    if (parser.parseRParen())
      return failure();
    p = Placement::partial(*op);
  } else {
    return parser.emitError(ploc, "unknown placement '")
           << kind << "'; expected S(d), SS(d, sf), R or P(op)";
  }
  spelling.placements.push_back(p);
  return success();
}

/// The optional `, order = {...}`, `, strides = {...}`, `, sizes = {...}`
/// clauses, each at most once.
static ParseResult parseLayoutClauses(AsmParser &parser,
                                      LayoutSpelling &spelling) {
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc cloc = parser.getCurrentLocation();
    StringRef clause;
    if (parser.parseKeyword(&clause))
      return failure();
    std::map<int64_t, std::vector<int64_t>> *map =
        llvm::StringSwitch<std::map<int64_t, std::vector<int64_t>> *>(clause)
            .Case("order", &spelling.order)
            .Case("strides", &spelling.strides)
            .Case("sizes", &spelling.sizes)
            .Default(nullptr);
    if (!map)
      return parser.emitError(cloc, "unknown layout clause '")
             << clause << "'; expected order, strides or sizes";
    if (!map->empty())
      return parser.emitError(cloc, "layout clause '")
             << clause << "' given twice";
    if (parser.parseEqual() || parseDimMap(parser, clause, *map))
      return failure();
  }
  return success();
}

/// The shape of mesh `meshName`, which SS placements need: it must be
/// declared before the layout and have positive axis sizes.
static FailureOr<std::vector<int64_t>>
resolveMeshShape(AsmParser &parser, SMLoc loc, StringAttr meshName) {
  auto *dialect = parser.getContext()->getLoadedDialect<ShardXDialect>();
  std::optional<SmallVector<int64_t>> shape =
      dialect->lookupMeshShape(meshName.getValue());
  if (!shape)
    return parser.emitError(loc, "cannot resolve SS placements: mesh @")
           << meshName.getValue()
           << " has not been declared before this layout (declare "
              "`shardx.mesh` first, or spell the layout with `order` and "
              "`strides`)";
  // The mesh is parsed but not verified yet: its sizes may be anything.
  for (auto [axis, size] : llvm::enumerate(*shape))
    if (size < 1)
      return parser.emitError(loc, "cannot resolve SS placements: axis ")
             << axis << " of mesh @" << meshName.getValue() << " has size "
             << size << "; mesh axis sizes must be positive";
  return std::vector<int64_t>(shape->begin(), shape->end());
}

// #shardx.layout<@mesh, [S(0), SS(1, 2), R, P(sum)], order = {...},
//                strides = {...}, sizes = {...}>
Attribute LayoutAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringAttr meshName;
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalSymbolName(meshName))) {
    parser.emitError(parser.getCurrentLocation(),
                     "expected a mesh symbol such as @mesh");
    return {};
  }
  if (parser.parseComma())
    return {};
  LayoutSpelling spelling;
  bool hasStrided = false;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square,
          [&] { return parsePlacement(parser, spelling, hasStrided); }) ||
      parseLayoutClauses(parser, spelling) || parser.parseGreater())
    return {};

  std::vector<int64_t> meshShape;
  if (hasStrided) {
    FailureOr<std::vector<int64_t>> shape =
        resolveMeshShape(parser, loc, meshName);
    if (failed(shape))
      return {};
    meshShape = std::move(*shape);
  }
  std::string error;
  std::optional<Layout> layout =
      Layout::fromSpelling(spelling, meshShape, error);
  if (!layout) {
    parser.emitError(loc, "invalid layout: ") << error;
    return {};
  }
  SmallVector<DimShardingAttr> dims;
  SmallVector<int64_t> partials;
  toParameters(parser.getContext(), *layout, dims, partials);
  return LayoutAttr::getChecked(
      [&] { return parser.emitError(loc); }, parser.getContext(),
      FlatSymbolRefAttr::get(meshName), dims, partials);
}

void LayoutAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printSymbolName(getMesh().getValue());
  printer << ", " << getLayout().str() << ">";
}

//===----------------------------------------------------------------------===//
// Layouts at ops
//===----------------------------------------------------------------------===//

LogicalResult mlir::shardx::verifyLayoutAt(Operation *op, LayoutAttr layout,
                                           Type type, const Twine &what,
                                           SymbolTableCollection *symbolTable,
                                           std::optional<Location> loc) {
  Location at = loc.value_or(op->getLoc());
  Operation *found =
      symbolTable
          ? symbolTable->lookupNearestSymbolFrom(op, layout.getMesh().getAttr())
          : SymbolTable::lookupNearestSymbolFrom(op,
                                                 layout.getMesh().getAttr());
  auto mesh = dyn_cast_or_null<MeshOp>(found);
  if (!mesh)
    return emitError(at) << what << " " << layout << " refers to unknown mesh "
                         << layout.getMesh();
  std::string error = layout.verifyFor(mesh.getShape(), type);
  if (!error.empty())
    return emitError(at) << what << " " << layout << " is invalid for " << type
                         << " on mesh " << layout.getMesh() << ": " << error;
  return success();
}

RankedTensorType mlir::shardx::getLocalType(RankedTensorType global,
                                            const Layout &layout,
                                            ArrayRef<int64_t> meshShape) {
  std::vector<int64_t> mesh(meshShape.begin(), meshShape.end());
  SmallVector<int64_t> local(global.getShape());
  // A dim's local size depends only on the coordinates of the axes that
  // split it: enumerate those (the others at 0), one dim at a time, and
  // stop at the first size that differs.
  std::vector<Interval> runs;
  for (const DimSharding &ds : layout.getDims()) {
    std::vector<int64_t> coords(mesh.size(), 0);
    std::optional<int64_t> size;
    while (true) {
      runs.clear();
      layout.appendLocalRuns(mesh, ds.dim, global.getDimSize(ds.dim), coords,
                             runs);
      int64_t n = 0;
      for (const Interval &run : runs)
        n += run.size;
      if (size && *size != n) {
        local[ds.dim] = ShapedType::kDynamic;
        break;
      }
      size = n;
      local[ds.dim] = n;
      // The next coordinates of the split axes, minor axis first.
      size_t i = ds.splits.size();
      while (i > 0 &&
             ++coords[ds.splits[i - 1].axis] == mesh[ds.splits[i - 1].axis]) {
        coords[ds.splits[i - 1].axis] = 0;
        --i;
      }
      if (i == 0)
        break;
    }
  }
  return RankedTensorType::get(local, global.getElementType());
}
