//===- AlternativesSection.cpp - The report's strategy alternatives ------===//
//
// Part of ShardX.
//
// The HTML report's table of each op's chosen strategy and the others
// propagation priced (`shardx.alternatives`, shardx-propagate's
// record-alternatives option), with their modeled costs.
//
//===----------------------------------------------------------------------===//

#include "shardx/Report/Report.h"

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// "[S(0), R], [R, R]": the layouts of an array attribute.
std::string layoutsText(Attribute attr) {
  std::string text;
  if (auto array = dyn_cast_or_null<ArrayAttr>(attr))
    for (Attribute a : array) {
      text += text.empty() ? "" : ", ";
      if (auto layout = dyn_cast<LayoutAttr>(a))
        text += layout.getLayout().str();
    }
  return text.empty() ? "()" : text;
}

/// The strategy each op has and its alternatives with their costs, from
/// `shardx.alternatives` (shardx-propagate{record-alternatives}).
} // namespace

void mlir::shardx::writeAlternativesSection(llvm::raw_ostream &os,
                                            ModuleOp module) {
  SmallVector<Operation *> ops;
  int64_t priced = 0;
  module.walk([&](Operation *op) {
    auto alternatives = op->getAttrOfType<ArrayAttr>("shardx.alternatives");
    // Shape-only values are rematerialized where needed: not a choice.
    if (!alternatives || isa<tensor::EmptyOp, linalg::FillOp>(op))
      return;
    ++priced;
    if (!alternatives.empty())
      ops.push_back(op);
  });
  if (priced == 0)
    return;
  os << "<h3>strategies and alternatives</h3><p class=\"note\">per op, the "
        "strategy propagation chose (operand layouts &rarr; result layouts) "
        "and the others it priced at the end, each with what it would add to "
        "the function's modeled time (reshards and local work) if only that "
        "op changed</p><details id=\"alternatives\"><summary>"
     << ops.size() << " of " << priced
     << " ops had another strategy</summary><table class=\"sortable\"><thead><tr><th>op</th><th>"
        "source location</th><th>phase</th><th>chosen</th><th>alternatives"
        "</th><th>cheapest alternative (+us)</th></tr></thead><tbody>";
  for (Operation *op : ops) {
    auto alternatives = op->getAttrOfType<ArrayAttr>("shardx.alternatives");
    std::string items, costs;
    double cheapest = 0;
    for (auto [i, a] : llvm::enumerate(alternatives)) {
      auto entry = cast<DictionaryAttr>(a);
      double cost = cast<FloatAttr>(entry.get("cost")).getValueAsDouble();
      if (i == 0)
        cheapest = cost;
      costs += (i ? "," : "") + llvm::formatv("{0:F6}", cost).str();
      items += std::string("<li><span class=\"num\">") +
               (cost >= 0 ? "+" : "") + llvm::formatv("{0:F3}", cost).str() +
               " us</span> <code>" +
               escapeHtml(layoutsText(entry.get("operands"))) + " &rarr; " +
               escapeHtml(layoutsText(entry.get("results"))) + "</code></li>";
    }
    os << "<tr class=\"alternative\" data-count=\"" << alternatives.size()
       << "\" data-costs=\"" << costs << "\"><td>" << escapeHtml(op->getName().getStringRef()) << "</td><td>"
       << escapeHtml(locationText(op->getLoc())) << "</td><td>"
       << escapeHtml(getTrainStepPhase(op->getLoc())) << "</td><td><code>"
       << escapeHtml(layoutsText(
              op->getAttr(ShardXDialect::getOperandLayoutsAttrName())))
       << " &rarr; "
       << escapeHtml(layoutsText(op->getAttr(ShardXDialect::getLayoutsAttrName())))
       << "</code></td><td><ol>" << items << "</ol></td><td class=\"num\" "
       << "data-v=\"" << llvm::formatv("{0:F6}", cheapest) << "\">"
       << (alternatives.empty() ? std::string("none")
                                : llvm::formatv("{0:F3}", cheapest).str())
       << "</td></tr>\n";
  }
  os << "</tbody></table></details>";
}
