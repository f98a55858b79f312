//===- MemorySection.cpp - The report's per-rank memory section -----------===//
//
// Part of ShardX.
//
// The memory section of the HTML report (docs/Report.md, docs/Memory.md):
// per function of the local program, the modeled per-rank peak, the bytes
// by role at the peak, the op and source line where it is reached, and the
// bytes alive at each op of the schedule drawn as an SVG step plot.
//
//===----------------------------------------------------------------------===//

#include "shardx/Report/Report.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::shardx;

namespace {


MemorySummary summarize(const MemoryProfile &p) {
  MemorySummary s;
  s.function = p.function;
  s.timeline.assign(p.live.begin(), p.live.end());
  s.peakBytes = p.peakBytes;
  s.argumentBytes = p.argumentBytes;
  s.allocatedPeakBytes = p.allocatedPeakBytes;
  s.peakIndex = p.peakIndex;
  if (Operation *op = p.peakOp()) {
    s.peakOp = op->getName().getStringRef().str();
    s.peakLocation = locationText(op->getLoc());
  }
  for (size_t r = 0; r < kNumMemoryRoles; ++r)
    if (p.peakByRole[r])
      s.byRole.emplace_back(memoryRoleName(static_cast<MemoryRole>(r)).str(),
                            p.peakByRole[r]);
  return s;
}

/// `v` with one decimal (raw_ostream prints doubles in exponent form).
std::string num(double v) { return llvm::formatv("{0:F1}", v).str(); }

/// The step plot of `s.timeline`: bytes alive (y) at each op (x), the
/// arguments as a dashed line, the peak marked.
void writePlot(llvm::raw_ostream &os, const MemorySummary &s) {
  const double width = 640, height = 180, left = 70, right = 10, top = 10,
               bottom = 28;
  size_t n = s.timeline.size();
  if (n == 0)
    return;
  int64_t maxBytes = std::max<int64_t>(1, s.peakBytes);
  auto x = [&](double i) {
    return left + (width - left - right) * i / static_cast<double>(n);
  };
  auto y = [&](int64_t bytes) {
    return top + (height - top - bottom) *
                     (1.0 - static_cast<double>(bytes) / maxBytes);
  };
  os << "<svg class=\"memory-plot\" xmlns=\"http://www.w3.org/2000/svg\" "
        "width=\""
     << num(width) << "\" height=\"" << num(height)
     << "\" role=\"img\" aria-label=\""
     << "bytes alive per op of @" << escapeHtml(s.function) << "\">";
  os << "<rect class=\"frame\" x=\"" << num(left) << "\" y=\"" << num(top)
     << "\" width=\"" << num(width - left - right) << "\" height=\""
     << num(height - top - bottom) << "\"/>";
  // The area under the step line.
  os << "<path class=\"memory-area\" d=\"M" << num(x(0)) << "," << num(y(0));
  for (size_t i = 0; i < n; ++i)
    os << " L" << llvm::formatv("{0:F1}", x(i)) << ","
       << llvm::formatv("{0:F1}", y(s.timeline[i])) << " L"
       << llvm::formatv("{0:F1}", x(i + 1)) << ","
       << llvm::formatv("{0:F1}", y(s.timeline[i]));
  os << " L" << num(x(n)) << "," << num(y(0)) << " Z\"/>";
  os << "<line class=\"memory-args\" x1=\"" << num(left) << "\" x2=\""
     << num(width - right) << "\" y1=\"" << num(y(s.argumentBytes))
     << "\" y2=\"" << num(y(s.argumentBytes)) << "\"/>";
  if (s.peakIndex >= 0) {
    os << "<circle class=\"memory-peak\" cx=\""
       << llvm::formatv("{0:F1}", x(s.peakIndex + 0.5)) << "\" cy=\""
       << num(y(s.peakBytes)) << "\" r=\"3\"><title>peak "
       << formatBytes(s.peakBytes) << " at op " << s.peakIndex + 1 << " ("
       << escapeHtml(s.peakOp) << ")</title></circle>";
  }
  os << "<text x=\"" << num(left - 4) << "\" y=\"" << num(top + 8)
     << "\" style=\"text-anchor:end\">" << formatBytes(maxBytes) << "</text>";
  os << "<text x=\"" << num(left - 4) << "\" y=\""
     << num(y(s.argumentBytes) + 4)
     << "\" style=\"text-anchor:end\">args</text>";
  os << "<text x=\"" << num(left - 4) << "\" y=\"" << num(height - bottom)
     << "\" style=\"text-anchor:end\">0</text>";
  os << "<text x=\"" << num((left + width - right) / 2) << "\" y=\""
     << num(height - 8) << "\">op (schedule order, 1 to " << n << ")</text>";
  os << "</svg>";
}

} // namespace

void mlir::shardx::computeMemoryForReport(ModuleOp module, ReportExtras &extras,
                                          ModulePipelineRunner run) {
  extras.memory.clear();
  extras.memoryNote.clear();
  // A local program is modeled as it is; a global one on a copy through
  // shardx-spmd with its collectives scheduled, as shardx-compile does for
  // the CPU.
  bool local = llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp f) {
    return f->hasAttr("shardx.signature");
  });
  OwningOpRef<ModuleOp> copy;
  ModuleOp modeled = module;
  if (!local && !module.getOps<MeshOp>().empty()) {
    copy = cast<ModuleOp>(module->clone());
    std::string diagnostics;
    LogicalResult ok = success();
    {
      ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error)
          diagnostics += d.str() + "; ";
        return success();
      });
      ok = run(*copy, [](OpPassManager &pm) {
        SpmdPipelineOptions options;
        options.scheduleCollectives = true;
        buildSpmdPipeline(pm, options);
      });
    }
    if (failed(ok)) {
      extras.memoryNote =
          "not modeled: shardx-spmd failed on a copy (" + diagnostics + ")";
      return;
    }
    modeled = *copy;
  }
  for (auto fn : modeled.getOps<func::FuncOp>())
    if (!fn.isExternal())
      extras.memory.push_back(summarize(computeMemoryProfile(fn)));
  // The same lowered to buffers, where the CPU code generation's passes
  // are registered (a pass manager of its own on a detached copy, as
  // shardx-print-plan{memory-level=buffers}).
  std::string error;
  FailureOr<std::string> pipeline = getCpuBufferPipeline(error);
  if (failed(pipeline))
    return;
  PassManager pm(module.getContext());
  if (failed(
          parsePassPipeline(StringRef(*pipeline)
                                .drop_front(StringRef("builtin.module(").size())
                                .drop_back(),
                            pm)))
    return;
  OwningOpRef<ModuleOp> lowered = cast<ModuleOp>(modeled->clone());
  {
    ScopedDiagnosticHandler quiet(module.getContext(),
                                  [](Diagnostic &) { return success(); });
    if (failed(pm.run(*lowered)))
      return;
  }
  for (MemorySummary &s : extras.memory)
    if (auto fn = lowered->lookupSymbol<func::FuncOp>(s.function))
      s.bufferPeakBytes = computeMemoryProfile(fn).peakBytes;
}

void mlir::shardx::writeMemorySection(llvm::raw_ostream &os,
                                      const ReportExtras &extras) {
  if (extras.memory.empty() && extras.memoryNote.empty())
    return;
  os << "<section id=\"memory\"><h2>memory per rank</h2><p>The modeled "
        "bytes each rank holds while its local program runs "
        "(docs/Memory.md): the arguments for the whole call, each buffer "
        "the program allocates from the op that makes it to its last use; "
        "in the order shardx-compile runs the program for the CPU "
        "(collectives scheduled). Local shapes are static, so every rank "
        "of the mesh has this profile.</p>";
  if (!extras.memoryNote.empty())
    os << "<p class=\"note\">" << escapeHtml(extras.memoryNote) << "</p>";
  for (const MemorySummary &s : extras.memory) {
    os << "<div class=\"memory\" id=\"memory-" << escapeHtml(s.function)
       << "\" data-peak-bytes=\"" << s.peakBytes << "\"><h3>func @"
       << escapeHtml(s.function) << ": peak " << formatBytes(s.peakBytes)
       << "</h3><p>peak " << s.peakBytes << " bytes";
    if (s.peakIndex >= 0)
      os << " at op " << s.peakIndex + 1 << " of " << s.timeline.size()
         << " (<code>" << escapeHtml(s.peakOp) << "</code>"
         << (s.peakLocation.empty() ? "" : ", " + escapeHtml(s.peakLocation))
         << ")";
    os << "; arguments " << formatBytes(s.argumentBytes)
       << ", allocated by the program at the peak "
       << formatBytes(s.allocatedPeakBytes) << ".";
    if (s.bufferPeakBytes >= 0)
      os << " Lowered to buffers as the CPU code generation does (what the "
            "runtime allocates): peak <span class=\"buffer-peak\" "
            "data-bytes=\""
         << s.bufferPeakBytes << "\">" << formatBytes(s.bufferPeakBytes)
         << "</span>.";
    os << "</p>";
    os << "<table class=\"memory-roles\"><thead><tr><th>at the peak</th>"
          "<th>bytes</th><th>share</th></tr></thead><tbody>";
    for (const auto &[role, bytes] : s.byRole)
      os << "<tr><td>" << escapeHtml(role) << "</td><td>" << bytes
         << "</td><td>"
         << llvm::formatv("{0:F1}%",
                          100.0 * bytes / std::max<int64_t>(1, s.peakBytes))
         << "</td></tr>";
    os << "</tbody></table>";
    writePlot(os, s);
    os << "</div>";
  }
  os << "</section>";
}
