//===- ShardToShardX.cpp - Upstream shard annotations to ShardX -----------===//
//
// Part of ShardX.
//
// `shardx-import-shard`: a program annotated for upstream MLIR's partitioner
// becomes a ShardX program. Steps, in order:
//   1. refuse what ShardX cannot express (collectives and per-rank queries of
//      a partitioned program, halos, dynamic grids/offsets, shardings used
//      as values);
//   2. one ShardX layout per `shard.shard` (split axes in upstream's outer
//      to inner order = ShardX's major to minor; offsets -> sizes);
//   3. function arguments and results take the layout of the `shard.shard`
//      that upstream's partitioner reads for their local type;
//   4. every other `shard.shard` becomes a `shardx.annotate`;
//   5. `shard.grid` -> `shardx.mesh`, TOSA ops -> linalg.
//
//===----------------------------------------------------------------------===//

#include "shardx/Conversion/ShardToShardX/ShardToShardX.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Layout/Layout.h"

#include "mlir/Conversion/TosaToArith/TosaToArith.h"
#include "mlir/Conversion/TosaToLinalg/TosaToLinalg.h"
#include "mlir/Conversion/TosaToTensor/TosaToTensor.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Iterators.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_IMPORTSHARDPASS
#include "shardx/Conversion/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

static constexpr StringLiteral kLayoutAttrName = "shardx.layout";

//===----------------------------------------------------------------------===//
// Step 1: what ShardX cannot express
//===----------------------------------------------------------------------===//

/// Why ShardX refuses `op` of the shard dialect, or "" when it imports it.
static std::string whyUnsupported(Operation *op) {
  if (isa<shard::GridOp, shard::ShardingOp, shard::ShardOp>(op))
    return "";
  if (isa<shard::UpdateHaloOp>(op))
    return "halo exchange has no ShardX equivalent (ShardX shards do not "
           "overlap)";
  if (isa<shard::AllGatherOp, shard::AllReduceOp, shard::AllSliceOp,
          shard::AllToAllOp, shard::BroadcastOp, shard::GatherOp, shard::RecvOp,
          shard::ReduceOp, shard::ReduceScatterOp, shard::ScatterOp,
          shard::SendOp, shard::ShiftOp>(op))
    return "it is a collective of an already partitioned (per-rank) "
           "program; ShardX imports global programs with sharding "
           "annotations, before upstream's shard-partition";
  if (isa<shard::ProcessMultiIndexOp, shard::ProcessLinearIndexOp,
          shard::NeighborsLinearIndicesOp, shard::ShardShapeOp>(op))
    return "it is a per-rank query of a partitioned program; ShardX "
           "imports global programs with sharding annotations";
  if (isa<shard::GetShardingOp, shard::GridShapeOp>(op))
    return "ShardX layouts are attributes, not values a program can "
           "compute with";
  return "ShardX does not import it";
}

/// Emits an error for every construct the import refuses; false if any.
static bool checkSupported(ModuleOp module) {
  bool ok = true;
  module.walk([&](Operation *op) {
    if (op->getDialect() && isa<shard::ShardDialect>(op->getDialect())) {
      std::string why = whyUnsupported(op);
      if (!why.empty()) {
        op->emitError("cannot import '") << op->getName() << "': " << why;
        ok = false;
        return;
      }
    }
    if (auto fn = dyn_cast<FunctionOpInterface>(op)) {
      auto hasSharding = [](Type t) { return isa<shard::ShardingType>(t); };
      if (llvm::any_of(fn.getArgumentTypes(), hasSharding) ||
          llvm::any_of(fn.getResultTypes(), hasSharding)) {
        op->emitError("cannot import a function that takes or returns "
                      "!shard.sharding: ShardX layouts are attributes, not "
                      "values");
        ok = false;
      }
      return;
    }
    if (auto grid = dyn_cast<shard::GridOp>(op)) {
      if (llvm::any_of(grid.getShape(), ShapedType::isDynamic)) {
        grid.emitError("cannot import grid @")
            << grid.getSymName()
            << " with a dynamic axis size: ShardX meshes have static shapes";
        ok = false;
      } else if (ArrayRef<int64_t> shape = grid.getShape();
                 !countMeshDevices(shape.data(), shape.size())) {
        // Before the layouts, which multiply axis sizes.
        std::string text;
        llvm::raw_string_ostream os(text);
        llvm::interleave(shape, os, "x");
        grid.emitError("cannot import grid @")
            << grid.getSymName() << " of shape " << text
            << ": ShardX meshes have positive axis sizes and at most "
            << kMaxMeshDevices << " (2^31) devices";
        ok = false;
      }
      return;
    }
    if (auto sharding = dyn_cast<shard::ShardingOp>(op)) {
      if (!sharding.getStaticHaloSizes().empty() ||
          !sharding.getDynamicHaloSizes().empty()) {
        sharding.emitError("cannot import halo_sizes: halo regions have no "
                           "ShardX equivalent (ShardX shards do not overlap)");
        ok = false;
      }
      if (!sharding.getDynamicShardedDimsOffsets().empty()) {
        sharding.emitError("cannot import dynamic sharded_dims_offsets: "
                           "ShardX shard sizes are static");
        ok = false;
      }
      for (Operation *user : sharding.getResult().getUsers()) {
        // Shard ops other than shard.shard are refused on their own.
        if (user->getDialect() && isa<shard::ShardDialect>(user->getDialect()))
          continue;
        user->emitError("cannot import a use of a !shard.sharding value by '")
            << user->getName()
            << "': ShardX layouts are attributes, not values";
        ok = false;
      }
      return;
    }
    if (auto shardOp = dyn_cast<shard::ShardOp>(op)) {
      if (!shardOp.getSharding().getDefiningOp<shard::ShardingOp>()) {
        shardOp.emitError("cannot import a shard.shard whose sharding is not "
                          "a shard.sharding op");
        ok = false;
      }
    }
  });
  return ok;
}

//===----------------------------------------------------------------------===//
// Step 2: one layout per shard.shard
//===----------------------------------------------------------------------===//

/// The ShardX layout of `shardOp`'s tensor under its sharding, or an error
/// at `shardOp`. Upstream lists a dim's grid axes outer to inner, the order
/// of the device in a group (docs/Dialects/Shard.md, "Device groups"):
/// ShardX's major to minor. `sharded_dims_offsets` holds, per sharded dim in
/// dim order, the start of every shard (shards numbered by that order) and
/// the end of the last: ShardX's explicit sizes are its differences.
static FailureOr<LayoutAttr>
computeLayout(shard::ShardOp shardOp,
              const llvm::StringMap<SmallVector<int64_t>> &grids) {
  auto sharding = shardOp.getSharding().getDefiningOp<shard::ShardingOp>();
  StringRef gridName = sharding.getGridAttr().getValue();
  auto grid = grids.find(gridName);
  if (grid == grids.end())
    return shardOp.emitError("unknown grid @") << gridName;
  ArrayRef<int64_t> gridShape = grid->second;
  auto type = cast<RankedTensorType>(shardOp.getSrc().getType());
  ArrayRef<shard::GridAxesAttr> splitAxes = sharding.getSplitAxes().getAxes();
  int64_t splitDims = 0;
  for (auto [dim, axes] : llvm::enumerate(splitAxes))
    if (!axes.empty())
      splitDims = dim + 1;
  if (splitDims > type.getRank())
    return shardOp.emitError("the sharding splits tensor dim ")
           << splitDims - 1 << " of a rank-" << type.getRank() << " tensor";

  Layout layout(static_cast<int64_t>(gridShape.size()));
  SmallVector<int64_t> shardedDims;
  for (auto [dim, axes] : llvm::enumerate(splitAxes)) {
    if (axes.empty())
      continue;
    shardedDims.push_back(dim);
    for (shard::GridAxis axis : axes.asArrayRef()) {
      if (axis < 0 || axis >= static_cast<int64_t>(gridShape.size()))
        return shardOp.emitError("grid axis ")
               << axis << " is out of range for grid @" << gridName;
      layout.addSplit(dim, {axis, 1});
    }
  }

  ArrayRef<int64_t> offsets = sharding.getStaticShardedDimsOffsets();
  if (!offsets.empty()) {
    size_t pos = 0;
    for (int64_t dim : shardedDims) {
      int64_t shards = 1;
      for (shard::GridAxis axis : splitAxes[dim].asArrayRef())
        shards *= gridShape[axis];
      if (pos + shards + 1 > offsets.size())
        return shardOp.emitError("sharded_dims_offsets has ")
               << offsets.size() << " values; the sharding needs " << shards + 1
               << " for tensor dim " << dim << " after the first " << pos;
      ArrayRef<int64_t> dimOffsets = offsets.slice(pos, shards + 1);
      pos += shards + 1;
      int64_t size = type.getDimSize(dim);
      if (dimOffsets.front() != 0 ||
          (!ShapedType::isDynamic(size) && dimOffsets.back() != size))
        return shardOp.emitError("sharded_dims_offsets of tensor dim ")
               << dim << " run from " << dimOffsets.front() << " to "
               << dimOffsets.back() << "; they must run from 0 to the dim's "
               << "size " << size;
      std::vector<int64_t> sizes;
      for (size_t i = 0; i + 1 < dimOffsets.size(); ++i) {
        if (dimOffsets[i + 1] < dimOffsets[i])
          return shardOp.emitError("sharded_dims_offsets of tensor dim ")
                 << dim << " decrease (" << dimOffsets[i] << " then "
                 << dimOffsets[i + 1] << ")";
        sizes.push_back(dimOffsets[i + 1] - dimOffsets[i]);
      }
      layout.setSizes(dim, std::move(sizes));
    }
    if (pos != offsets.size())
      return shardOp.emitError("sharded_dims_offsets has ")
             << offsets.size() << " values; the sharding's "
             << shardedDims.size() << " sharded dims need " << pos;
  }

  auto attr = LayoutAttr::get(sharding.getGridAttr(), layout);
  if (std::string error = attr.verifyFor(gridShape, type); !error.empty())
    return shardOp.emitError("the sharding is not a valid ShardX layout for ")
           << type << ": " << error;
  return attr;
}

//===----------------------------------------------------------------------===//
// Steps 3-4: function boundaries and annotations
//===----------------------------------------------------------------------===//

namespace {

/// Rewrites the `shard.shard` ops of one module (layouts already computed).
class AnnotationImporter {
public:
  AnnotationImporter(ModuleOp module,
                     llvm::MapVector<Operation *, LayoutAttr> layouts)
      : module(module), layouts(std::move(layouts)) {}

  LogicalResult run() {
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal() && failed(importBoundary(fn)))
        return failure();
    if (failed(importDefinitionShardings()))
      return failure();
    importUserShardings();
    return success();
  }

private:
  LayoutAttr layoutOf(shard::ShardOp op) { return layouts.lookup(op); }

  /// The layout `value` has where it is defined: its function argument
  /// layout, or the layout of the `shardx.annotate` it is.
  static LayoutAttr definedLayout(Value value) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      if (fn && arg.getOwner()->isEntryBlock())
        return fn.getArgAttrOfType<LayoutAttr>(arg.getArgNumber(),
                                               kLayoutAttrName);
      return {};
    }
    if (auto annotate = value.getDefiningOp<AnnotateOp>())
      return annotate.getLayout();
    return {};
  }

  /// Sets attribute `name` to `layout` unless it holds another layout.
  template <typename SetFn>
  static LogicalResult setBoundaryLayout(func::FuncOp fn, LayoutAttr existing,
                                         LayoutAttr layout, StringRef what,
                                         unsigned index, SetFn set) {
    if (existing && existing != layout)
      return fn.emitError("the shard.shard of ")
             << what << " " << index << " says " << layout
             << " but it already has " << existing;
    set();
    return success();
  }

  /// Argument layouts: upstream's partitioner gives an argument the local
  /// type of the sharding of its shard.shard (after propagation, its one
  /// use): the result sharding if the argument has one, else the sharding
  /// its users ask for when they all ask for the same. Result layouts: the
  /// sharding of the shard.shard each return reads.
  LogicalResult importBoundary(func::FuncOp fn) {
    Block &entry = fn.getBody().front();
    for (BlockArgument arg : entry.getArguments()) {
      LayoutAttr def, users;
      bool usersAgree = true;
      for (Operation *user : arg.getUsers()) {
        auto shardOp = dyn_cast<shard::ShardOp>(user);
        if (!shardOp)
          continue;
        LayoutAttr layout = layoutOf(shardOp);
        if (!shardOp.getAnnotateForUsers()) {
          if (def && def != layout)
            return fn.emitError("argument ")
                   << arg.getArgNumber() << " has two result shardings (" << def
                   << " and " << layout << "); upstream leaves this undefined";
          def = layout;
        } else if (!users) {
          users = layout;
        } else if (users != layout) {
          usersAgree = false;
        }
      }
      LayoutAttr layout = def ? def : (usersAgree ? users : LayoutAttr());
      if (!layout)
        continue;
      unsigned i = arg.getArgNumber();
      if (failed(setBoundaryLayout(
              fn, fn.getArgAttrOfType<LayoutAttr>(i, kLayoutAttrName), layout,
              "argument", i,
              [&] { fn.setArgAttr(i, kLayoutAttrName, layout); })))
        return failure();
    }

    SmallVector<LayoutAttr> results(fn.getNumResults());
    SmallVector<bool> agree(fn.getNumResults(), true);
    bool first = true;
    for (Block &block : fn.getBody()) {
      auto ret = dyn_cast<func::ReturnOp>(block.getTerminator());
      if (!ret)
        continue;
      for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
        auto shardOp = operand.getDefiningOp<shard::ShardOp>();
        LayoutAttr layout = shardOp ? layoutOf(shardOp) : LayoutAttr();
        if (first)
          results[i] = layout;
        else if (results[i] != layout)
          agree[i] = false;
      }
      first = false;
    }
    for (auto [i, layout] : llvm::enumerate(results)) {
      if (!layout || !agree[i])
        continue;
      if (failed(setBoundaryLayout(
              fn, fn.getResultAttrOfType<LayoutAttr>(i, kLayoutAttrName),
              layout, "result", i,
              [&] { fn.setResultAttr(i, kLayoutAttrName, layout); })))
        return failure();
    }
    return success();
  }

  /// A `shard.shard` without `annotate_for_users` gives the sharding of the
  /// value's definition: one `shardx.annotate` right after the definition,
  /// read by every user of the value (a function argument with that layout
  /// needs none).
  LogicalResult importDefinitionShardings() {
    llvm::MapVector<Value, LayoutAttr> defs;
    for (auto [op, layout] : layouts) {
      auto shardOp = cast<shard::ShardOp>(op);
      if (shardOp.getAnnotateForUsers())
        continue;
      Value src = shardOp.getSrc();
      auto [it, inserted] = defs.try_emplace(src, layout);
      if (!inserted && it->second != layout)
        return shardOp.emitError("the value has two result shardings (")
               << it->second << " and " << layout
               << "); upstream leaves this undefined";
    }
    for (auto [value, layout] : defs) {
      if (definedLayout(value) == layout)
        continue;
      OpBuilder builder(value.getContext());
      if (Operation *def = value.getDefiningOp())
        builder.setInsertionPointAfter(def);
      else
        builder.setInsertionPointToStart(cast<BlockArgument>(value).getOwner());
      auto annotate =
          AnnotateOp::create(builder, value.getLoc(), value, layout);
      value.replaceAllUsesExcept(annotate.getResult(), annotate);
    }
    return success();
  }

  /// Every `shard.shard` goes: one without `annotate_for_users` is its
  /// (already annotated) source; one with it is a `shardx.annotate` of its
  /// source unless the source has that layout already.
  void importUserShardings() {
    for (auto [op, layout] : layouts) {
      auto shardOp = cast<shard::ShardOp>(op);
      Value src = shardOp.getSrc();
      Value replacement = src;
      if (shardOp.getAnnotateForUsers() && definedLayout(src) != layout) {
        OpBuilder builder(shardOp);
        replacement =
            AnnotateOp::create(builder, shardOp.getLoc(), src, layout);
      }
      shardOp.getResult().replaceAllUsesWith(replacement);
      shardOp.erase();
    }
  }

  ModuleOp module;
  llvm::MapVector<Operation *, LayoutAttr> layouts;
};

//===----------------------------------------------------------------------===//
// Step 5: TOSA
//===----------------------------------------------------------------------===//

/// Upstream's TOSA-to-linalg conversions, without the canonicalizations of
/// `tosa-to-linalg-pipeline` (the SPMD pipeline canonicalizes).
void buildTosaLowering(OpPassManager &pm) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(tosa::createTosaToLinalgNamed());
  fn.addPass(tosa::createTosaToLinalg());
  fn.addPass(createTosaToArithPass());
  fn.addPass(createTosaToTensorPass());
}

struct ImportShardPass
    : public mlir::shardx::impl::ImportShardPassBase<ImportShardPass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    OpPassManager pm(ModuleOp::getOperationName());
    buildTosaLowering(pm);
    pm.getDependentDialects(registry);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!checkSupported(module))
      return signalPassFailure();

    llvm::StringMap<SmallVector<int64_t>> grids;
    SmallVector<shard::GridOp> gridOps;
    module.walk([&](shard::GridOp grid) {
      grids[grid.getSymName()] = llvm::to_vector(grid.getShape());
      gridOps.push_back(grid);
    });

    llvm::MapVector<Operation *, LayoutAttr> layouts;
    bool ok = true;
    module.walk([&](shard::ShardOp shardOp) {
      FailureOr<LayoutAttr> layout = computeLayout(shardOp, grids);
      if (failed(layout))
        ok = false;
      else
        layouts[shardOp] = *layout;
    });
    if (!ok)
      return signalPassFailure();

    if (failed(AnnotationImporter(module, std::move(layouts)).run()))
      return signalPassFailure();

    // The shardings are unused now (checkSupported refused other uses).
    module.walk([](shard::ShardingOp op) { op.erase(); });
    for (shard::GridOp grid : gridOps) {
      OpBuilder builder(grid);
      SmallVector<Attribute> names;
      for (int64_t axis = 0; axis < grid.getRank(); ++axis)
        names.push_back(builder.getStringAttr(std::to_string(axis)));
      MeshOp::create(builder, grid.getLoc(), grid.getSymNameAttr(),
                     grid.getShapeAttr(), builder.getArrayAttr(names),
                     /*bandwidth=*/nullptr, /*latency=*/nullptr);
      grid.erase();
    }

    if (!lowerTosa)
      return;
    auto isTosa = [](Operation *op) {
      return op->getDialect() && isa<tosa::TosaDialect>(op->getDialect());
    };
    if (!module
             .walk([&](Operation *op) {
               return isTosa(op) ? WalkResult::interrupt()
                                 : WalkResult::advance();
             })
             .wasInterrupted())
      return;
    OpPassManager pm(ModuleOp::getOperationName());
    buildTosaLowering(pm);
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
    // What the conversions leave: shape constants nobody reads any more
    // (users first, so that a chain of them goes).
    module.walk<WalkOrder::PostOrder, ReverseIterator>([&](Operation *op) {
      if (!isTosa(op))
        return;
      if (isOpTriviallyDead(op)) {
        op->erase();
        return;
      }
      op->emitError("cannot import '")
          << op->getName() << "': upstream's TOSA-to-linalg conversions "
          << "left it, and ShardX has no sharding rule for TOSA ops";
      ok = false;
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Entry points for the tools
//===----------------------------------------------------------------------===//

bool mlir::shardx::hasShardDialectOps(ModuleOp module) {
  return module
      .walk([](Operation *op) {
        return op->getDialect() && isa<shard::ShardDialect>(op->getDialect())
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

LogicalResult mlir::shardx::importShardProgram(ModuleOp module) {
  if (!hasShardDialectOps(module))
    return success();
  PassManager pm(module.getContext());
  pm.addPass(createImportShardPass());
  return pm.run(module);
}

void mlir::shardx::registerShardImportDialects(DialectRegistry &registry) {
  registry.insert<shard::ShardDialect, tosa::TosaDialect>();
}
