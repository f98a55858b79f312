//===- ShardXOps.cpp - ShardX operations ----------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::shardx;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

MeshOp mlir::shardx::lookupMesh(Operation *from, FlatSymbolRefAttr meshRef,
                                SymbolTableCollection *symbolTable) {
  Operation *found =
      symbolTable
          ? symbolTable->lookupNearestSymbolFrom(from, meshRef.getAttr())
          : SymbolTable::lookupNearestSymbolFrom(from, meshRef.getAttr());
  auto mesh = dyn_cast_or_null<MeshOp>(found);
  if (!mesh) {
    from->emitError() << "unknown mesh " << meshRef;
    return {};
  }
  return mesh;
}

FailureOr<int64_t> mlir::shardx::detail::getGroupSize(Operation *op,
                                                      FlatSymbolRefAttr meshRef,
                                                      ArrayRef<int64_t> axes) {
  MeshOp mesh = lookupMesh(op, meshRef);
  if (!mesh)
    return failure();
  int64_t n = 1;
  for (int64_t axis : axes)
    n *= mesh.getShape()[axis];
  return n;
}

/// Checks that `axes` names a non-empty set of distinct axes of `mesh` and
/// returns the group size.
static FailureOr<int64_t> verifyGroup(Operation *op, FlatSymbolRefAttr meshRef,
                                      ArrayRef<int64_t> axes,
                                      SymbolTableCollection &symbolTable) {
  MeshOp mesh = lookupMesh(op, meshRef, &symbolTable);
  if (!mesh)
    return failure();
  if (axes.empty())
    return op->emitError() << "needs at least one mesh axis";
  int64_t groupSize = 1;
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : axes) {
    if (axis < 0 || axis >= mesh.getRank())
      return op->emitError()
             << "mesh axis " << axis << " is out of range for mesh " << meshRef
             << " of rank " << mesh.getRank();
    if (!seen.insert(axis).second)
      return op->emitError() << "mesh axis " << axis << " is listed twice";
    groupSize *= mesh.getShape()[axis];
  }
  return groupSize;
}

static LogicalResult verifyDimInRange(Operation *op, StringRef name,
                                      int64_t dim, int64_t rank) {
  if (dim < 0 || dim >= rank)
    return op->emitError() << name << " " << dim
                           << " is out of range for a tensor of rank " << rank;
  return success();
}

/// Checks equal element types and ranks of `input` and `result`.
static LogicalResult verifySameElementsAndRank(Operation *op,
                                               RankedTensorType input,
                                               RankedTensorType result) {
  if (input.getElementType() != result.getElementType())
    return op->emitError() << "element type of the result ("
                           << result.getElementType()
                           << ") differs from the operand's ("
                           << input.getElementType() << ")";
  if (input.getRank() != result.getRank())
    return op->emitError() << "result rank " << result.getRank()
                           << " differs from the operand rank "
                           << input.getRank();
  return success();
}

/// Checks that `result` dims other than those in `except` equal `input`'s
/// (dynamic sizes match anything).
static LogicalResult verifyOtherDimsEqual(Operation *op, RankedTensorType input,
                                          RankedTensorType result,
                                          ArrayRef<int64_t> except) {
  for (int64_t d = 0; d < input.getRank(); ++d) {
    if (llvm::is_contained(except, d))
      continue;
    int64_t a = input.getDimSize(d), b = result.getDimSize(d);
    if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b)
      return op->emitError() << "result dim " << d << " is " << b
                             << " but the operand's is " << a;
  }
  return success();
}

/// Checks an optional per-member `sizes` list and returns its sum.
static FailureOr<int64_t> verifySizes(Operation *op,
                                      std::optional<ArrayRef<int64_t>> sizes,
                                      int64_t groupSize) {
  if (static_cast<int64_t>(sizes->size()) != groupSize)
    return op->emitError() << "'sizes' has " << sizes->size()
                           << " entries but the group has " << groupSize
                           << " members";
  int64_t sum = 0;
  for (int64_t s : *sizes) {
    if (s < 0)
      return op->emitError() << "'sizes' has a negative entry " << s;
    sum += s;
  }
  return sum;
}

/// The number of blocks a dim is cut into: the group size times a stride,
/// or an error when that product overflows int64.
static FailureOr<int64_t> verifyBlocks(Operation *op, int64_t groupSize,
                                       int64_t stride) {
  int64_t blocks;
  if (llvm::MulOverflow(groupSize, stride, blocks))
    return op->emitOpError("the group size ")
           << groupSize << " times the stride " << stride
           << " overflows a 64-bit integer";
  return blocks;
}

/// Verifies that `whole` (a static or dynamic dim) is `part` times the group
/// size, or the sum of `sizes` when given. `wholeName` and `partName` say
/// which of operand and result each is.
static LogicalResult verifyScaledDim(Operation *op, int64_t dim, int64_t whole,
                                     int64_t part, int64_t groupSize,
                                     std::optional<ArrayRef<int64_t>> sizes,
                                     StringRef wholeName, StringRef partName) {
  if (sizes) {
    FailureOr<int64_t> sum = verifySizes(op, sizes, groupSize);
    if (failed(sum))
      return failure();
    if (!ShapedType::isDynamic(whole) && whole != *sum)
      return op->emitError() << wholeName << " dim " << dim << " is " << whole
                             << " but 'sizes' sums to " << *sum;
    if (!ShapedType::isDynamic(part) &&
        llvm::any_of(*sizes, [&](int64_t s) { return s != part; }))
      return op->emitError() << partName << " dim " << dim
                             << " is static but 'sizes' are not all " << part
                             << "; make it dynamic";
    return success();
  }
  if (ShapedType::isDynamic(whole) || ShapedType::isDynamic(part))
    return success();
  int64_t product;
  if (llvm::MulOverflow(part, groupSize, product) || whole != product)
    return op->emitError() << wholeName << " dim " << dim << " is " << whole
                           << " but must be " << partName << " dim " << part
                           << " times the group size " << groupSize;
  return success();
}

/// Checks a `stride` attribute: positive, dividing a static dim, and not
/// combined with explicit sizes.
static LogicalResult verifyStride(Operation *op, StringRef name,
                                  uint64_t stride, int64_t dimSize,
                                  bool hasSizes) {
  int64_t s = static_cast<int64_t>(stride);
  if (s < 1)
    return op->emitError() << name << " must be positive, got " << s;
  if (s != 1 && hasSizes)
    return op->emitError() << "'sizes' and a " << name << " cannot be combined";
  if (s != 1 && !ShapedType::isDynamic(dimSize) && dimSize % s != 0)
    return op->emitError() << "dim of size " << dimSize
                           << " does not divide into " << name << " " << s
                           << " blocks";
  return success();
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

// shardx.mesh @name(shape = 2x4, axes = ["dp", "tp"], bandwidth = [..],
//                   latency = [..])
ParseResult MeshOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  SmallVector<int64_t> shape;
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name),
                             result.attributes) ||
      parser.parseLParen() || parser.parseKeyword("shape") ||
      parser.parseEqual())
    return failure();
  SMLoc shapeLoc = parser.getCurrentLocation();
  if (parser.parseDimensionList(shape, /*allowDynamic=*/false,
                                /*withTrailingX=*/false))
    return failure();
  if (shape.empty()) {
    // The dimension list stops at a sign: name the size, not a lack of axes.
    int64_t size = 0;
    if (succeeded(parser.parseOptionalMinus()) &&
        parser.parseOptionalInteger(size).has_value())
      return parser.emitError(shapeLoc, "mesh axis 0 has size -")
             << size << "; sizes must be positive";
    return parser.emitError(shapeLoc,
                            "mesh needs at least one axis (shape = 2x2, ...)");
  }
  Builder &b = parser.getBuilder();
  result.addAttribute(getShapeAttrName(result.name),
                      b.getDenseI64ArrayAttr(shape));
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (key == "axes") {
      ArrayAttr axes;
      if (parser.parseAttribute(axes))
        return failure();
      result.addAttribute(getAxesAttrName(result.name), axes);
    } else if (key == "bandwidth" || key == "latency") {
      SmallVector<double> values;
      if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
            return parser.parseFloat(values.emplace_back());
          }))
        return failure();
      result.addAttribute(key == "bandwidth" ? getBandwidthAttrName(result.name)
                                             : getLatencyAttrName(result.name),
                          b.getDenseF64ArrayAttr(values));
    } else {
      return parser.emitError(loc, "unknown mesh field '")
             << key << "'; expected axes, bandwidth or latency";
    }
  }
  if (parser.parseRParen() || parser.parseOptionalAttrDict(result.attributes))
    return failure();
  // Layouts spelled with StridedShard need the mesh shape while parsing.
  parser.getContext()->getOrLoadDialect<ShardXDialect>()->recordMeshShape(
      name.getValue(), shape);
  return success();
}

void MeshOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printSymbolName(getSymName());
  p << "(shape = ";
  p.printDimensionList(getShape());
  if (std::optional<ArrayAttr> axes = getAxes())
    p << ", axes = " << *axes;
  auto printFloats = [&](StringRef key, std::optional<ArrayRef<double>> v) {
    if (!v)
      return;
    p << ", " << key << " = [";
    llvm::interleaveComma(*v, p, [&](double d) { p.printFloat(APFloat(d)); });
    p << "]";
  };
  printFloats("bandwidth", getBandwidth());
  printFloats("latency", getLatency());
  p << ")";
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {getSymNameAttrName(), getShapeAttrName(),
                           getAxesAttrName(), getBandwidthAttrName(),
                           getLatencyAttrName()});
}

LogicalResult MeshOp::verify() {
  ArrayRef<int64_t> shape = getShape();
  if (shape.empty())
    return emitOpError("needs at least one axis");
  for (auto [i, size] : llvm::enumerate(shape))
    if (size <= 0)
      return emitOpError("axis ")
             << i << " has size " << size << "; sizes must be positive";
  // Every user of the device count (and of products of axis sizes) relies
  // on this bound: it multiplies without overflow checks.
  if (!countMeshDevices(shape.data(), shape.size()))
    return emitOpError("has more than ")
           << kMaxMeshDevices
           << " (2^31) devices, the most a mesh may have (the product of "
              "its axis sizes)";
  if (std::optional<ArrayAttr> axes = getAxes()) {
    if (axes->size() != shape.size())
      return emitOpError("has ")
             << axes->size() << " axis names for " << shape.size() << " axes";
    llvm::SmallSet<StringRef, 4> seen;
    for (Attribute a : *axes) {
      StringRef axisName = cast<StringAttr>(a).getValue();
      if (axisName.empty())
        return emitOpError("axis names must not be empty");
      if (!seen.insert(axisName).second)
        return emitOpError("axis name '") << axisName << "' is used twice";
    }
  }
  for (auto [name, hint] : {std::make_pair("bandwidth", getBandwidth()),
                            std::make_pair("latency", getLatency())}) {
    if (!hint)
      continue;
    if (hint->size() != shape.size())
      return emitOpError("has ") << hint->size() << " " << name << " hints for "
                                 << shape.size() << " axes";
    for (double v : *hint)
      if (!(v > 0))
        return emitOpError() << name << " hints must be positive, got " << v;
  }
  return success();
}

int64_t MeshOp::getNumDevices() {
  ArrayRef<int64_t> shape = getShape();
  std::optional<int64_t> devices = countMeshDevices(shape.data(), shape.size());
  assert(devices && "getNumDevices on a mesh that does not verify");
  return devices.value_or(0);
}

std::string MeshOp::getAxisName(int64_t axis) {
  if (std::optional<ArrayAttr> axes = getAxes())
    return cast<StringAttr>((*axes)[axis]).getValue().str();
  return std::to_string(axis);
}

//===----------------------------------------------------------------------===//
// AnnotateOp, RedistributeOp, LocalSizeOp
//===----------------------------------------------------------------------===//

LogicalResult AnnotateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyLayoutAt(*this, getLayout(), getType(), "layout", &symbolTable);
}

LogicalResult
RedistributeOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (getSource().getMesh() != getTarget().getMesh())
    return emitOpError("source and target layouts are on different meshes (")
           << getSource().getMesh() << " and " << getTarget().getMesh() << ")";
  if (failed(verifyLayoutAt(*this, getSource(), getType(), "source layout",
                            &symbolTable)) ||
      failed(verifyLayoutAt(*this, getTarget(), getType(), "target layout",
                            &symbolTable)))
    return failure();
  return success();
}

LogicalResult
LocalSizeOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  ArrayRef<int64_t> shape = getShape();
  for (int64_t size : shape)
    if (size < 0)
      return emitOpError("global shape must be static and non-negative");
  if (failed(verifyDimInRange(*this, "dim", getDim(), shape.size())))
    return failure();
  auto type = RankedTensorType::get(shape, Builder(getContext()).getF32Type());
  return verifyLayoutAt(*this, getLayout(), type, "layout", &symbolTable);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Verifies an op that scales one dim by the group size: all_gather (the
/// result is the whole) or reduce_scatter (the operand is).
static LogicalResult verifyScalingOp(Operation *op, FlatSymbolRefAttr mesh,
                                     ArrayRef<int64_t> axes, Value input,
                                     Value result, int64_t dim, uint64_t stride,
                                     std::optional<ArrayRef<int64_t>> sizes,
                                     bool gathers, SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(op, mesh, axes, st);
  if (failed(n))
    return failure();
  auto in = cast<RankedTensorType>(input.getType());
  auto out = cast<RankedTensorType>(result.getType());
  if (failed(verifySameElementsAndRank(op, in, out)) ||
      failed(verifyDimInRange(op, "dim", dim, in.getRank())) ||
      failed(verifyOtherDimsEqual(op, in, out, {dim})) ||
      failed(verifyStride(op, "stride", stride, in.getDimSize(dim),
                          sizes.has_value())))
    return failure();
  if (gathers)
    return verifyScaledDim(op, dim, out.getDimSize(dim), in.getDimSize(dim), *n,
                           sizes, "result", "operand");
  return verifyScaledDim(op, dim, in.getDimSize(dim), out.getDimSize(dim), *n,
                         sizes, "operand", "result");
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyScalingOp(*this, getMeshAttr(), getAxes(), getInput(),
                         getResult(), getDim(), getStride(), getSizes(),
                         /*gathers=*/true, st);
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyScalingOp(*this, getMeshAttr(), getAxes(), getInput(),
                         getResult(), getDim(), getStride(), getSizes(),
                         /*gathers=*/false, st);
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyGroup(*this, getMeshAttr(), getAxes(), st);
}

LogicalResult AllReduceStartOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyGroup(*this, getMeshAttr(), getAxes(), st);
}

/// The one-use rule of a `*_start` op: its result is read by exactly one
/// shardx.wait, in its block.
static LogicalResult verifyStartUse(Operation *op) {
  Value result = op->getResult(0);
  if (!result.hasOneUse())
    return op->emitOpError(
               "result must have exactly one use, a shardx.wait (has ")
           << std::distance(result.use_begin(), result.use_end()) << ")";
  Operation *user = *result.user_begin();
  if (!isa<WaitOp>(user))
    return op->emitOpError("result must be used by a shardx.wait, not '")
           << user->getName() << "'";
  if (user->getBlock() != op->getBlock())
    return op->emitOpError("its shardx.wait must be in the same block");
  return success();
}

LogicalResult AllReduceStartOp::verify() { return verifyStartUse(*this); }

LogicalResult AllGatherStartOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyScalingOp(*this, getMeshAttr(), getAxes(), getInput(),
                         getResult(), getDim(), getStride(), getSizes(),
                         /*gathers=*/true, st);
}

LogicalResult AllGatherStartOp::verify() { return verifyStartUse(*this); }

LogicalResult
ReduceScatterStartOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyScalingOp(*this, getMeshAttr(), getAxes(), getInput(),
                         getResult(), getDim(), getStride(), getSizes(),
                         /*gathers=*/false, st);
}

LogicalResult ReduceScatterStartOp::verify() { return verifyStartUse(*this); }

LogicalResult WaitOp::verify() {
  Operation *start = getPending().getDefiningOp();
  if (!isa_and_nonnull<AllReduceStartOp, AllGatherStartOp,
                       ReduceScatterStartOp>(start))
    return emitOpError("operand must be the result of an asynchronous "
                       "collective (shardx.all_reduce_start, "
                       "all_gather_start or reduce_scatter_start)");
  return success();
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(*this, getMeshAttr(), getAxes(), st);
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  int64_t splitDim = getSplitDim(), concatDim = getConcatDim();
  if (failed(verifySameElementsAndRank(*this, in, out)) ||
      failed(verifyDimInRange(*this, "split_dim", splitDim, in.getRank())) ||
      failed(verifyDimInRange(*this, "concat_dim", concatDim, in.getRank())) ||
      failed(verifyOtherDimsEqual(*this, in, out, {splitDim, concatDim})))
    return failure();
  int64_t inSplit = in.getDimSize(splitDim);
  if (failed(verifyStride(*this, "split_stride", getSplitStride(),
                          ShapedType::kDynamic, getSizes().has_value())) ||
      failed(verifyStride(*this, "concat_stride", getConcatStride(),
                          in.getDimSize(concatDim), false)))
    return failure();
  if (getSizes()) {
    if (splitDim == concatDim)
      return emitOpError("'sizes' needs split_dim and concat_dim to differ");
    FailureOr<int64_t> sum = verifySizes(*this, getSizes(), *n);
    if (failed(sum))
      return failure();
    if (!ShapedType::isDynamic(inSplit) && inSplit != *sum)
      return emitOpError("split_dim ") << splitDim << " is " << inSplit
                                       << " but 'sizes' sums to " << *sum;
    int64_t outSplit = out.getDimSize(splitDim);
    if (!ShapedType::isDynamic(outSplit) &&
        llvm::any_of(*getSizes(), [&](int64_t s) { return s != outSplit; }))
      return emitOpError("result split_dim ")
             << splitDim << " is static but 'sizes' are not all " << outSplit
             << "; make it dynamic";
    return verifyScaledDim(*this, concatDim, out.getDimSize(concatDim),
                           in.getDimSize(concatDim), *n, std::nullopt, "result",
                           "operand");
  }
  FailureOr<int64_t> blocks =
      verifyBlocks(*this, *n, static_cast<int64_t>(getSplitStride()));
  if (failed(blocks))
    return failure();
  if (!ShapedType::isDynamic(inSplit) && inSplit % *blocks != 0)
    return emitOpError("split_dim ")
           << splitDim << " of size " << inSplit
           << " does not divide by the group size " << *n
           << (getSplitStride() != 1 ? " times the split stride" : "");
  if (splitDim == concatDim)
    return verifyOtherDimsEqual(*this, in, out, {});
  if (failed(verifyScaledDim(*this, splitDim, inSplit, out.getDimSize(splitDim),
                             *n, std::nullopt, "operand", "result")) ||
      failed(verifyScaledDim(*this, concatDim, out.getDimSize(concatDim),
                             in.getDimSize(concatDim), *n, std::nullopt,
                             "result", "operand")))
    return failure();
  return success();
}

LogicalResult ExchangeOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(*this, getMeshAttr(), getAxes(), st);
  if (failed(n))
    return failure();
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (failed(verifySameElementsAndRank(*this, in, out)))
    return failure();
  ArrayRef<int64_t> shape = getShape();
  if (static_cast<int64_t>(shape.size()) != in.getRank())
    return emitOpError("shape has ")
           << shape.size() << " dims, the operand " << in.getRank();
  for (int64_t size : shape)
    if (size < 0)
      return emitOpError("global shape must be static and non-negative");
  auto global = RankedTensorType::get(shape, in.getElementType());
  for (LayoutAttr layout : {getSource(), getTarget()})
    if (layout.getMesh() != getMeshAttr())
      return emitOpError("layout ")
             << layout << " is not on mesh " << getMeshAttr();
  if (failed(verifyLayoutAt(*this, getSource(), global, "source layout",
                            &st)) ||
      failed(verifyLayoutAt(*this, getTarget(), global, "target layout", &st)))
    return failure();
  MeshOp mesh = lookupMesh(*this, getMeshAttr(), &st);
  ArrayRef<int64_t> meshShape = mesh.getShape();
  // The local types come from every rank's shard; an exchange exists only
  // on meshes the planner plans on (a fuzzed 1024x1024 mesh took seconds).
  int64_t devices = 1;
  for (int64_t size : meshShape)
    if (llvm::MulOverflow(devices, size, devices) ||
        devices > kMaxPlannerDevices)
      return emitOpError("needs a mesh of at most ")
             << kMaxPlannerDevices
             << " devices, the most the planner enumerates";
  const Layout &source = getSource().getLayout(),
               &target = getTarget().getLayout();
  if (RankedTensorType local = getSource().getLocalType(global, meshShape);
      in != local)
    return emitOpError("operand type ")
           << in << " is not the local type " << local << " of the source";
  if (RankedTensorType local = getTarget().getLocalType(global, meshShape);
      out != local)
    return emitOpError("result type ")
           << out << " is not the local type " << local << " of the target";
  llvm::SmallSet<int64_t, 4> group(getAxes().begin(), getAxes().end());
  for (int64_t a = 0, e = meshShape.size(); a < e; ++a) {
    const auto &ps = source.getPartials()[a], &pt = target.getPartials()[a];
    if (!group.contains(a) && ps != pt)
      return emitOpError("the Partial of mesh axis ")
             << a << ", outside the group, differs between the layouts";
    if (group.contains(a) && pt && ps != pt)
      return emitOpError("cannot create the Partial of mesh axis ")
             << a << " (use shardx.partition_value)";
  }
  return success();
}

LogicalResult PermuteOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(*this, getMeshAttr(), getAxes(), st);
  if (failed(n))
    return failure();
  ArrayRef<int64_t> pairs = getPairs();
  if (pairs.size() % 2 != 0)
    return emitOpError("pairs must hold [source, target] pairs");
  llvm::SmallSet<int64_t, 8> sources, targets;
  for (size_t i = 0; i < pairs.size(); i += 2) {
    for (int64_t idx : {pairs[i], pairs[i + 1]})
      if (idx < 0 || idx >= *n)
        return emitOpError("pair index ")
               << idx << " is out of range for a group of " << *n;
    if (!sources.insert(pairs[i]).second)
      return emitOpError("group member ") << pairs[i] << " is a source twice";
    if (!targets.insert(pairs[i + 1]).second)
      return emitOpError("group member ")
             << pairs[i + 1] << " is a target twice";
  }
  return success();
}

/// The checks of a collective that changes only dim `dim` of its one
/// input (shardx.halo, shardx.chunk): its group, same element type and
/// rank, `dim` in range, the other dims unchanged. Returns the group size.
template <typename OpT>
static FailureOr<int64_t>
verifyOneDimCollective(OpT op, FlatSymbolRefAttr mesh, ArrayRef<int64_t> axes,
                       int64_t dim, SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(op, mesh, axes, st);
  if (failed(n))
    return failure();
  auto in = op.getInput().getType(), out = op.getResult().getType();
  if (failed(verifySameElementsAndRank(op, in, out)) ||
      failed(verifyDimInRange(op, "dim", dim, in.getRank())) ||
      failed(verifyOtherDimsEqual(op, in, out, {dim})))
    return failure();
  return n;
}

LogicalResult RaggedAllToAllOp::verify() {
  // Who knows the received counts: the program (an operand) or the op (a
  // result); one of the two.
  if (getRecvCounts() && getReceivedCounts())
    return emitOpError("has both a 'recv_counts' operand and a second result: "
                       "given counts are not returned");
  if (!getRecvCounts() && !getReceivedCounts())
    return emitOpError("needs a 'recv_counts' operand or a second result "
                       "(the received counts)");
  return success();
}

LogicalResult RaggedAllToAllOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n =
      verifyOneDimCollective(*this, getMeshAttr(), getAxes(), /*dim=*/0, st);
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  for (int64_t d = 1; d < in.getRank(); ++d)
    if (in.isDynamicDim(d) || out.isDynamicDim(d))
      return emitOpError("dims after dim 0 must be static (whole rows move), "
                         "dim ")
             << d << " is dynamic";
  if (out.isDynamicDim(0))
    return emitOpError("the result's dim 0 must be static: the most rows a "
                       "rank may receive");
  SmallVector<std::pair<StringRef, Value>, 2> counts = {
      {"send_counts", getSendCounts()}};
  if (Value given = getRecvCounts())
    counts.push_back({"recv_counts", given});
  if (Value received = getReceivedCounts())
    counts.push_back({"received_counts", received});
  for (auto [name, value] : counts) {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getRank() != 1 || type.getDimSize(0) != *n)
      return emitOpError("'")
             << name << "' must be tensor<" << *n
             << "xi64> (one count per group member), got " << type;
  }
  return success();
}

LogicalResult HaloOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyOneDimCollective(*this, getMeshAttr(),
                                                 getAxes(), getDim(), st);
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  int64_t dim = getDim();
  int64_t low = getLow(), high = getHigh();
  if (low < 0 || high < 0)
    return emitOpError("halo widths must be non-negative, got low = ")
           << low << " and high = " << high;
  // The members' operand sizes on `dim`, where known: given, or (a static
  // operand) `uniform` for each of the `*n` members, never materialized (a
  // group may be huge).
  SmallVector<int64_t> sizes;
  std::optional<int64_t> uniform;
  if (std::optional<ArrayRef<int64_t>> given = getSizes()) {
    if (static_cast<int64_t>(given->size()) != *n)
      return emitOpError("'sizes' has ")
             << given->size() << " entries but the group has " << *n
             << " members";
    for (int64_t s : *given)
      if (s < 0)
        return emitOpError("'sizes' entries must be non-negative, got ") << s;
    int64_t local = in.getDimSize(dim);
    if (!ShapedType::isDynamic(local) &&
        llvm::any_of(*given, [&](int64_t s) { return s != local; }))
      return emitOpError("operand dim ")
             << dim << " is static but 'sizes' are not all " << local
             << "; make it dynamic";
    sizes.assign(given->begin(), given->end());
  } else if (!in.isDynamicDim(dim)) {
    uniform = in.getDimSize(dim);
  }
  if (*n == 1) {
    if (!in.isDynamicDim(dim) && !out.isDynamicDim(dim) &&
        in.getDimSize(dim) != out.getDimSize(dim))
      return emitOpError("a group of one member has no neighbours: result "
                         "dim ")
             << dim << " must equal the operand's";
    return success();
  }
  if (sizes.empty() && !uniform)
    return success();
  int64_t smallest = uniform ? *uniform : *llvm::min_element(sizes);
  if (std::max(low, high) > smallest)
    return emitOpError("halo (low = ")
           << low << ", high = " << high << ") is wider than the smallest "
           << "shard (" << smallest << " rows of dim " << dim
           << "): a window may reach only the neighbouring shard";
  // The first member's result has only a high halo, the last's only a low
  // one, the others both.
  int64_t first = (uniform ? *uniform : sizes.front()) + high;
  int64_t last = (uniform ? *uniform : sizes.back()) + low;
  bool same = first == last;
  if (uniform)
    same &= *n == 2 || *uniform + low + high == first;
  for (size_t j = 1; j + 1 < sizes.size(); ++j)
    same &= sizes[j] + low + high == first;
  int64_t res = out.getDimSize(dim);
  if (!ShapedType::isDynamic(res) && (!same || res != first))
    return emitOpError("result dim ")
           << dim << " is " << res
           << " but the members' results differ or have another size; "
              "make it dynamic";
  return success();
}

LogicalResult BroadcastOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyGroup(*this, getMeshAttr(), getAxes(), st);
  if (failed(n))
    return failure();
  int64_t root = static_cast<int64_t>(getRoot());
  if (root < 0 || root >= *n)
    return emitOpError("root ")
           << root << " is out of range for a group of " << *n;
  return success();
}

LogicalResult ChunkOp::verifySymbolUses(SymbolTableCollection &st) {
  FailureOr<int64_t> n = verifyOneDimCollective(*this, getMeshAttr(),
                                                 getAxes(), getDim(), st);
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  int64_t dim = getDim();
  int64_t stride = getStride();
  if (stride < 1)
    return emitOpError("stride must be positive, got ") << stride;
  if (getSizes() && stride != 1)
    return emitOpError("'sizes' and a stride cannot be combined");
  int64_t whole = in.getDimSize(dim), part = out.getDimSize(dim);
  if (getSizes())
    return verifyScaledDim(*this, dim, whole, part, *n, getSizes(), "operand",
                           "result");
  if (ShapedType::isDynamic(whole) || ShapedType::isDynamic(part))
    return success();
  FailureOr<int64_t> blocks = verifyBlocks(*this, *n, stride);
  if (failed(blocks))
    return failure();
  if (whole % *blocks != 0)
    return emitOpError("operand dim ")
           << dim << " of size " << whole << " does not divide into "
           << *blocks << " blocks; the result dim must be dynamic"
           << (stride != 1 ? " (and a strided chunk must divide)" : "");
  return verifyScaledDim(*this, dim, whole, part, *n, std::nullopt, "operand",
                         "result");
}

LogicalResult PartitionValueOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyGroup(*this, getMeshAttr(), getAxes(), st);
}

LogicalResult AxisIndexOp::verifySymbolUses(SymbolTableCollection &st) {
  return verifyGroup(*this, getMeshAttr(), getAxes(), st);
}

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

// #shardx.layout<...>, printed in full; a trailing `: type` belongs to the op.
static ParseResult parseLayout(OpAsmParser &parser, LayoutAttr &layout) {
  SMLoc loc = parser.getCurrentLocation();
  Attribute attr;
  if (parser.parseAttribute(attr, parser.getBuilder().getNoneType()))
    return failure();
  layout = dyn_cast<LayoutAttr>(attr);
  if (!layout)
    return parser.emitError(loc, "expected a #shardx.layout, got ") << attr;
  return success();
}

static void printLayout(OpAsmPrinter &p, Operation *, LayoutAttr layout) {
  p.printAttributeWithoutType(layout);
}

// [[0, 1], [1, 0]]
static ParseResult parsePairs(OpAsmParser &parser, DenseI64ArrayAttr &pairs) {
  SmallVector<int64_t> flat;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        int64_t s, t;
        if (parser.parseLSquare() || parser.parseInteger(s) ||
            parser.parseComma() || parser.parseInteger(t) ||
            parser.parseRSquare())
          return failure();
        flat.append({s, t});
        return success();
      }))
    return failure();
  pairs = parser.getBuilder().getDenseI64ArrayAttr(flat);
  return success();
}

static void printPairs(OpAsmPrinter &p, Operation *, DenseI64ArrayAttr pairs) {
  ArrayRef<int64_t> flat = pairs.asArrayRef();
  p << "[";
  for (size_t i = 0; i + 1 < flat.size(); i += 2)
    p << (i ? ", " : "") << "[" << flat[i] << ", " << flat[i + 1] << "]";
  p << "]";
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

bool mlir::shardx::isShardXComputation(Operation *op) {
  return isa<AttentionOp, AttentionDqOp, AttentionDkvOp>(op);
}

AttentionDims AttentionDims::get(Operation *op) {
  auto dims = [&](unsigned i) {
    return cast<RankedTensorType>(op->getOperand(i).getType()).getShape();
  };
  ArrayRef<int64_t> q = dims(0), k = dims(1), v = dims(2);
  AttentionDims d{q[0], q[1], k[1], ShapedType::kDynamic, q[2],
                  k[2], q[3], v[3]};
  if (!ShapedType::isDynamic(d.heads) && !ShapedType::isDynamic(d.kvHeads) &&
      d.kvHeads > 0)
    d.groups = d.heads / d.kvHeads;
  return d;
}

namespace {
/// Checks a tensor of an attention op against its expected dims (kDynamic
/// matches anything) and the element type.
struct AttentionChecker {
  Operation *op;
  Type element;

  LogicalResult check(Value v, StringRef name, ArrayRef<int64_t> expected) {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getElementType() != element)
      return op->emitOpError("'")
             << name << "' has element type " << type.getElementType()
             << " but 'q' has " << element;
    if (type.getRank() != static_cast<int64_t>(expected.size()))
      return op->emitOpError("'")
             << name << "' must have rank " << expected.size() << ", got "
             << type;
    for (auto [i, want] : llvm::enumerate(expected)) {
      int64_t got = type.getDimSize(i);
      if (!ShapedType::isDynamic(want) && !ShapedType::isDynamic(got) &&
          want != got)
        return op->emitOpError("'")
               << name << "' dim " << i << " is " << got << " but must be "
               << want << " (" << type << ")";
    }
    return success();
  }
};
} // namespace

/// The checks the three attention ops share: q, k, v, the positions and the
/// scale. Returns the checker for the op's other tensors.
static FailureOr<AttentionChecker>
verifyAttentionInputs(Operation *op, Value q, Value k, Value v, Value qpos,
                      Value kpos, double scale) {
  for (auto [value, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}})
    if (cast<RankedTensorType>(value.getType()).getRank() != 4)
      return op->emitOpError("'")
             << name << "' must be [batch, heads, sequence, width], got "
             << value.getType();
  Type element = cast<RankedTensorType>(q.getType()).getElementType();
  if (!element.isF32() && !element.isF64())
    return op->emitOpError("computes in f32 or f64, got ") << element;
  AttentionChecker c{op, element};
  AttentionDims d = AttentionDims::get(op);
  if (failed(c.check(k, "k",
                     {d.batch, ShapedType::kDynamic, ShapedType::kDynamic,
                      d.width})) ||
      failed(c.check(v, "v", {d.batch, d.kvHeads, d.keys, d.valueWidth})))
    return failure();
  if (!ShapedType::isDynamic(d.heads) && !ShapedType::isDynamic(d.kvHeads) &&
      (d.kvHeads == 0 ? d.heads != 0 : d.heads % d.kvHeads != 0))
    return op->emitOpError("'q' has ")
           << d.heads << " heads, not a multiple of the " << d.kvHeads
           << " heads of 'k' and 'v'";
  if (static_cast<bool>(qpos) != static_cast<bool>(kpos))
    return op->emitOpError("needs both positions or neither");
  for (auto [pos, name, size] :
       {std::tuple{qpos, "qpos", d.queries}, {kpos, "kpos", d.keys}}) {
    if (!pos)
      continue;
    auto type = cast<RankedTensorType>(pos.getType());
    if (!type.getElementType().isSignlessInteger() || type.getRank() != 1)
      return op->emitOpError("'")
             << name << "' must be a rank-1 tensor of integers, got " << type;
    if (!type.isDynamicDim(0) && !ShapedType::isDynamic(size) &&
        type.getDimSize(0) != size)
      return op->emitOpError("'")
             << name << "' has " << type.getDimSize(0) << " positions for "
             << size;
  }
  if (qpos && cast<RankedTensorType>(qpos.getType()).getElementType() !=
                  cast<RankedTensorType>(kpos.getType()).getElementType())
    return op->emitOpError("'qpos' and 'kpos' must have one element type");
  if (!std::isfinite(scale))
    return op->emitOpError("'scale' must be finite, got ") << scale;
  if (auto products = op->getAttrOfType<TypeAttr>("products")) {
    Type t = products.getValue();
    if (!t.isBF16() && !t.isF16())
      return op->emitOpError("'products' must be bf16 or f16, got ") << t;
    if (!element.isF32())
      return op->emitOpError("with 'products' computes in f32, got ")
             << element;
  }
  return c;
}

LogicalResult AttentionOp::verify() {
  FailureOr<AttentionChecker> c =
      verifyAttentionInputs(*this, getQ(), getK(), getV(), getQpos(),
                            getKpos(), getScale().convertToDouble());
  if (failed(c))
    return failure();
  AttentionDims d = AttentionDims::get(*this);
  return success(
      succeeded(c->check(getOut(), "out",
                         {d.batch, d.heads, d.queries, d.valueWidth})) &&
      succeeded(c->check(getLse(), "lse", {d.batch, d.heads, d.queries})));
}

/// The backward ops' forward tensors: out, lse and dout.
template <typename OpT>
static FailureOr<AttentionChecker> verifyAttentionGrad(OpT op) {
  FailureOr<AttentionChecker> c = verifyAttentionInputs(
      op, op.getQ(), op.getK(), op.getV(), op.getQpos(), op.getKpos(),
      op.getScale().convertToDouble());
  if (failed(c))
    return failure();
  AttentionDims d = AttentionDims::get(op);
  SmallVector<int64_t> rows = {d.batch, d.heads, d.queries, d.valueWidth};
  if (failed(c->check(op.getOut(), "out", rows)) ||
      failed(c->check(op.getLse(), "lse", {d.batch, d.heads, d.queries})) ||
      failed(c->check(op.getDout(), "dout", rows)))
    return failure();
  return c;
}

/// `result` has the type of `like` (dims that are static agree).
static LogicalResult checkLike(AttentionChecker &c, Value result,
                               StringRef name, Value like) {
  return c.check(result, name,
                 cast<RankedTensorType>(like.getType()).getShape());
}

LogicalResult AttentionDqOp::verify() {
  FailureOr<AttentionChecker> c = verifyAttentionGrad(*this);
  return success(succeeded(c) && succeeded(checkLike(*c, getDq(), "dq", getQ())));
}

LogicalResult AttentionDkvOp::verify() {
  FailureOr<AttentionChecker> c = verifyAttentionGrad(*this);
  return success(succeeded(c) &&
                 succeeded(checkLike(*c, getDk(), "dk", getK())) &&
                 succeeded(checkLike(*c, getDv(), "dv", getV())));
}

#define GET_OP_CLASSES
#include "shardx/Dialect/ShardX/IR/ShardXOps.cpp.inc"
