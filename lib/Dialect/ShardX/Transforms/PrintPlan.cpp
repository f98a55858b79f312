//===- PrintPlan.cpp - Print the plan of every reshard --------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Collectives/Schedule.h"
#include "Partition/GroupedMatmul.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Analysis/Recompute.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Dialect/ShardX/Transforms/RecordedLayouts.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_PRINTPLANPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

struct PrintPlanPass : mlir::shardx::impl::PrintPlanPassBase<PrintPlanPass> {
  using PrintPlanPassBase::PrintPlanPassBase;

  /// memory-level=buffers runs the CPU code generation's passes: their
  /// dialects are loaded before the pass runs.
  void getDependentDialects(DialectRegistry &registry) const override {
    PrintPlanPassBase::getDependentDialects(registry);
    if (memoryLevel != "buffers")
      return;
    std::string error;
    if (FailureOr<std::string> text = getCpuBufferPipeline(error);
        succeeded(text))
      if (FailureOr<OpPassManager> pm = parsePassPipeline(*text); succeeded(pm))
        pm->getDependentDialects(registry);
  }

  void runOnOperation() override {
    SymbolTableCollection symbolTable;
    ReshardPlanners planners;
    WalkResult result = getOperation()->walk([&](RedistributeOp op) {
      const Plan *plan = planners.getPlan(op, symbolTable);
      if (!plan)
        return WalkResult::interrupt();
      InFlightDiagnostic diag = op.emitRemark();
      diag << "plan " << op.getSource().getLayout().str() << " -> "
           << op.getTarget().getLayout().str() << " for ";
      std::string type;
      llvm::raw_string_ostream(type) << op.getType();
      diag << type << ": " << plan->steps.size()
           << (plan->steps.size() == 1 ? " step, " : " steps, ")
           << plan->numCollectives()
           << (plan->numCollectives() == 1 ? " collective, " : " collectives, ")
           << llvm::formatv("{0:F0}", plan->bytesPerRank) << " bytes/rank, "
           << llvm::formatv("{0:F3}", plan->cost) << " us";
      for (const Step &step : plan->steps)
        diag << "\n  " << step.str() << " -> " << step.after.str() << ": "
             << llvm::formatv("{0:F0}", step.bytesPerRank) << " bytes/rank, "
             << llvm::formatv("{0:F3}", step.cost) << " us";
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    printHalos(symbolTable);
    printRaggedRows();
    printRaggedDispatch();
    OwningOpRef<ModuleOp> scheduled;
    printSchedules(scheduled);
    printMemory(scheduled);
  }

  /// A remark per operand a grouped matmul reads on its experts' ranks
  /// (shardx-ragged-experts): rows that no reshard moves.
  void printRaggedRows() {
    getOperation()->walk([&](linalg::GenericOp op) {
      if (!op->hasAttr("shardx.ragged_rows") || !matchGroupedMatmulForm(op))
        return;
      for (unsigned i : {0u, 1u}) {
        LayoutAttr need = requiredLayout(op->getOpOperand(i));
        if (!need || !need.getLayout().hasPartial())
          continue;
        std::string type;
        llvm::raw_string_ostream(type) << op->getOperand(i).getType();
        op->emitRemark() << "ragged rows: grouped matmul reads operand #" << i
                         << " " << type << " as " << need.getLayout().str()
                         << ", its experts' rows on their ranks: no reshard";
      }
    });
  }

  /// A remark per exchange of a global program's MoE dispatch
  /// (shardx-ragged-dispatch), priced at an even split of the routed rows
  /// (the real counts exist at run time): a rank keeps `1/n` of the rows it
  /// sends and receives (`n` the group size) and moves the rest, each way;
  /// the time is the mesh model's group cost of those bytes.
  void printRaggedDispatch() {
    SymbolTableCollection symbolTable;
    getOperation()->walk([&](Operation *op) {
      if (!op->hasAttr("shardx.ragged_dispatch") ||
          !isa<RaggedAllToAllOp, AllToAllOp>(op))
        return;
      auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(
          op, op->getAttrOfType<FlatSymbolRefAttr>("mesh"));
      if (!mesh)
        return;
      ::shardx::MeshSpec spec = getMeshSpec(mesh);
      ArrayRef<int64_t> axes =
          op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
      int64_t n = spec.groupSize(axes);
      // The rows a rank routes: the smaller of the two buffers (the
      // dispatch's send buffer, the combine's result; the other is the
      // worst case, n times that).
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      auto out = cast<RankedTensorType>(op->getResult(0).getType());
      RankedTensorType rows =
          out.getNumElements() < in.getNumElements() ? out : in;
      double bytes = double(rows.getNumElements()) *
                     (rows.getElementTypeBitWidth() / 8) * (n - 1) / n;
      std::string type;
      llvm::raw_string_ostream(type) << rows;
      op->emitRemark() << "ragged dispatch: "
                       << (isa<RaggedAllToAllOp>(op)
                               ? "shardx.ragged_all_to_all of the routed "
                                 "rows "
                               : "shardx.all_to_all of the per-expert "
                                 "counts ")
                       << type << " over " << n << " ranks, 1 collective, "
                       << llvm::formatv("{0:F0}", bytes)
                       << " bytes/rank at an even split, "
                       << llvm::formatv("{0:F3}",
                                        spec.groupCost(axes).timeUs(bytes))
                       << " us";
    });
  }

  /// A remark per windowed operand of a global program that is read across
  /// shard edges (docs/Rules.md, "Windowed ops"): the halo shardx-localize
  /// will exchange, with the bytes of the permutes shardx-lower-halos emits
  /// for it, the bytes propagation prices (addHalos): both sides' rows in a
  /// group of three or more (one permute each), the wider side's in a group
  /// of two (one permute for both); the largest shard of the other dims,
  /// widened by the halos the op exchanges before this one, so corners
  /// count once.
  void printHalos(SymbolTableCollection &symbolTable) {
    getOperation()->walk([&](ShardingRuleOpInterface ruleOp) {
      Operation *op = ruleOp.getOperation();
      if (!isa<linalg::LinalgOp>(op))
        return;
      FailureOr<ShardingRule> rule = ruleOp.getShardingRule();
      if (failed(rule))
        return;
      SmallVector<Value> tensors;
      for (Value v : op->getOperands())
        if (isa<RankedTensorType>(v.getType()))
          tensors.push_back(v);
      // Per tensor operand and dim, the rows received so far.
      DenseMap<std::pair<int64_t, int64_t>, int64_t> received;
      for (const ShardingRule::WindowedDim &w : rule->windows) {
        if (w.result || !w.halo || w.tensor >= (int64_t)tensors.size())
          continue;
        LayoutAttr attr = getRecordedLayout(tensors[w.tensor]);
        const DimSharding *ds = attr ? attr.getLayout().getDim(w.dim) : nullptr;
        if (!ds || ds->splits.empty())
          continue;
        MeshOp mesh = lookupMesh(op, attr.getMesh(), &symbolTable);
        if (!mesh)
          continue;
        int64_t n = mesh.getShape()[ds->splits[0].axis];
        int64_t low = w.haloLow(), high = w.haloHigh();
        int64_t rows = n >= 3 ? low + high : (n == 2 ? std::max(low, high) : 0);
        auto type = cast<RankedTensorType>(tensors[w.tensor].getType());
        double bytes =
            std::max<int64_t>(1, type.getElementTypeBitWidth() / 8) * rows;
        for (int64_t d = 0; d < type.getRank(); ++d) {
          if (d == w.dim)
            continue;
          int64_t extent = type.getDimSize(d);
          if (const auto *other = attr.getLayout().getDim(d)) {
            if (!other->sizes.empty()) {
              extent = *llvm::max_element(other->sizes);
            } else {
              int64_t parts = 1;
              for (const Split &sp : other->splits)
                parts *= mesh.getShape()[sp.axis];
              extent = llvm::divideCeil(extent, parts);
            }
          }
          bytes *= extent + received.lookup({w.tensor, d});
        }
        received[{w.tensor, w.dim}] = rows;
        op->emitRemark() << "halo of operand " << w.tensor << " dim " << w.dim
                         << " over mesh axis " << ds->splits[0].axis
                         << " (low " << low << ", high " << high << "): "
                         << llvm::formatv("{0:F0}", bytes) << " bytes/rank";
      }
    });
  }

  /// The copy of the module with its collectives scheduled (made once, in
  /// `scheduled`).
  ModuleOp scheduledModule(OwningOpRef<ModuleOp> &scheduled) {
    if (!scheduled) {
      scheduled = getOperation().clone();
      scheduleCollectives(*scheduled, maxBytesInFlight);
    }
    return *scheduled;
  }

  /// Per function of a local program (one with `shardx.signature`, after
  /// shardx-spmd, a bufferized one, or any in a module without a mesh): its
  /// per-rank memory
  /// (docs/Memory.md), modeled in the order shardx-compile runs it (on the
  /// scheduled copy when the function has collectives not scheduled yet).
  void printMemory(OwningOpRef<ModuleOp> &scheduled) {
    if (memoryLevel != "tensors" && memoryLevel != "buffers") {
      getOperation().emitError()
          << "memory-level is tensors or buffers, not '" << memoryLevel << "'";
      return signalPassFailure();
    }
    std::string json = "[";
    bool hasMesh = !getOperation().getOps<MeshOp>().empty();
    // memory-level=buffers: a copy through the CPU code generation up to
    // the deallocations, nested in the module while its passes run.
    OwningOpRef<ModuleOp> buffers;
    auto bufferModule = [&](ModuleOp source) -> FailureOr<ModuleOp> {
      if (buffers)
        return *buffers;
      std::string error;
      FailureOr<std::string> pipeline = getCpuBufferPipeline(error);
      // A pass manager of its own on a detached copy (one-shot
      // bufferization of function boundaries does not run on a module
      // nested in another).
      PassManager pm(&getContext());
      if (failed(pipeline) ||
          failed(parsePassPipeline(
              StringRef(*pipeline)
                  .drop_front(StringRef("builtin.module(").size())
                  .drop_back(),
              pm))) {
        getOperation().emitError() << "memory-level=buffers: "
                                   << (error.empty() ? "bad pipeline" : error);
        return failure();
      }
      buffers = cast<ModuleOp>(source->clone());
      if (failed(pm.run(*buffers)))
        return failure();
      return *buffers;
    };
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      bool bufferized = llvm::any_of(
          fn.getArgumentTypes(), [](Type t) { return isa<BaseMemRefType>(t); });
      // A global program with a mesh is not what a rank runs.
      if (!fn->hasAttr("shardx.signature") && !bufferized && hasMesh)
        continue;
      bool unscheduled =
          fn.walk([](Operation *op) {
              return isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op)
                         ? WalkResult::interrupt()
                         : WalkResult::advance();
            }).wasInterrupted();
      func::FuncOp modeled = fn;
      if (unscheduled)
        modeled = scheduledModule(scheduled).lookupSymbol<func::FuncOp>(
            fn.getSymName());
      if (memoryLevel == "buffers" && !bufferized) {
        FailureOr<ModuleOp> lowered =
            bufferModule(modeled->getParentOfType<ModuleOp>());
        if (failed(lowered))
          return signalPassFailure();
        modeled = lowered->lookupSymbol<func::FuncOp>(fn.getSymName());
        if (!modeled)
          continue;
      }
      // The tensor level of a function whose plan recomputes activations
      // (shardx-auto-shard's shardx.recompute, which code generation
      // applies): modeled on a copy with the copies made, as the pass
      // priced it. The buffers level gets them from the pipeline.
      OwningOpRef<ModuleOp> recomputed;
      auto policy = fn->getAttrOfType<StringAttr>(kRecomputePolicyAttrName);
      bool recompute =
          memoryLevel == "tensors" && policy && policy.getValue() != "none";
      if (recompute) {
        recomputed =
            cast<ModuleOp>(modeled->getParentOfType<ModuleOp>()->clone());
        modeled = recomputed->lookupSymbol<func::FuncOp>(fn.getSymName());
        recomputeActivations(modeled, policy.getValue() == "aggressive");
      }
      MemoryProfile profile = computeMemoryProfile(modeled);
      std::string text;
      llvm::raw_string_ostream os(text);
      profile.print(os);
      if (recompute)
        os << "\n  with the plan's recomputation (" << policy.getValue() << ")";
      // At the function's location, without printing the function.
      mlir::emitRemark(fn.getLoc()) << text;
      if (!memoryJson.empty()) {
        json += json.size() > 1 ? ",\n" : "\n";
        llvm::raw_string_ostream js(json);
        profile.printJson(js);
      }
    }
    if (memoryJson.empty())
      return;
    json += "\n]\n";
    std::error_code ec;
    llvm::raw_fd_ostream out(memoryJson, ec);
    if (ec) {
      getOperation().emitError()
          << "cannot write " << memoryJson << ": " << ec.message();
      return signalPassFailure();
    }
    out << json;
  }

  /// Per function with all-reduces, all-gathers or reduce-scatters (a local
  /// program, e.g. after shardx-spmd): the schedule summary of
  /// shardx-schedule-collectives' print-schedule, priced on a scheduled
  /// copy when the function is not scheduled yet.
  void printSchedules(OwningOpRef<ModuleOp> &scheduled) {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> fns;
    for (auto fn : module.getOps<func::FuncOp>()) {
      bool hasCollectives =
          fn.walk([](Operation *op) {
              return isa<AllReduceOp, AllGatherOp, ReduceScatterOp,
                         AllReduceStartOp, AllGatherStartOp,
                         ReduceScatterStartOp>(op)
                         ? WalkResult::interrupt()
                         : WalkResult::advance();
            }).wasInterrupted();
      if (hasCollectives)
        fns.push_back(fn);
    }
    if (fns.empty())
      return;
    SymbolTableCollection symbolTable, scheduledTable;
    for (func::FuncOp fn : fns) {
      auto after = scheduledModule(scheduled).lookupSymbol<func::FuncOp>(
          fn.getSymName());
      InFlightDiagnostic diag = fn.emitRemark();
      describeSchedule(after, modelSchedule(fn, symbolTable, computeRate),
                       modelSchedule(after, scheduledTable, computeRate), diag);
    }
  }
};

} // namespace
