//===- TestLocalShards.cpp - Print every rank's local shard ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "TestPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::shardx::test {
#define GEN_PASS_DEF_TESTLOCALSHARDSPASS
#include "TestPasses.h.inc"
} // namespace mlir::shardx::test

using namespace mlir;
using namespace mlir::shardx;

namespace {

std::string coordsStr(ArrayRef<int64_t> coords) {
  std::string s = "(";
  for (auto [i, c] : llvm::enumerate(coords))
    s += (i ? ", " : "") + std::to_string(c);
  return s + ")";
}

/// Emits the remark describing `layout` on a value of type `type`.
void describe(Operation *op, StringRef what, LayoutAttr layout, Type type,
              SymbolTableCollection &symbolTable) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  MeshOp mesh = lookupMesh(op, layout.getMesh(), &symbolTable);
  if (!mesh || !tensorType || !tensorType.hasStaticShape())
    return;
  std::vector<int64_t> meshShape(mesh.getShape().begin(),
                                 mesh.getShape().end());
  std::vector<int64_t> shape(tensorType.getShape().begin(),
                             tensorType.getShape().end());
  ::shardx::Layout l = layout.getLayout();
  if (!l.verifyForShape(meshShape, shape).empty())
    return;
  InFlightDiagnostic diag = op->emitRemark();
  diag << what << " " << layout << " placements ";
  std::string error;
  if (auto placements = l.toPlacements(meshShape, error)) {
    diag << "[";
    for (auto [i, p] : llvm::enumerate(*placements))
      diag << (i ? ", " : "") << p.str();
    diag << "]";
  } else {
    diag << "none (" << error << ")";
  }
  diag << (l.isEvenFor(meshShape, shape) ? " even" : " uneven");
  for (const auto &coords : ::shardx::allMeshCoords(meshShape)) {
    ::shardx::LocalShard shard = l.getLocalShard(meshShape, shape, coords);
    diag << "\n  rank " << coordsStr(coords) << ":";
    for (auto [d, runs] : llvm::enumerate(shard.runs)) {
      diag << (d ? " x " : " ");
      for (auto [i, r] : llvm::enumerate(runs))
        diag << (i ? "+" : "") << "[" << r.offset << ", " << r.offset + r.size
             << ")";
    }
    diag << " -> ";
    llvm::interleave(shard.shape, diag, "x");
  }
}

struct TestLocalShardsPass
    : mlir::shardx::test::impl::TestLocalShardsPassBase<TestLocalShardsPass> {
  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    getOperation()->walk([&](Operation *op) {
      if (auto fn = dyn_cast<FunctionOpInterface>(op)) {
        for (unsigned i = 0; i < fn.getNumArguments(); ++i)
          if (auto l = fn.getArgAttrOfType<LayoutAttr>(
                  i, ShardXDialect::getLayoutAttrName()))
            describe(op, "argument #" + std::to_string(i), l,
                     fn.getArgumentTypes()[i], symbolTable);
        for (unsigned i = 0; i < fn.getNumResults(); ++i)
          if (auto l = fn.getResultAttrOfType<LayoutAttr>(
                  i, ShardXDialect::getLayoutAttrName()))
            describe(op, "result #" + std::to_string(i), l,
                     fn.getResultTypes()[i], symbolTable);
      } else if (auto annotate = dyn_cast<AnnotateOp>(op)) {
        describe(op, "annotate", annotate.getLayout(), annotate.getType(),
                 symbolTable);
      }
    });
  }
};

} // namespace
