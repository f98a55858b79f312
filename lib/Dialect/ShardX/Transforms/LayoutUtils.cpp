//===- LayoutUtils.cpp - Layouts of values in a propagated program --------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "LayoutUtils.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::shardx;

//===----------------------------------------------------------------------===//
// Layout bookkeeping
//===----------------------------------------------------------------------===//

LayoutAttr mlir::shardx::getRecordedLayout(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!fn || arg.getOwner() != &fn.getBody().front())
      return nullptr;
    return fn.getArgAttrOfType<LayoutAttr>(arg.getArgNumber(),
                                           ShardXDialect::getLayoutAttrName());
  }
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  if (auto annotate = dyn_cast<AnnotateOp>(op))
    return annotate.getLayout();
  if (auto redistribute = dyn_cast<RedistributeOp>(op))
    return redistribute.getTarget();
  auto layouts =
      op->getAttrOfType<ArrayAttr>(ShardXDialect::getLayoutsAttrName());
  if (!layouts)
    return nullptr;
  unsigned index = 0;
  for (OpResult r : op->getResults()) {
    if (r == result)
      return index < layouts.size() ? dyn_cast<LayoutAttr>(layouts[index])
                                    : nullptr;
    if (isa<TensorType>(r.getType()))
      ++index;
  }
  return nullptr;
}

void mlir::shardx::setResultLayout(OpResult value, LayoutAttr layout) {
  Operation *op = value.getOwner();
  SmallVector<Attribute> entries;
  auto old = op->getAttrOfType<ArrayAttr>(ShardXDialect::getLayoutsAttrName());
  unsigned index = 0;
  for (OpResult r : op->getResults()) {
    if (!isa<TensorType>(r.getType()))
      continue;
    if (r == value)
      entries.push_back(layout);
    else if (old && index < old.size())
      entries.push_back(old[index]);
    else
      entries.push_back(layout); // placeholder, overwritten by the caller
    ++index;
  }
  op->setAttr(ShardXDialect::getLayoutsAttrName(),
              ArrayAttr::get(op->getContext(), entries));
}

FailureOr<MeshOp>
mlir::shardx::getFunctionMesh(func::FuncOp fn,
                              SymbolTableCollection &symbolTable) {
  FlatSymbolRefAttr mesh;
  Operation *first = nullptr;
  auto visit = [&](LayoutAttr layout, Operation *where) -> LogicalResult {
    if (!layout)
      return success();
    if (!mesh) {
      mesh = layout.getMesh();
      first = where;
      return success();
    }
    if (layout.getMesh() != mesh) {
      InFlightDiagnostic diag =
          where->emitError()
          << "mesh mismatch: layout on @" << layout.getMesh().getValue()
          << " where the function uses @" << mesh.getValue();
      diag.attachNote(first->getLoc()) << "first layout here";
      return failure();
    }
    return success();
  };
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (failed(visit(fn.getArgAttrOfType<LayoutAttr>(
                         i, ShardXDialect::getLayoutAttrName()),
                     fn)))
      return failure();
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
    if (failed(visit(fn.getResultAttrOfType<LayoutAttr>(
                         i, ShardXDialect::getLayoutAttrName()),
                     fn)))
      return failure();
  WalkResult walk = fn.walk([&](Operation *op) {
    LayoutAttr layout;
    if (auto a = dyn_cast<AnnotateOp>(op))
      layout = a.getLayout();
    else if (auto r = dyn_cast<RedistributeOp>(op))
      layout = r.getTarget();
    return failed(visit(layout, op)) ? WalkResult::interrupt()
                                     : WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (!mesh)
    return MeshOp();
  MeshOp meshOp = lookupMesh(fn, mesh, &symbolTable);
  if (!meshOp) {
    fn.emitError() << "unknown mesh @" << mesh.getValue();
    return failure();
  }
  return meshOp;
}

LogicalResult mlir::shardx::forEachShardedFunction(
    ModuleOp module, function_ref<LogicalResult(func::FuncOp, MeshOp)> fn) {
  SymbolTableCollection symbolTable;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isExternal())
      continue;
    FailureOr<MeshOp> mesh = getFunctionMesh(f, symbolTable);
    if (failed(mesh))
      return failure();
    if (*mesh && failed(fn(f, *mesh)))
      return failure();
  }
  return success();
}

/// The ranked-tensor values among `values` (an op's tensor operands or
/// results, in the order rules count them).
SmallVector<Value> mlir::shardx::tensorValues(ValueRange values) {
  SmallVector<Value> tensors;
  for (Value v : values)
    if (isa<RankedTensorType>(v.getType()))
      tensors.push_back(v);
  return tensors;
}

/// The position of `use` among its owner's tensor operands.
unsigned mlir::shardx::tensorOperandIndex(OpOperand &use) {
  unsigned n = 0;
  for (OpOperand &o : use.getOwner()->getOpOperands()) {
    if (&o == &use)
      break;
    if (isa<RankedTensorType>(o.get().getType()))
      ++n;
  }
  return n;
}

/// The layout `use` needs, from its owner's `shardx.operand_layouts` (one
/// per tensor operand).
LayoutAttr mlir::shardx::requiredLayout(OpOperand &use) {
  auto layouts = use.getOwner()->getAttrOfType<ArrayAttr>(
      ShardXDialect::getOperandLayoutsAttrName());
  unsigned index = tensorOperandIndex(use);
  if (!layouts || index >= layouts.size())
    return nullptr;
  return dyn_cast<LayoutAttr>(layouts[index]);
}

/// The layout function result `i` ends in when its value is in `current`:
/// the declared one, else `current` with pending Partials reduced.
LayoutAttr mlir::shardx::resultLayout(func::FuncOp fn, unsigned i,
                                      LayoutAttr current) {
  if (auto declared = fn.getResultAttrOfType<LayoutAttr>(
          i, ShardXDialect::getLayoutAttrName()))
    return declared;
  const Layout &layout = current.getLayout();
  if (!layout.hasPartial())
    return current;
  Layout l = layout;
  for (int64_t axis = 0, e = l.getPartials().size(); axis < e; ++axis)
    l.setPartial(axis, std::nullopt);
  return LayoutAttr::get(current.getMesh(), l);
}

LayoutAttr mlir::shardx::layoutOrReplicated(Value v, FlatSymbolRefAttr mesh,
                                            int64_t meshRank) {
  if (LayoutAttr a = getRecordedLayout(v))
    return a;
  return LayoutAttr::get(mesh, Layout(meshRank));
}

Value mlir::shardx::selectAtMember(OpBuilder &b, Location loc, Value index,
                                   int64_t member, int64_t atMember,
                                   int64_t otherwise) {
  Value at = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, index,
      arith::ConstantIndexOp::create(b, loc, member));
  // `otherwise` first, as the inline selects this replaced built them under
  // GCC, so the emitted IR is unchanged.
  Value ifNot = arith::ConstantIndexOp::create(b, loc, otherwise);
  Value ifAt = arith::ConstantIndexOp::create(b, loc, atMember);
  return arith::SelectOp::create(b, loc, at, ifAt, ifNot);
}
