//===- ReportPass.cpp - The shardx-report pass ----------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Report/Passes.h"
#include "shardx/Report/Report.h"

#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace mlir::shardx;

namespace mlir::shardx {
#define GEN_PASS_DEF_REPORTPASS
#include "shardx/Report/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// Whether any op of `module` carries propagated layouts or is a reshard.
bool isPropagated(ModuleOp module) {
  WalkResult r = module.walk([](Operation *op) {
    if (isa<RedistributeOp>(op) ||
        op->hasAttr(ShardXDialect::getLayoutsAttrName()))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return r.wasInterrupted();
}

/// Per op of `module` in walk order: the text of its result and operand
/// layouts.
std::vector<std::string> snapshot(ModuleOp module) {
  std::vector<std::string> out;
  auto layouts = [](Attribute attr) {
    std::string text = "[";
    if (auto array = dyn_cast<ArrayAttr>(attr))
      for (Attribute a : array) {
        text += text.size() > 1 ? "; " : "";
        if (auto layout = dyn_cast<LayoutAttr>(a))
          text += layout.getLayout().str();
        else
          llvm::raw_string_ostream(text) << a;
      }
    return text + "]";
  };
  module.walk([&](Operation *op) {
    std::string text;
    if (Attribute a = op->getAttr(ShardXDialect::getLayoutsAttrName()))
      text += "results " + layouts(a);
    if (Attribute a = op->getAttr(ShardXDialect::getOperandLayoutsAttrName()))
      text +=
          (text.empty() ? "" : ", ") + std::string("operands ") + layouts(a);
    out.push_back(text);
  });
  return out;
}

/// The summed modeled cost of every redistribute of `module`.
LogicalResult reshardCost(ModuleOp module, double &cost, int64_t &count) {
  SymbolTableCollection symbols;
  ReshardPlanners planners;
  cost = 0;
  count = 0;
  WalkResult r = module.walk([&](RedistributeOp op) {
    const Plan *plan = planners.getPlan(op, symbols);
    if (!plan)
      return WalkResult::interrupt();
    cost += plan->cost;
    ++count;
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

struct ReportPass : public mlir::shardx::impl::ReportPassBase<ReportPass> {
  using ReportPassBase::ReportPassBase;

  void getDependentDialects(DialectRegistry &registry) const override {
    ReportPassBase::getDependentDialects(registry);
    // The memory section lowers a copy through the CPU code generation's
    // passes (computeMemoryForReport): their dialects too.
    std::string error;
    if (FailureOr<std::string> text = getCpuBufferPipeline(error);
        succeeded(text))
      if (FailureOr<OpPassManager> pm = parsePassPipeline(*text); succeeded(pm))
        pm->getDependentDialects(registry);
  }

  /// `--shardx-report=out.html` is `output=out.html`.
  LogicalResult initializeOptions(
      StringRef options,
      function_ref<LogicalResult(const Twine &)> errorHandler) override {
    StringRef trimmed = options.trim();
    if (!trimmed.empty() && !trimmed.contains('=')) {
      output = trimmed.str();
      return success();
    }
    return Pass::initializeOptions(options, errorHandler);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (output.empty()) {
      module.emitError("shardx-report needs an output file: "
                       "--shardx-report=out.html");
      return signalPassFailure();
    }
    ReportExtras extras;
    extras.title = title.empty() ? "ShardX sharding report" : title.getValue();
    auto run = [&](function_ref<void(OpPassManager &)> build) {
      OpPassManager pm("builtin.module");
      build(pm);
      return runPipeline(pm, module);
    };
    // The memory model first, on a copy nested in the module while its
    // pipeline runs (prepareForReport changes the module).
    computeMemoryForReport(
        module, extras,
        [&](ModuleOp copy, function_ref<void(OpPassManager &)> build) {
          OpBuilder::atBlockEnd(module.getBody()).insert(copy.getOperation());
          OpPassManager pm("builtin.module");
          build(pm);
          LogicalResult ok = runPipeline(pm, copy);
          copy->remove();
          return ok;
        });
    if (failed(prepareForReport(module, extras, run)))
      return signalPassFailure();
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(output, &error);
    if (!file) {
      module.emitError("shardx-report: ") << error;
      return signalPassFailure();
    }
    if (failed(writeHtmlReport(module, extras, file->os())))
      return signalPassFailure();
    file->keep();
    // The alternatives the report asked propagation for are the report's.
    if (extras.haveChoices)
      module.walk([](Operation *op) { op->removeAttr("shardx.alternatives"); });
  }
};

} // namespace

LogicalResult mlir::shardx::prepareForReport(ModuleOp module,
                                             ReportExtras &extras,
                                             PipelineRunner run) {
  if (isPropagated(module))
    return success();
  // The program-order strategies first, on the module itself (the copy
  // keeps the input), then the refined ones on the input again.
  OwningOpRef<ModuleOp> input(cast<ModuleOp>(module->clone()));
  if (failed(run([](OpPassManager &pm) {
        pm.addPass(createInlinerPass());
        PropagatePassOptions noRefine;
        noRefine.refineGraph = false;
        pm.addPass(createPropagatePass(noRefine));
      })))
    return failure();
  std::vector<std::string> programOrder = snapshot(module);
  auto insert = [](OpPassManager &pm) {
    pm.addPass(createInsertReshardsPass());
  };
  if (failed(run(insert)) || failed(reshardCost(module, extras.programOrderCost,
                                                extras.programOrderReshards)))
    return failure();
  module.getBodyRegion().takeBody(input->getBodyRegion());
  if (failed(run([](OpPassManager &pm) {
        pm.addPass(createInlinerPass());
        PropagatePassOptions record;
        record.recordAlternatives = true;
        pm.addPass(createPropagatePass(record));
      })))
    return failure();
  std::vector<std::string> refined = snapshot(module);
  if (refined.size() == programOrder.size()) {
    extras.haveChoices = true;
    size_t i = 0;
    module.walk([&](Operation *op) {
      // Shape-only values are rematerialized where needed: not a choice.
      if (refined[i] != programOrder[i] &&
          !isa<tensor::EmptyOp, linalg::FillOp>(op))
        extras.choices.push_back({op->getName().getStringRef().str(),
                                  locationText(op->getLoc()), programOrder[i],
                                  refined[i]});
      ++i;
    });
  }
  return failure(
      failed(run(insert)) ||
      failed(reshardCost(module, extras.refinedCost, extras.refinedReshards)));
}

LogicalResult mlir::shardx::prepareForReport(ModuleOp module,
                                             ReportExtras &extras) {
  return prepareForReport(module, extras,
                          [&](function_ref<void(OpPassManager &)> build) {
                            PassManager pm(module->getContext());
                            build(pm);
                            return pm.run(module);
                          });
}
