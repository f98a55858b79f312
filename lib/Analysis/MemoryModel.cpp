//===- MemoryModel.cpp - Per-rank memory of a local program ---------------===//
//
// Part of ShardX.
//
// Tensor programs: each value gets a buffer, shares one (a view, a result
// written into its destination, a wait's result) or none (a constant, an
// empty tensor, an elementwise result fused into its consumer); a buffer
// lives from the op that makes it to the last op that reads it or a view
// of it. The rules follow the CPU code generation (docs/Memory.md lists
// them with what they leave out). Buffer programs: each memref.alloc lives
// until its memref.dealloc. MemoryModelPrint.cpp shows a profile (text,
// JSON).
//
//===----------------------------------------------------------------------===//

#include "shardx/Analysis/MemoryModel.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/ShapedOpInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace mlir::shardx;

namespace {

//===----------------------------------------------------------------------===//
// Sizes, phases and roles
//===----------------------------------------------------------------------===//

/// Bytes of one element of `t` (i1 and other sub-byte types: one byte, as
/// the generated code stores them).
int64_t elementBytes(Type t) {
  if (auto c = dyn_cast<ComplexType>(t))
    return 2 * elementBytes(c.getElementType());
  if (t.isIndex())
    return 8;
  if (t.isIntOrFloat())
    return std::max<int64_t>(1, (t.getIntOrFloatBitWidth() + 7) / 8);
  return 0;
}

/// Bytes of a tensor or memref type with a static shape, else -1.
int64_t byteSize(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !isa<TensorType, BaseMemRefType>(t))
    return -1;
  if (!shaped.hasStaticShape())
    return -1;
  return shaped.getNumElements() * elementBytes(shaped.getElementType());
}

MemoryRole temporaryRole(Operation *op) {
  StringRef phase = getTrainStepPhase(op->getLoc());
  if (phase == "backward")
    return MemoryRole::Gradient;
  if (phase == "optimizer")
    return MemoryRole::OptimizerTemp;
  return MemoryRole::Activation;
}

bool isCollective(Operation *op) {
  return isa<AllGatherOp, AllGatherStartOp, ReduceScatterOp,
             ReduceScatterStartOp, AllReduceOp, AllReduceStartOp, AllToAllOp,
             PermuteOp, BroadcastOp, ExchangeOp, PartitionValueOp>(op);
}

bool isAsyncCollective(Operation *op) {
  return isa<AllGatherStartOp, ReduceScatterStartOp, AllReduceStartOp>(op);
}

/// Argument roles: `torch.state` is optimizer state; the arguments before
/// the first state are parameters, after the last one inputs. Without
/// state, every argument is an input.
SmallVector<MemoryRole> argumentRoles(func::FuncOp fn) {
  unsigned n = fn.getNumArguments();
  SmallVector<bool> state(n, false);
  int firstState = -1, lastState = -1;
  for (unsigned i = 0; i < n; ++i)
    if (fn.getArgAttr(i, "torch.state")) {
      state[i] = true;
      if (firstState < 0)
        firstState = i;
      lastState = i;
    }
  SmallVector<MemoryRole> roles(n, MemoryRole::Input);
  for (unsigned i = 0; i < n; ++i) {
    if (state[i])
      roles[i] = MemoryRole::OptimizerState;
    else if (firstState >= 0 && static_cast<int>(i) < firstState)
      roles[i] = MemoryRole::Parameter;
    else if (firstState >= 0 && static_cast<int>(i) < lastState)
      roles[i] = MemoryRole::OptimizerState;
  }
  return roles;
}

//===----------------------------------------------------------------------===//
// Tensor programs
//===----------------------------------------------------------------------===//

/// Ops whose result is a view of their first tensor operand (bufferized
/// as a subview, a reshape or a cast; a wait's result is its start's
/// buffer; a chunk keeps its slice of the input).
bool isView(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
             tensor::BitcastOp, tensor::ReshapeOp, tensor::ExtractSliceOp,
             WaitOp, ChunkOp, AnnotateOp, bufferization::ToTensorOp>(op);
}

/// A contraction (a GEMM-like op): shardx-fuse-tensor-ops fuses no
/// elementwise producer into it (transposes become views of its operands).
bool isContraction(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && (isa<linalg::MatmulOp, linalg::BatchMatmulOp>(op) ||
                      linalg::isaContractionOpInterface(linalgOp));
}

/// An op that moves elements only (a transpose, a broadcast, a copy).
bool isDataMovement(Operation *op) {
  if (isa<linalg::TransposeOp, linalg::BroadcastOp, linalg::CopyOp>(op))
    return true;
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1 || generic.getNumReductionLoops() != 0)
    return false;
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  return yield.getNumOperands() == 1 &&
         yield.getOperand(0) == generic.getBody()->getArgument(0);
}

bool isTranspose(Operation *op) {
  if (isa<linalg::TransposeOp>(op))
    return true;
  auto generic = dyn_cast<linalg::GenericOp>(op);
  return generic && isDataMovement(op) &&
         generic.getIndexingMapsArray()[0].isPermutation();
}

/// An elementwise arith/math op on tensors (made a generic whose
/// destination is its first operand of the result's type,
/// convert-elementwise-to-linalg).
bool isTensorElementwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
         isa<RankedTensorType>(op->getResult(0).getType());
}

/// A loop nest with parallel loops only that shardx-fuse-tensor-ops may
/// fuse into its consumer (not a fill: fusion takes producers of inputs).
bool isFusableProducer(Operation *op) {
  if (isTensorElementwise(op))
    return true;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && !isa<linalg::FillOp>(op) &&
         linalgOp->getNumResults() == 1 && linalgOp.hasPureTensorSemantics() &&
         linalgOp.getNumLoops() == linalgOp.getNumParallelLoops();
}

/// Whether `use` reads its value as a loop-nest input that fusion can take.
bool isFusableUse(OpOperand &use) {
  Operation *owner = use.getOwner();
  if (isTensorElementwise(owner))
    return true;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(owner);
  return linalgOp && linalgOp.hasPureTensorSemantics() &&
         linalgOp.isDpsInput(&use);
}

/// Elementwise producers fused into their consumers (shouldFuse in
/// CpuOptimize.cpp): a transpose into any loop-nest consumer; else not into
/// a contraction; a data movement, or a producer cheaper to compute again
/// (isCheaperToRecompute), into every consumer, another producer only into
/// its one consumer.
bool isFused(Operation *op) {
  if (!isFusableProducer(op))
    return false;
  Value result = op->getResult(0);
  if (result.use_empty())
    return false;
  for (OpOperand &use : result.getUses()) {
    if (!isFusableUse(use))
      return false;
    if (!isTranspose(op) && isContraction(use.getOwner()))
      return false;
  }
  return isDataMovement(op) || result.hasOneUse() || isCheaperToRecompute(op);
}

/// The destination `op` writes result `r` into (its init, or for an
/// elementwise arith/math op its first operand of the result's type).
Value destinationOf(Operation *op, unsigned r) {
  if (auto dps = dyn_cast<DestinationStyleOpInterface>(op))
    if (r < dps.getNumDpsInits())
      return dps.getDpsInitOperand(r)->get();
  if (isTensorElementwise(op))
    for (Value operand : op->getOperands())
      if (operand.getType() == op->getResult(r).getType())
        return operand;
  return nullptr;
}

/// The largest size over ranks of each dynamic dim of a local program's
/// values. An uneven shard's size differs from rank to rank: the local
/// program computes it from the rank's coordinates (`shardx.axis_index`,
/// or after the conversion to runtime calls `shardx_rt_cg_axis_index`,
/// which carries its mesh shape and axes), and takes an argument, or an
/// exchange's result, as its layout lays it out. A dim's size is followed
/// through the ops that keep it (a loop nest's result has its init's sizes,
/// an empty tensor or an allocation takes them as operands, a slice as its
/// sizes) and computed at every coordinate of the mesh; the largest is the
/// bound. Where it cannot be followed (another mesh, an op not listed),
/// there is no bound.
class SizeBounds {
public:
  /// `caller` and `call`: `fn` modeled as called there (a private
  /// function, an outlined layer): its arguments have the sizes of the
  /// call's operands on each rank, and the mesh is the caller's.
  explicit SizeBounds(func::FuncOp fn, SizeBounds *caller = nullptr,
                      func::CallOp call = {})
      : fn(fn), caller(caller), call(call) {
    auto sig = fn->getAttrOfType<DictionaryAttr>(
        ShardXDialect::getSignatureAttrName());
    if (!sig && caller) {
      meshName = caller->meshName;
      meshShape = caller->meshShape;
      coords = caller->coords;
      return;
    }
    if (!sig)
      return;
    auto meshRef = sig.getAs<FlatSymbolRefAttr>("mesh");
    argTypes = sig.getAs<ArrayAttr>("arg_types");
    argLayouts = sig.getAs<ArrayAttr>("arg_layouts");
    if (!meshRef)
      return;
    meshName = meshRef.getValue();
    if (auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(fn, meshRef)) {
      meshShape.assign(mesh.getShape().begin(), mesh.getShape().end());
    } else {
      // A program converted to runtime calls has no mesh declarations left;
      // its calls of rank-dependent values say the mesh's shape.
      fn.walk([&](func::CallOp call) {
        auto value = call->getAttrOfType<DictionaryAttr>(kRankValueAttr);
        if (!value)
          return WalkResult::advance();
        if (auto shape = value.getAs<DenseI64ArrayAttr>("mesh_shape"))
          meshShape.assign(shape.asArrayRef().begin(),
                           shape.asArrayRef().end());
        return WalkResult::interrupt();
      });
    }
    std::optional<int64_t> ranks = countMeshDevices(meshShape);
    if (ranks && *ranks <= kRankValueMaxRanks)
      coords = allMeshCoords(meshShape);
  }

  /// The bytes of `v` with each dynamic dim at its largest over ranks; -1
  /// where some dim has no bound (or `v` is not a tensor or buffer).
  int64_t bytes(Value v) {
    int64_t known = byteSize(v.getType());
    if (known >= 0 || coords.empty())
      return known;
    auto type = dyn_cast<ShapedType>(v.getType());
    if (!type || !type.hasRank())
      return -1;
    int64_t elements = 1;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      std::optional<int64_t> size = largest(v, d);
      if (!size)
        return -1;
      elements *= *size;
    }
    return elements * elementBytes(type.getElementType());
  }

  /// The bounds of the callee of `callOp` (a function of the module with a
  /// body) as called there; null for another call.
  SizeBounds *calleeBounds(func::CallOp callOp) {
    auto &slot = callees[callOp];
    if (!slot) {
      auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          callOp, callOp.getCalleeAttr());
      if (!callee || callee.isExternal() || callee.getBody().empty() ||
          callee == fn)
        return nullptr;
      slot = std::make_unique<SizeBounds>(callee, this, callOp);
    }
    return slot.get();
  }

private:
  using Coords = std::vector<int64_t>;

  /// The largest size of dim `d` of `v` over the mesh's ranks.
  std::optional<int64_t> largest(Value v, int64_t d) {
    auto type = cast<ShapedType>(v.getType());
    if (!type.isDynamicDim(d))
      return type.getDimSize(d);
    auto [it, inserted] = bounds.try_emplace({v, d}, std::nullopt);
    if (!inserted)
      return it->second;
    std::optional<int64_t> best = 0;
    for (const Coords &at : coords) {
      std::optional<int64_t> size = sizeAt(v, d, at, 0);
      if (!size)
        return bounds[{v, d}] = std::nullopt;
      best = std::max(*best, *size);
    }
    return bounds[{v, d}] = best;
  }

  /// The local size of dim `d` of an argument or an exchange's result laid
  /// out as `layout` (of the mesh), of global shape `shape`, at `at`.
  std::optional<int64_t> localSize(Attribute layout, ArrayRef<int64_t> shape,
                                   int64_t d, const Coords &at) {
    auto attr = dyn_cast_or_null<LayoutAttr>(layout);
    if (!attr || attr.getMesh().getValue() != meshName ||
        d >= static_cast<int64_t>(shape.size()) ||
        !attr.verifyFor(meshShape, RankedTensorType::get(
                                       shape, IndexType::get(fn.getContext())))
             .empty())
      return std::nullopt;
    return attr.getLayout()
        .getLocalShard(meshShape, Coords(shape.begin(), shape.end()), at)
        .shape[d];
  }

  /// The size of dim `d` of `v` (a tensor or a buffer) on the rank at `at`.
  std::optional<int64_t> sizeAt(Value v, int64_t d, const Coords &at,
                                unsigned depth) {
    auto type = dyn_cast<ShapedType>(v.getType());
    if (!type || !type.hasRank() || d >= type.getRank() || depth > 64)
      return std::nullopt;
    if (!type.isDynamicDim(d))
      return type.getDimSize(d);
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      unsigned i = arg.getArgNumber();
      if (Value operand = callOperand(arg))
        return caller->sizeAt(operand, d, at, depth + 1);
      if (arg.getOwner() != &fn.getBody().front() || !argTypes || !argLayouts ||
          i >= argTypes.size() || i >= argLayouts.size())
        return std::nullopt;
      auto global = dyn_cast<TypeAttr>(argTypes[i]);
      auto ranked =
          global ? dyn_cast<RankedTensorType>(global.getValue()) : nullptr;
      if (!ranked || !ranked.hasStaticShape())
        return std::nullopt;
      return localSize(argLayouts[i], ranked.getShape(), d, at);
    }
    Operation *op = v.getDefiningOp();
    unsigned r = cast<OpResult>(v).getResultNumber();
    auto sizeOf = [&](OpFoldResult size) -> std::optional<int64_t> {
      if (auto attr = dyn_cast<Attribute>(size))
        return cast<IntegerAttr>(attr).getInt();
      return evaluate(cast<Value>(size), at, depth + 1);
    };
    if (auto empty = dyn_cast<tensor::EmptyOp>(op))
      return evaluate(empty.getDynamicSize(d), at, depth + 1);
    if (auto alloc = dyn_cast<memref::AllocOp>(op))
      return evaluate(
          alloc.getDynamicSizes()[alloc.getType().getDynamicDimIndex(d)], at,
          depth + 1);
    if (auto exchange = dyn_cast<ExchangeOp>(op))
      return localSize(exchange.getTarget(), exchange.getShape(), d, at);
    if (auto callOp = dyn_cast<func::CallOp>(op))
      if (SizeBounds *callee = calleeBounds(callOp))
        if (auto ret = dyn_cast<func::ReturnOp>(
                callee->fn.getBody().back().getTerminator());
            ret && r < ret.getNumOperands())
          return callee->sizeAt(ret.getOperand(r), d, at, depth + 1);
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
      return slice.getSourceType().getRank() == type.getRank()
                 ? sizeOf(slice.getMixedSizes()[d])
                 : std::nullopt; // rank-reducing
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
      return sizeOf(expand.getMixedOutputShape()[d]);
    if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op)) {
      int64_t product = 1;
      for (int64_t s : collapse.getReassociationIndices()[d]) {
        std::optional<int64_t> size =
            sizeAt(collapse.getSrc(), s, at, depth + 1);
        if (!size)
          return std::nullopt;
        product *= *size;
      }
      return product;
    }
    // Ops whose result has their first operand's shape: casts, waits, and
    // the collectives that keep the shape (all-reduce, permute, broadcast).
    if (isa<tensor::CastOp, memref::CastOp, WaitOp, AnnotateOp, AllReduceOp,
            AllReduceStartOp, PermuteOp, BroadcastOp>(op) ||
        op->hasTrait<OpTrait::SameOperandsAndResultShape>())
      return sizeAt(op->getOperand(0), d, at, depth + 1);
    if (Value dest = destinationOf(op, r))
      return sizeAt(dest, d, at, depth + 1);
    return std::nullopt;
  }

  /// The value of the index or integer `v` on the rank at `at`.
  std::optional<int64_t> evaluate(Value v, const Coords &at, unsigned depth) {
    if (!v || depth > 64)
      return std::nullopt;
    // A chain of selects (an explicit uneven shard's size per member of its
    // group, `LocalPieces::emitPiece`: as long as the group) is followed in
    // a loop, not one level deeper per member.
    while (auto select = v.getDefiningOp<arith::SelectOp>()) {
      std::optional<int64_t> c = evaluate(select.getCondition(), at, depth + 1);
      if (!c)
        return std::nullopt;
      v = *c ? select.getTrueValue() : select.getFalseValue();
    }
    APInt constant;
    if (matchPattern(v, m_ConstantInt(&constant)))
      // An i1 `true` is 1, as a cmpi's result is here.
      return constant.getBitWidth() == 1 ? constant.getZExtValue()
                                         : constant.getSExtValue();
    Operation *op = v.getDefiningOp();
    if (!op) {
      if (Value operand = callOperand(cast<BlockArgument>(v)))
        return caller->evaluate(operand, at, depth + 1);
      return std::nullopt;
    }
    auto inGroup = [&](ArrayRef<int64_t> axes) -> std::optional<int64_t> {
      for (int64_t axis : axes)
        if (axis < 0 || axis >= static_cast<int64_t>(meshShape.size()))
          return std::nullopt;
      return linearizeCoords(meshShape, Coords(axes.begin(), axes.end()), at);
    };
    if (auto index = dyn_cast<AxisIndexOp>(op))
      return index.getMesh() == meshName ? inGroup(index.getAxes())
                                         : std::nullopt;
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto value = call->getAttrOfType<DictionaryAttr>(kRankValueAttr);
      auto shape =
          value ? value.getAs<DenseI64ArrayAttr>("mesh_shape") : nullptr;
      if (!shape || shape.asArrayRef() != ArrayRef<int64_t>(meshShape))
        return std::nullopt;
      if (auto axes = value.getAs<DenseI64ArrayAttr>("axes"))
        return inGroup(axes.asArrayRef());
      auto values = value.getAs<DenseI64ArrayAttr>("values");
      // Row-major over every axis, as allMeshCoords orders the ranks.
      Coords axes(meshShape.size());
      std::iota(axes.begin(), axes.end(), 0);
      int64_t rank = linearizeCoords(meshShape, axes, at);
      if (!values || rank >= static_cast<int64_t>(values.size()))
        return std::nullopt;
      return values[rank];
    }
    // tensor.dim, memref.dim.
    if (auto dim = dyn_cast<ShapedDimOpInterface>(op)) {
      std::optional<int64_t> which = getConstantIntValue(dim.getDimension());
      return which ? sizeAt(dim.getShapedValue(), *which, at, depth + 1)
                   : std::nullopt;
    }
    if (isa<arith::IndexCastOp, arith::ExtSIOp>(op))
      return evaluate(op->getOperand(0), at, depth + 1);
    if (isa<arith::IndexCastUIOp, arith::ExtUIOp>(op)) {
      // Zero-extended: a negative value of a narrower type is its unsigned
      // value (an i1 is 0 or 1 already).
      std::optional<int64_t> x = evaluate(op->getOperand(0), at, depth + 1);
      Type from = getElementTypeOrSelf(op->getOperand(0).getType());
      unsigned width = from.isIntOrFloat() ? from.getIntOrFloatBitWidth() : 64;
      if (x && *x < 0 && width > 1 && width < 64)
        return *x + (int64_t(1) << width);
      return x;
    }
    if (op->getNumOperands() != 2)
      return std::nullopt;
    std::optional<int64_t> x = evaluate(op->getOperand(0), at, depth + 1);
    std::optional<int64_t> y = evaluate(op->getOperand(1), at, depth + 1);
    if (!x || !y)
      return std::nullopt;
    // Sizes and coordinates are small and non-negative: the unsigned ops
    // agree with the signed ones on them.
    uint64_t ux = *x, uy = *y;
    return llvm::TypeSwitch<Operation *, std::optional<int64_t>>(op)
        .Case([&](arith::AddIOp) -> std::optional<int64_t> {
          return llvm::checkedAdd(*x, *y);
        })
        .Case([&](arith::SubIOp) -> std::optional<int64_t> {
          return llvm::checkedSub(*x, *y);
        })
        .Case([&](arith::MulIOp) -> std::optional<int64_t> {
          return llvm::checkedMul(*x, *y);
        })
        .Case<arith::MinSIOp>(
            [&](auto) -> std::optional<int64_t> { return std::min(*x, *y); })
        .Case<arith::MaxSIOp>(
            [&](auto) -> std::optional<int64_t> { return std::max(*x, *y); })
        .Case<arith::MinUIOp>([&](auto) -> std::optional<int64_t> {
          return static_cast<int64_t>(std::min(ux, uy));
        })
        .Case<arith::MaxUIOp>([&](auto) -> std::optional<int64_t> {
          return static_cast<int64_t>(std::max(ux, uy));
        })
        .Case<arith::DivSIOp, arith::DivUIOp, arith::FloorDivSIOp>(
            [&](auto) -> std::optional<int64_t> {
              if (*x < 0 || *y <= 0)
                return std::nullopt;
              return *x / *y;
            })
        .Case<arith::CeilDivSIOp, arith::CeilDivUIOp>(
            [&](auto) -> std::optional<int64_t> {
              if (*x < 0 || *y <= 0)
                return std::nullopt;
              return llvm::divideCeil(*x, *y);
            })
        .Case<arith::RemSIOp, arith::RemUIOp>(
            [&](auto) -> std::optional<int64_t> {
              if (*x < 0 || *y <= 0)
                return std::nullopt;
              return *x % *y;
            })
        .Case([&](arith::CmpIOp cmp) -> std::optional<int64_t> {
          return arith::applyCmpPredicate(cmp.getPredicate(),
                                          APInt(64, *x, /*isSigned=*/true),
                                          APInt(64, *y, /*isSigned=*/true));
        })
        .Default(
            [](Operation *) -> std::optional<int64_t> { return std::nullopt; });
  }

  func::FuncOp fn;
  StringRef meshName;
  Coords meshShape;
  /// The call's operand that `arg` (an argument of `fn`) is, if `fn` is
  /// modeled as called.
  Value callOperand(BlockArgument arg) {
    if (!caller || arg.getOwner() != &fn.getBody().front() ||
        arg.getArgNumber() >= call.getNumOperands())
      return nullptr;
    return call.getOperand(arg.getArgNumber());
  }

  std::vector<Coords> coords;
  ArrayAttr argTypes, argLayouts;
  DenseMap<std::pair<Value, int64_t>, std::optional<int64_t>> bounds;
  SizeBounds *caller = nullptr;
  func::CallOp call;
  DenseMap<Operation *, std::unique_ptr<SizeBounds>> callees;
};

MemoryProfile profileAt(func::FuncOp fn, SizeBounds *sizes);

/// For a call of a function with a body in the module (a region of a
/// regionally traced step, outlined layers): the bytes the callee allocates
/// beyond the buffers it returns, at its own peak (its model, recursively).
/// The caller holds them while the call runs; the returned buffers are the
/// caller's from the call on. -1 for any other op (an external callee, a
/// runtime call: nothing of its own is modeled).
/// The callee's sizes are those of this call (`caller`'s bounds of the
/// callee as called there, which also size the call's results): its
/// arguments' dynamic dims are the call operands', and the values it cannot
/// size add to `unsized`, the caller's count.
int64_t calleeTransientBytes(Operation *op, SizeBounds &caller,
                             int64_t &unsized) {
  auto call = dyn_cast<func::CallOp>(op);
  if (!call)
    return -1;
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      op, call.getCalleeAttr());
  if (!callee || callee.isExternal() || callee.getBody().empty())
    return -1;
  static thread_local DenseSet<Operation *> active; // recursion: 0 bytes
  if (!active.insert(callee).second)
    return 0;
  MemoryProfile profile = profileAt(callee, caller.calleeBounds(call));
  active.erase(callee);
  unsized += profile.unsizedValues;
  int64_t returned = 0;
  for (const MemoryBuffer &b : profile.buffers)
    if (!b.argument && b.role == MemoryRole::Result)
      returned += b.bytes;
  return std::max<int64_t>(0, profile.allocatedPeakBytes - returned);
}

/// The tensor-level model.
class TensorModel {
public:
  TensorModel(func::FuncOp fn, MemoryProfile &profile, SizeBounds &sizes)
      : fn(fn), profile(profile), sizes(sizes) {}

  void run() {
    Block &entry = fn.getBody().front();
    for (Operation &op : entry)
      profile.ops.push_back(&op);
    for (auto [i, op] : llvm::enumerate(profile.ops))
      index[op] = i;
    findFused();
    computeReadAt();
    addArguments();
    for (auto [i, op] : llvm::enumerate(profile.ops))
      visit(op, i);
  }

private:
  /// The top-level op of `op`'s block ancestry in the entry block.
  int64_t topIndex(Operation *op) {
    Block *entry = &fn.getBody().front();
    while (op && op->getBlock() != entry)
      op = op->getParentOp();
    auto it = index.find(op);
    return it == index.end() ? -1 : it->second;
  }

  void findFused() {
    for (Operation *op : profile.ops)
      if (isFused(op))
        fused.insert(op);
    // The last op (not fused away) that writes into each empty tensor and
    // each fill of one.
    for (Operation *op : profile.ops) {
      if (fused.count(op))
        continue;
      for (unsigned r = 0; r < op->getNumResults(); ++r)
        if (Value dest = destinationOf(op, r))
          if (Operation *fresh = freshTensor(dest)) {
            lastWriter[fresh] = op;
            ++writers[fresh];
          }
    }
  }

  /// The op making `v` if it is a fresh tensor ops write into: a
  /// tensor.empty, or a linalg.fill of one.
  static Operation *freshTensor(Value v) {
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<tensor::EmptyOp>(def))
      return def;
    if (auto fill = dyn_cast_or_null<linalg::FillOp>(def))
      if (fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>())
        return def;
    return nullptr;
  }

  /// A fill of an empty tensor that several ops write into: each gets a
  /// copy of the fill (shardx-split-shared-empty-tensors), so the fill
  /// itself is no buffer.
  bool isSharedFill(Operation *op) {
    return isa<linalg::FillOp>(op) && freshTensor(op->getResult(0)) &&
           writers.lookup(op) > 1;
  }

  /// Where each top-level op's reads happen: its own index, or for a fused
  /// op the latest of its consumers' (they read its inputs instead).
  void computeReadAt() {
    readAt.assign(profile.ops.size(), 0);
    for (int64_t i = profile.ops.size() - 1; i >= 0; --i) {
      Operation *op = profile.ops[i];
      readAt[i] = i;
      if (!fused.count(op))
        continue;
      for (Operation *user : op->getResult(0).getUsers())
        if (int64_t u = topIndex(user); u >= 0)
          readAt[i] = std::max(readAt[i], readAt[u]);
    }
  }

  /// The last op that reads `v` (-1: none).
  int64_t lastRead(Value v) {
    int64_t last = -1;
    for (Operation *user : v.getUsers())
      if (int64_t u = topIndex(user); u >= 0)
        last = std::max(last, readAt[u]);
    return last;
  }

  int64_t newBuffer(int64_t bytes, MemoryRole role, int64_t first,
                    std::string origin) {
    MemoryBuffer b;
    b.bytes = bytes;
    b.role = role;
    b.first = first;
    b.last = first;
    b.origin = std::move(origin);
    profile.buffers.push_back(std::move(b));
    return profile.buffers.size() - 1;
  }

  /// Makes `v` a member of buffer `b` (extends its life to `v`'s reads).
  void join(Value v, int64_t b) {
    bufferOf[v] = b;
    if (b < 0)
      return;
    MemoryBuffer &buf = profile.buffers[b];
    buf.last = std::max(buf.last, lastRead(v));
  }

  void addArguments() {
    SmallVector<MemoryRole> roles = argumentRoles(fn);
    for (BlockArgument arg : fn.getArguments()) {
      int64_t bytes = sizes.bytes(arg);
      if (bytes < 0) {
        if (isa<ShapedType>(arg.getType()))
          ++profile.unsizedValues;
        bytes = 0;
      }
      int64_t b = newBuffer(bytes, roles[arg.getArgNumber()], 0,
                            "argument " + std::to_string(arg.getArgNumber()));
      profile.buffers[b].argument = true;
      profile.buffers[b].last = std::max<int64_t>(0, profile.ops.size() - 1);
      readOnly.insert(b);
      bufferOf[arg] = b;
    }
  }

  /// The buffer of `v`: -1 for none (a constant, an empty tensor, a fused
  /// value).
  int64_t bufferFor(Value v) {
    auto it = bufferOf.find(v);
    return it == bufferOf.end() ? -1 : it->second;
  }

  /// A fresh buffer for result `r` of `op` at `i`.
  void allocate(Operation *op, Value r, int64_t i, MemoryRole role) {
    int64_t bytes = sizes.bytes(r);
    if (bytes < 0) {
      ++profile.unsizedValues;
      bytes = 0;
    }
    join(r, newBuffer(bytes, role, i, op->getName().getStringRef().str()));
    profile.buffers[bufferFor(r)].op = op;
  }

  /// A transient buffer of `bytes` over ops [i, last].
  void transient(Operation *op, int64_t bytes, int64_t i, int64_t last) {
    if (bytes <= 0)
      return;
    int64_t b = newBuffer(bytes, MemoryRole::Collective, i,
                          op->getName().getStringRef().str() + " staging");
    profile.buffers[b].last = std::max(i, last);
  }

  void visit(Operation *op, int64_t i) {
    if (isa<func::ReturnOp>(op)) {
      for (Value v : op->getOperands()) {
        int64_t b = bufferFor(v);
        // A returned argument, constant or buffer returned twice is copied
        // (shardx-deallocate-buffers): a new buffer at the return.
        if (b < 0 || readOnly.count(b) || returned.count(b)) {
          int64_t bytes = std::max<int64_t>(0, sizes.bytes(v));
          b = newBuffer(bytes, MemoryRole::Result, i, "copy of a result");
        }
        returned.insert(b);
        profile.buffers[b].role = MemoryRole::Result;
        profile.buffers[b].last = profile.ops.size() - 1;
      }
      return;
    }
    if (fused.count(op))
      return; // no buffer: its consumer computes it in its loop nest
    if (int64_t bytes = calleeTransientBytes(op, sizes, profile.unsizedValues);
        bytes > 0)
      newBuffer(bytes, temporaryRole(op), i, "inside the call");
    for (auto [r, result] : llvm::enumerate(op->getResults())) {
      if (!isa<TensorType>(result.getType()))
        continue;
      if (isa<arith::ConstantOp, tensor::EmptyOp>(op)) {
        // A global, or nothing until an op writes into it.
        if (isa<arith::ConstantOp>(op)) {
          int64_t b = newBuffer(0, MemoryRole::Activation, i, "constant");
          readOnly.insert(b);
          join(result, b);
        } else {
          bufferOf[result] = -1;
        }
        continue;
      }
      if (isView(op) && op->getNumOperands()) {
        join(result, bufferFor(op->getOperand(0)));
        continue;
      }
      MemoryRole role = temporaryRole(op);
      if (isCollective(op)) {
        visitCollective(op, result, i);
        continue;
      }
      // A result the next op is a collective of (a packed bucket).
      if (llvm::any_of(result.getUsers(), isCollective) &&
          isa<tensor::InsertSliceOp, tensor::ConcatOp>(op))
        role = MemoryRole::Collective;
      if (isSharedFill(op)) {
        bufferOf[result] = -1;
        continue;
      }
      if (Value dest = destinationOf(op, r)) {
        int64_t b = bufferFor(dest);
        if (b >= 0 && !readOnly.count(b) && !returned.count(b) &&
            profile.buffers[b].last <= i) {
          // In place: nothing reads the destination after this op.
          if (role == MemoryRole::Collective)
            profile.buffers[b].role = role;
          join(result, b);
          continue;
        }
      }
      allocate(op, result, i, role);
      // A result written into a fresh tensor (an empty one, or a fill of
      // one that several ops write into) is allocated where that tensor is
      // made when the op is its last writer (the use
      // shardx-split-shared-empty-tensors keeps; one-shot-bufferize
      // allocates at the tensor.empty), else right before the op (the
      // others get a copy of the tensor there).
      if (Value dest = destinationOf(op, r))
        if (Operation *fresh = freshTensor(dest);
            fresh && lastWriter.lookup(fresh) == op) {
          MemoryBuffer &buf = profile.buffers[bufferFor(result)];
          buf.first = std::min<int64_t>(buf.first, topIndex(fresh));
        }
    }
  }

  /// A collective's runtime call copies its input into a contiguous
  /// staging buffer and writes a new output; both live until the call
  /// returns, or for a *_start until its wait. A gather along a dim other
  /// than 0 (a scatter likewise) moves that dim with one more copy.
  void visitCollective(Operation *op, Value result, int64_t i) {
    int64_t done = i;
    if (isAsyncCollective(op))
      for (Operation *user : result.getUsers())
        if (isa<WaitOp>(user))
          done = std::max(done, topIndex(user));
    Value input = op->getNumOperands() ? op->getOperand(0) : Value();
    int64_t inBytes = input ? std::max<int64_t>(0, sizes.bytes(input)) : 0;
    int64_t outBytes = std::max<int64_t>(0, sizes.bytes(result));
    transient(op, inBytes, i, done);
    if (auto g = dyn_cast<AllGatherOp>(op); g && g.getDim() != 0)
      transient(op, outBytes, i, done);
    if (auto g = dyn_cast<AllGatherStartOp>(op); g && g.getDim() != 0)
      transient(op, outBytes, i, done);
    if (auto s = dyn_cast<ReduceScatterOp>(op); s && s.getDim() != 0)
      transient(op, inBytes, i, done);
    if (auto s = dyn_cast<ReduceScatterStartOp>(op); s && s.getDim() != 0)
      transient(op, inBytes, i, done);
    allocate(op, result, i, MemoryRole::Collective);
  }

  func::FuncOp fn;
  MemoryProfile &profile;
  DenseMap<Operation *, int64_t> index;
  DenseSet<Operation *> fused;
  DenseMap<Operation *, Operation *> lastWriter;
  DenseMap<Operation *, int64_t> writers;
  SmallVector<int64_t> readAt;
  DenseMap<Value, int64_t> bufferOf;
  DenseSet<int64_t> readOnly, returned;
  SizeBounds &sizes;
};

//===----------------------------------------------------------------------===//
// Buffer programs
//===----------------------------------------------------------------------===//

/// The allocation `v` is a view of (through view-like ops and casts).
Value allocationOf(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (isa<memref::AllocOp, memref::AllocaOp>(def) ||
        (isa<func::CallOp>(def) && isa<BaseMemRefType>(v.getType())))
      return v; // a call's result: allocated by the callee
    if (auto view = dyn_cast<ViewLikeOpInterface>(def)) {
      v = view.getViewSource();
      continue;
    }
    if (isa<memref::CastOp>(def) ||
        def->hasTrait<OpTrait::SameOperandsAndResultShape>()) {
      if (def->getNumOperands() == 1 &&
          isa<BaseMemRefType>(def->getOperand(0).getType())) {
        v = def->getOperand(0);
        continue;
      }
    }
    return nullptr;
  }
  return nullptr;
}

void replayBuffers(func::FuncOp fn, MemoryProfile &profile, SizeBounds &sizes) {
  Block &entry = fn.getBody().front();
  DenseMap<Value, int64_t> bufferOf;
  SmallVector<MemoryRole> roles = argumentRoles(fn);
  for (BlockArgument arg : fn.getArguments()) {
    int64_t bytes = sizes.bytes(arg);
    if (bytes < 0) {
      if (isa<ShapedType>(arg.getType()))
        ++profile.unsizedValues;
      bytes = 0;
    }
    MemoryBuffer b;
    b.bytes = bytes;
    b.role = roles[arg.getArgNumber()];
    b.argument = true;
    b.origin = "argument " + std::to_string(arg.getArgNumber());
    profile.buffers.push_back(b);
  }
  int64_t n = 0;
  for (Operation &op : entry)
    profile.ops.push_back(&op), ++n;
  for (MemoryBuffer &b : profile.buffers)
    b.last = std::max<int64_t>(0, n - 1);
  // Buffers whose role their first reader or writer gave.
  DenseSet<int64_t> placed;
  for (auto [i, op] : llvm::enumerate(profile.ops)) {
    // The phase of a buffer is that of the first op that writes or reads
    // it (not a view): the allocation's own location is its tensor.empty's,
    // which CSE shares between identical empty tensors of any phase.
    if (!isa<memref::AllocOp, memref::DeallocOp, func::ReturnOp,
             memref::CastOp, ViewLikeOpInterface>(op) &&
        !getTrainStepPhase(op->getLoc()).empty())
      for (Value v : op->getOperands())
        if (Value a = allocationOf(v))
          if (auto it = bufferOf.find(a);
              it != bufferOf.end() && placed.insert(it->second).second)
            profile.buffers[it->second].role = temporaryRole(op);
    if (isa<memref::AllocOp>(op)) {
      Value v = op->getResult(0);
      int64_t bytes = sizes.bytes(v);
      if (bytes < 0) {
        ++profile.unsizedValues;
        bytes = 0;
      }
      MemoryBuffer b;
      b.bytes = bytes;
      b.role = temporaryRole(op);
      b.first = i;
      b.last = n - 1; // until freed
      b.origin = "memref.alloc";
      b.op = op;
      bufferOf[v] = profile.buffers.size();
      profile.buffers.push_back(b);
    } else if (auto dealloc = dyn_cast<memref::DeallocOp>(op)) {
      if (Value a = allocationOf(dealloc.getMemref()))
        if (auto it = bufferOf.find(a); it != bufferOf.end())
          profile.buffers[it->second].last = i;
    } else if (isa<func::ReturnOp>(op)) {
      for (Value v : op->getOperands())
        if (Value a = allocationOf(v))
          if (auto it = bufferOf.find(a); it != bufferOf.end())
            profile.buffers[it->second].role = MemoryRole::Result;
    } else if (int64_t inside =
                   calleeTransientBytes(op, sizes, profile.unsizedValues);
               inside >= 0) {
      // A call of a function of the module: what it allocates while it
      // runs, then the buffers it returns, alive until the caller frees
      // them.
      auto newBuffer = [&](int64_t bytes, int64_t last, std::string origin) {
        MemoryBuffer b;
        b.bytes = bytes;
        b.role = temporaryRole(op);
        b.first = i;
        b.last = last;
        b.origin = std::move(origin);
        b.op = op;
        profile.buffers.push_back(b);
      };
      if (inside > 0)
        newBuffer(inside, i, "inside the call");
      for (Value v : op->getResults())
        if (isa<BaseMemRefType>(v.getType())) {
          bufferOf[v] = profile.buffers.size();
          placed.insert(profile.buffers.size());
          int64_t bytes = sizes.bytes(v);
          if (bytes < 0) {
            ++profile.unsizedValues;
            bytes = 0;
          }
          newBuffer(bytes, n - 1, "call result");
        }
    } else if (auto call = dyn_cast<func::CallOp>(op)) {
      // Buffers a collective's runtime call reads or writes.
      if (call.getCallee().starts_with("shardx_rt_cg_"))
        for (Value v : call.getOperands())
          if (Value a = allocationOf(v))
            if (auto it = bufferOf.find(a); it != bufferOf.end())
              if (profile.buffers[it->second].role != MemoryRole::Result)
                profile.buffers[it->second].role = MemoryRole::Collective;
    }
  }
}

/// The timeline, the peak and its breakdown from the buffers.
void summarize(MemoryProfile &profile) {
  int64_t n = profile.ops.size();
  SmallVector<int64_t> delta(n + 1, 0);
  for (const MemoryBuffer &b : profile.buffers) {
    if (b.argument) {
      profile.argumentBytes += b.bytes;
      continue;
    }
    if (n == 0)
      continue;
    delta[b.first] += b.bytes;
    delta[b.last + 1] -= b.bytes;
  }
  profile.live.assign(n, 0);
  int64_t running = 0;
  profile.peakBytes = profile.argumentBytes;
  for (int64_t i = 0; i < n; ++i) {
    running += delta[i];
    profile.live[i] = profile.argumentBytes + running;
    if (running > profile.allocatedPeakBytes) {
      profile.allocatedPeakBytes = running;
      profile.peakBytes = profile.live[i];
      profile.peakIndex = i;
    }
  }
  profile.peakByRole.fill(0);
  for (const MemoryBuffer &b : profile.buffers)
    if (b.argument || (profile.peakIndex >= 0 && b.first <= profile.peakIndex &&
                       profile.peakIndex <= b.last))
      profile.peakByRole[static_cast<size_t>(b.role)] += b.bytes;
}

} // namespace

bool mlir::shardx::isArithmeticElementwise(Operation *op, bool allowMath) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic->getNumResults() != 1 ||
      generic.getNumReductionLoops() != 0 ||
      !generic.hasPureTensorSemantics() ||
      generic.payloadUsesValueFromOperand(generic.getDpsInitOperand(0)))
    return false;
  return llvm::all_of(
      generic.getBody()->without_terminator(), [&](Operation &inner) {
        return isa<arith::ArithDialect>(inner.getDialect()) ||
               isa<linalg::IndexOp>(inner) ||
               (allowMath && isa<math::MathDialect>(inner.getDialect()));
      });
}

bool mlir::shardx::isCheaperToRecompute(Operation *op, bool allowMath) {
  if (op->getNumResults() != 1)
    return false;
  SmallVector<Value> inputs;
  if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
    if (!isArithmeticElementwise(generic, allowMath))
      return false;
    inputs = generic.getDpsInputs();
  } else if (isTensorElementwise(op) &&
             (isa<arith::ArithDialect>(op->getDialect()) ||
              (allowMath && isa<math::MathDialect>(op->getDialect())))) {
    inputs = op->getOperands();
  } else {
    return false;
  }
  int64_t out = byteSize(op->getResult(0).getType());
  if (out <= 0)
    return false;
  int64_t in = 0;
  for (Value input : llvm::SetVector<Value>(llvm::from_range, inputs)) {
    if (!isa<ShapedType>(input.getType())) {
      in += 8; // a scalar
      continue;
    }
    int64_t bytes = byteSize(input.getType());
    if (bytes <= 0)
      return false;
    in += bytes;
  }
  return in < out;
}

FailureOr<std::string> mlir::shardx::getCpuBufferPipeline(std::string &error) {
  const PassPipelineInfo *info = PassPipelineInfo::lookup("shardx-codegen-cpu");
  if (!info) {
    error = "the pipeline shardx-codegen-cpu is not registered";
    return failure();
  }
  OpPassManager pm("builtin.module");
  if (failed(info->addToPipeline(pm, "", [&](const Twine &msg) {
        error = msg.str();
        return failure();
      })))
    return failure();
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  StringRef last = "shardx-deallocate-buffers";
  size_t end = text.find(last.str());
  if (end == std::string::npos) {
    error = "shardx-codegen-cpu has no shardx-deallocate-buffers";
    return failure();
  }
  text = text.substr(0, end + last.size()) + ")";
  if (!StringRef(text).starts_with("builtin.module("))
    text = "builtin.module(" + text;
  return text;
}

namespace {
/// The profile of `fn` with its values sized by `sizes` (the bounds of a
/// callee as one call calls it), or by bounds of its own where null.
MemoryProfile profileAt(func::FuncOp fn, SizeBounds *sizes) {
  MemoryProfile profile;
  profile.function = fn.getSymName().str();
  if (fn.isExternal() || fn.getBody().empty())
    return profile;
  bool buffers = false;
  fn.walk([&](memref::AllocOp) {
    buffers = true;
    return WalkResult::interrupt();
  });
  buffers = buffers || llvm::any_of(fn.getArgumentTypes(), [](Type t) {
              return isa<BaseMemRefType>(t);
            });
  profile.bufferized = buffers;
  std::optional<SizeBounds> own;
  if (!sizes)
    sizes = &own.emplace(fn);
  if (buffers)
    replayBuffers(fn, profile, *sizes);
  else
    TensorModel(fn, profile, *sizes).run();
  summarize(profile);
  return profile;
}
} // namespace

MemoryProfile mlir::shardx::computeMemoryProfile(func::FuncOp fn) {
  return profileAt(fn, /*sizes=*/nullptr);
}
