//===- HtmlReport.cpp - The HTML sharding report --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Writes one self-contained HTML page (inline CSS, SVG and a little
// JavaScript; nothing fetched) from a propagated program with its
// redistributes. The DOM is part of the interface: the tests read
//   .value[data-kind=arg|result]  a value, with .picture[data-shards] and
//                                 one g.shard[data-ranks][data-term] per shard
//   tr.reshard[data-bytes][data-us] one row per shardx.redistribute
//   #totals tr.total[data-reshards][data-collectives][data-bytes][data-us]
//   tr.reshard[data-location][data-phase] its source line and train phase
//   #by-kind, #by-axes            the same per collective kind / axis group
//   #by-phase                     reshards per forward / backward / optimizer
//   #alternatives tr.alternative[data-count][data-costs] an op's other
//                                 strategies, their added us, cheapest first
// (docs/Report.md).
//
//===----------------------------------------------------------------------===//

#include "shardx/Report/Report.h"

#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/RecordedLayouts.h"
#include "shardx/Report/Blocks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AsmState.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// At most this many rectangles per picture; beyond, the picture says so.
constexpr int64_t kMaxRects = 4096;
/// Pictures are this many pixels on their long side.
constexpr double kPictureSize = 240;

} // namespace

std::string mlir::shardx::escapeHtml(StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string mlir::shardx::locationText(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (file.getFilename().getValue() + ":" + Twine(file.getLine()) +
            (file.getColumn() ? ":" + Twine(file.getColumn()) : Twine()))
        .str();
  if (auto name = dyn_cast<NameLoc>(loc)) {
    std::string child = locationText(name.getChildLoc());
    return name.getName().str() + (child.empty() ? "" : " (" + child + ")");
  }
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    std::string out;
    for (Location l : fused.getLocations()) {
      std::string t = locationText(l);
      if (!t.empty())
        out += (out.empty() ? "" : "; ") + t;
    }
    return out;
  }
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return locationText(call.getCallee());
  if (isa<UnknownLoc>(loc))
    return "";
  std::string out;
  llvm::raw_string_ostream os(out);
  loc.print(os);
  return out;
}

namespace {

std::string rankColor(int64_t rank) {
  double hue = std::fmod(static_cast<double>(rank) * 137.508, 360.0);
  return llvm::formatv("hsl({0:F0},70%,78%)", hue).str();
}

std::string joinInts(ArrayRef<int64_t> v, StringRef sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? sep.str() : "") + std::to_string(v[i]);
  return out;
}

std::string shapeText(ArrayRef<int64_t> shape) {
  return shape.empty() ? "scalar" : joinInts(shape, "x");
}

/// The mesh as the report uses it.
struct MeshInfo {
  MeshOp op;
  std::vector<int64_t> shape;
  std::vector<std::string> axisNames;
  int64_t size = 1;

  explicit MeshInfo(MeshOp mesh) : op(mesh) {
    shape.assign(mesh.getShape().begin(), mesh.getShape().end());
    std::optional<ArrayAttr> axes = mesh.getAxes();
    for (size_t a = 0; a < shape.size(); ++a) {
      size *= shape[a];
      axisNames.push_back(axes ? cast<StringAttr>((*axes)[a]).getValue().str()
                               : "axis" + std::to_string(a));
    }
  }
  std::string coordsOf(int64_t rank) const {
    std::vector<int64_t> c(shape.size());
    for (int64_t a = static_cast<int64_t>(shape.size()) - 1; a >= 0; --a) {
      c[a] = rank % shape[a];
      rank /= shape[a];
    }
    return "(" + joinInts(c, ",") + ")";
  }
  std::string groupName(ArrayRef<int64_t> axes) const {
    std::string out;
    for (int64_t a : axes)
      out += (out.empty() ? "" : ",") + axisNames[a];
    return out;
  }
};

/// Writes the picture of `layout` for a tensor of `shape`.
void writePicture(llvm::raw_ostream &os, const MeshInfo &mesh,
                  const Layout &layout, ArrayRef<int64_t> shape) {
  report::Picture picture;
  std::string error;
  std::vector<int64_t> global(shape.begin(), shape.end());
  if (!report::computePicture(layout, mesh.shape, global, kMaxRects, picture,
                              error)) {
    os << "<div class=\"picture none\">not drawn: " << escapeHtml(error)
       << "</div>";
    return;
  }
  double rows = static_cast<double>(std::max<int64_t>(1, picture.view.rows));
  double cols = static_cast<double>(std::max<int64_t>(1, picture.view.cols));
  double w = kPictureSize, h = kPictureSize;
  if (rows > cols)
    w = std::max(16.0, kPictureSize * cols / rows);
  else
    h = std::max(16.0, kPictureSize * rows / cols);
  if (shape.size() <= 1)
    h = 24;
  std::string op;
  if (!picture.partialAxes.empty()) {
    std::optional<ReduceOp> reduce =
        layout.getPartials()[picture.partialAxes.front()];
    op = stringifyReduceOp(*reduce);
  }
  os << "<div class=\"picture\" data-shards=\"" << picture.shards.size()
     << "\" data-terms=\"" << picture.numTerms << "\" data-rows=\""
     << picture.view.rows << "\" data-cols=\"" << picture.view.cols << "\">";
  if (picture.numTerms > 1)
    os << "<div class=\"terms-note\">" << picture.numTerms << " terms, P(" << op
       << ") over " << escapeHtml(mesh.groupName(picture.partialAxes))
       << ": the value is their " << op << "</div>";
  os << "<div class=\"terms\">";
  size_t s = 0;
  for (int64_t term = 0; term < picture.numTerms; ++term) {
    os << "<div class=\"term\" style=\"margin-left:"
       << llvm::formatv("{0:F0}", term ? -w + 10 : 0.0)
       << "px;margin-top:" << term * 10
       << "px;z-index:" << picture.numTerms - term
       << "\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
       << llvm::formatv("{0:F1}", w) << "\" height=\""
       << llvm::formatv("{0:F1}", h) << "\">";
    os << "<rect class=\"frame\" x=\"0\" y=\"0\" width=\""
       << llvm::formatv("{0:F1}", w) << "\" height=\""
       << llvm::formatv("{0:F1}", h) << "\"/>";
    for (; s < picture.shards.size() && picture.shards[s].term == term; ++s) {
      const report::ShardBlocks &shard = picture.shards[s];
      std::string ranks = joinInts(shard.ranks, ",");
      std::string title =
          "rank" + std::string(shard.ranks.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < shard.ranks.size(); ++i)
        title += (i ? ", " : "") + std::to_string(shard.ranks[i]) +
                 mesh.coordsOf(shard.ranks[i]);
      title += ": local " + shapeText(shard.localShape);
      if (picture.numTerms > 1)
        title += ", term " + std::to_string(term);
      os << "<g class=\"shard\" data-ranks=\"" << ranks << "\" data-term=\""
         << term << "\" data-local=\"" << shapeText(shard.localShape)
         << "\"><title>" << escapeHtml(title) << "</title>";
      for (const report::Rect &r : shard.rects) {
        double x = r.col * w / cols, y = r.row * h / rows;
        double rw = r.cols * w / cols, rh = r.rows * h / rows;
        os << "<rect x=\"" << llvm::formatv("{0:F2}", x) << "\" y=\""
           << llvm::formatv("{0:F2}", y) << "\" width=\""
           << llvm::formatv("{0:F2}", rw) << "\" height=\""
           << llvm::formatv("{0:F2}", rh) << "\" fill=\""
           << rankColor(shard.ranks.front()) << "\" data-cells=\"" << r.row
           << "," << r.col << "," << r.rows << "," << r.cols << "\"/>";
        std::string label = shard.ranks.size() <= 4
                                ? joinInts(shard.ranks, " ")
                                : std::to_string(shard.ranks.front()) + "…" +
                                      std::to_string(shard.ranks.back());
        if (rw >= 7.0 * label.size() + 4 && rh >= 13)
          os << "<text x=\"" << llvm::formatv("{0:F1}", x + rw / 2) << "\" y=\""
             << llvm::formatv("{0:F1}", y + rh / 2 + 4) << "\">" << label
             << "</text>";
      }
      os << "</g>\n";
    }
    os << "</svg></div>";
  }
  os << "</div></div>";
}

/// Writes the mesh: one cell per rank in its colour.
void writeMesh(llvm::raw_ostream &os, const MeshInfo &mesh) {
  os << "<div class=\"mesh\"><h3>mesh @" << escapeHtml(MeshOp(mesh.op).getSymName())
     << ": " << joinInts(mesh.shape, " x ") << " (";
  for (size_t a = 0; a < mesh.shape.size(); ++a)
    os << (a ? ", " : "") << escapeHtml(mesh.axisNames[a]) << " = "
       << mesh.shape[a];
  os << "), " << mesh.size << " ranks</h3>";
  MeshSpec spec = getMeshSpec(mesh.op);
  os << "<p class=\"note\">cost model per axis: ";
  for (size_t a = 0; a < mesh.shape.size(); ++a) {
    AxisCost c = spec.getCost(a);
    os << (a ? "; " : "") << escapeHtml(mesh.axisNames[a]) << " "
       << llvm::formatv("{0} us + bytes / {1} GB/s", c.latencyUs,
                        c.bandwidthGBps);
  }
  os << "</p>";
  int64_t cols = mesh.shape.empty() ? 1 : mesh.size / mesh.shape.front();
  if (mesh.shape.size() == 1)
    cols = mesh.size;
  os << "<div class=\"meshgrid\" style=\"grid-template-columns:repeat(" << cols
     << ",auto)\">";
  for (int64_t r = 0; r < mesh.size; ++r)
    os << "<div class=\"rank\" style=\"background:" << rankColor(r)
       << "\">rank " << r << "<br><small>" << mesh.coordsOf(r)
       << "</small></div>";
  os << "</div></div>";
}

struct Aggregate {
  int64_t count = 0;
  double bytes = 0, us = 0;

  void add(double stepBytes, double stepUs) {
    ++count;
    bytes += stepBytes;
    us += stepUs;
  }
};

/// The communication of the whole module: reshards in all and per phase;
/// collectives per kind, per axis group and per both.
struct Totals {
  Aggregate reshards;
  std::map<std::string, Aggregate> byPhase, byKind, byAxes, byKindAxes;
};

/// The report of one function.
class FunctionReport {
public:
  FunctionReport(func::FuncOp fn, std::optional<MeshInfo> mesh,
                 ReshardPlanners &planners, SymbolTableCollection &symbols,
                 llvm::raw_ostream &os)
      : fn(fn), mesh(std::move(mesh)), planners(planners), symbols(symbols),
        os(os), asmState(fn) {}

  LogicalResult write(Totals &totals);

private:
  /// The table of the function's reshards, added to `totals`.
  LogicalResult writeReshards(Totals &totals);
  /// The arguments' and results' layouts as pictures.
  void writeSignature();
  /// Every intermediate value, each picture drawn on demand.
  void writeIntermediates();

  std::string name(Value v) {
    std::string out;
    llvm::raw_string_ostream s(out);
    v.printAsOperand(s, asmState);
    return out;
  }
  Layout layoutOf(LayoutAttr attr) const {
    return attr ? attr.getLayout()
                : Layout(static_cast<int64_t>(mesh->shape.size()));
  }
  void writeValue(StringRef kind, int64_t index, StringRef label, Type type,
                  LayoutAttr layout, StringRef extra);
  std::string pictureId(RankedTensorType type, LayoutAttr layout);

  func::FuncOp fn;
  std::optional<MeshInfo> mesh;
  ReshardPlanners &planners;
  SymbolTableCollection &symbols;
  llvm::raw_ostream &os;
  AsmState asmState;
  /// Pictures of intermediates, written once per (shape, layout) into
  /// templates that the page clones on demand.
  std::map<std::string, std::pair<RankedTensorType, LayoutAttr>> templates;
};

void FunctionReport::writeValue(StringRef kind, int64_t index, StringRef label,
                                Type type, LayoutAttr layout, StringRef extra) {
  std::string typeText;
  llvm::raw_string_ostream(typeText) << type;
  std::string layoutText = layout ? layout.getLayout().str() : "[R...]";
  if (!layout && mesh)
    layoutText = layoutOf(layout).str();
  os << "<div class=\"value\" data-kind=\"" << kind << "\" data-index=\""
     << index << "\" data-layout=\"" << escapeHtml(layoutText) << "\">";
  os << "<div class=\"vhead\"><b>" << escapeHtml(label) << "</b> <code>"
     << escapeHtml(typeText) << "</code>" << extra << "<br><code class=\"layout\">"
     << escapeHtml(layoutText) << "</code></div>";
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (mesh && tensor && tensor.hasStaticShape())
    writePicture(os, *mesh, layoutOf(layout), tensor.getShape());
  os << "</div>";
}

std::string FunctionReport::pictureId(RankedTensorType type,
                                      LayoutAttr layout) {
  std::string key = shapeText(type.getShape()) + " " +
                    (layout ? layout.getLayout().str() : "");
  auto it = templates.find(key);
  if (it == templates.end())
    it = templates.insert({key, {type, layout}}).first;
  return "pic-" + fn.getName().str() + "-" +
         std::to_string(std::distance(templates.begin(), it));
}

LogicalResult FunctionReport::write(Totals &totals) {
  os << "<section class=\"function\" id=\"fn-" << escapeHtml(fn.getName())
     << "\"><h2>func @" << escapeHtml(fn.getName()) << "</h2>";
  if (!mesh)
    os << "<p class=\"note\">no layouts: every value is replicated</p>";
  else
    writeMesh(os, *mesh);

  if (failed(writeReshards(totals)))
    return failure();
  writeSignature();
  writeIntermediates();
  os << "</section>";
  return success();
}

LogicalResult FunctionReport::writeReshards(Totals &totals) {
  Aggregate fnTotal;
  std::string rows;
  llvm::raw_string_ostream rowsOs(rows);
  int64_t index = 0;
  bool anyPhase = false;
  WalkResult walk = fn.walk([&](RedistributeOp op) {
    const Plan *plan = planners.getPlan(op, symbols);
    if (!plan)
      return WalkResult::interrupt();
    std::string producer = "argument";
    if (Operation *def = op.getInput().getDefiningOp())
      producer = def->getName().getStringRef().str();
    // The phase of the producer the reshard follows, else of a consumer
    // (an argument's reshard belongs to the phase that reads it).
    std::string consumers, phase = getTrainStepPhase(op.getLoc()).str();
    for (Operation *user : op->getUsers()) {
      std::string n = user->getName().getStringRef().str();
      if (consumers.find(n) == std::string::npos)
        consumers += (consumers.empty() ? "" : ", ") + n;
      if (phase.empty())
        phase = getTrainStepPhase(user->getLoc()).str();
    }
    anyPhase |= !phase.empty();
    std::string typeText;
    llvm::raw_string_ostream(typeText) << op.getType();
    std::string steps;
    for (const Step &step : plan->steps) {
      steps +=
          "<li" + std::string(step.isCollective() ? "" : " class=\"local\"") +
          ">" + escapeHtml(step.str()) + " <span class=\"num\">" +
          llvm::formatv("{0:F0} B, {1:F3} us", step.bytesPerRank, step.cost)
              .str() +
          "</span></li>";
      if (!step.isCollective())
        continue;
      std::string kind = stringifyStepKind(step.kind);
      std::string group = mesh->groupName(step.axes);
      for (Aggregate *a : {&totals.byKind[kind], &totals.byAxes[group],
                           &totals.byKindAxes[kind + "|" + group]})
        a->add(step.bytesPerRank, step.cost);
    }
    fnTotal.add(plan->bytesPerRank, plan->cost);
    totals.byPhase[phase.empty() ? "(none)" : phase].add(plan->bytesPerRank,
                                                        plan->cost);
    std::string location = locationText(op.getLoc());
    rowsOs << "<tr class=\"reshard\" data-location=\"" << escapeHtml(location)
           << "\" data-phase=\"" << escapeHtml(phase) << "\" data-bytes=\""
           << llvm::formatv("{0:F0}", plan->bytesPerRank) << "\" data-us=\""
           << llvm::formatv("{0:F6}", plan->cost) << "\" data-collectives=\""
           << plan->numCollectives() << "\"><td data-v=\"" << index << "\">"
           << index << "</td><td>" << escapeHtml(location)
           << "</td><td><code>" << escapeHtml(name(op.getResult()))
           << "</code><br><small>" << escapeHtml(producer) << " &rarr; "
           << escapeHtml(consumers) << "</small></td><td><code>" << escapeHtml(typeText)
           << "</code></td><td><code>"
           << escapeHtml(op.getSource().getLayout().str())
           << "</code> &rarr; <code>"
           << escapeHtml(op.getTarget().getLayout().str())
           << "</code></td><td data-v=\"" << plan->numCollectives() << "\"><ol>"
           << steps << "</ol></td><td class=\"num\" data-v=\""
           << llvm::formatv("{0:F0}", plan->bytesPerRank) << "\">"
           << llvm::formatv("{0:F0}", plan->bytesPerRank)
           << "</td><td class=\"num\" data-v=\""
           << llvm::formatv("{0:F6}", plan->cost) << "\">"
           << llvm::formatv("{0:F3}", plan->cost) << "</td><td>"
           << escapeHtml(phase) << "</td></tr>\n";
    ++index;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  totals.reshards.count += fnTotal.count;
  totals.reshards.bytes += fnTotal.bytes;
  totals.reshards.us += fnTotal.us;
  os << "<h3>reshards (" << fnTotal.count << ", "
     << llvm::formatv("{0:F0}", fnTotal.bytes) << " bytes/rank, "
     << llvm::formatv("{0:F3}", fnTotal.us) << " us modeled)</h3>";
  if (!anyPhase)
    os << "<p class=\"note\">phase: the program marks no forward / backward / "
          "optimizer ops (the importer marks them in each op's location, "
          "<code>loc(fused&lt;\"backward\"&gt;[...])</code>, when it traces a "
          "<code>shardx.TrainStep</code>)</p>";
  os << "<table class=\"sortable reshards\"><thead><tr><th>#</th><th>source "
        "location</th><th>value (producer &rarr; consumers)</th><th>type</th>"
        "<th>source &rarr; target layout</th><th>plan steps</th><th>bytes/rank"
        "</th><th>modeled us</th><th>phase</th></tr></thead><tbody>"
     << rows << "</tbody></table>";
  return success();
}

void FunctionReport::writeSignature() {
  os << "<h3>arguments</h3><div class=\"values\">";
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    std::string extra;
    for (NamedAttribute attr :
         mlir::function_interface_impl::getArgAttrs(fn, i)) {
      if (attr.getName().getValue().starts_with("shardx."))
        continue;
      std::string value;
      if (auto str = dyn_cast<StringAttr>(attr.getValue()))
        value = str.getValue().str();
      else
        llvm::raw_string_ostream(value) << attr.getValue();
      extra += " <span class=\"tag\">" + escapeHtml(attr.getName().getValue()) +
               " = " + escapeHtml(value) + "</span>";
    }
    writeValue("arg", i, name(fn.getArgument(i)), fn.getArgument(i).getType(),
               getRecordedLayout(fn.getArgument(i)), extra);
  }
  os << "</div><h3>results</h3><div class=\"values\">";
  Operation *ret = fn.getBody().front().getTerminator();
  for (unsigned i = 0; i < fn.getNumResults(); ++i) {
    auto layout = fn.getResultAttrOfType<LayoutAttr>(
        i, ShardXDialect::getLayoutAttrName());
    if (!layout && ret && i < ret->getNumOperands())
      layout = getRecordedLayout(ret->getOperand(i));
    writeValue("result", i, "result " + std::to_string(i),
               fn.getResultTypes()[i], layout,
               ret ? " <span class=\"tag\">returns " +
                         escapeHtml(name(ret->getOperand(i))) + "</span>"
                   : "");
  }
  os << "</div>";
}

void FunctionReport::writeIntermediates() {
  std::string values;
  llvm::raw_string_ostream valuesOs(values);
  int64_t numValues = 0;
  fn.walk([&](Operation *op) {
    if (isa<RedistributeOp, func::ReturnOp>(op))
      return;
    for (OpResult result : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type)
        continue;
      LayoutAttr layout = getRecordedLayout(result);
      std::string typeText;
      llvm::raw_string_ostream(typeText) << type;
      valuesOs << "<tr><td><code>" << escapeHtml(name(result)) << "</code></td><td>"
               << escapeHtml(op->getName().getStringRef()) << "</td><td>"
               << escapeHtml(locationText(op->getLoc())) << "</td><td><code>"
               << escapeHtml(typeText) << "</code></td><td><code>"
               << escapeHtml(mesh ? layoutOf(layout).str() : "")
               << "</code></td><td>";
      if (mesh && type.hasStaticShape())
        valuesOs << "<button data-pic=\"" << pictureId(type, layout)
                 << "\">show</button>";
      valuesOs << "</td></tr>\n";
      ++numValues;
    }
  });
  os << "<details class=\"intermediates\"><summary>intermediate values ("
     << numValues
     << ")</summary><table class=\"sortable\"><thead><tr><th>"
        "value</th><th>op</th><th>source location</th><th>type</th><th>layout"
        "</th><th>picture</th></tr></thead><tbody>"
     << values << "</tbody></table></details>";
  int64_t t = 0;
  for (auto &[key, entry] : templates) {
    os << "<template id=\"pic-" << escapeHtml(fn.getName()) << "-" << t++ << "\">";
    writePicture(os, *mesh, layoutOf(entry.second), entry.first.getShape());
    os << "</template>";
  }
}

void writeAggregates(llvm::raw_ostream &os, StringRef id, StringRef what,
                     const std::map<std::string, Aggregate> &aggregates,
                     StringRef counted = "collectives") {
  os << "<table class=\"sortable\" id=\"" << id << "\"><thead><tr><th>" << what
     << "</th><th>" << counted << "</th><th>bytes/rank</th><th>modeled us"
     << "</th></tr></thead><tbody>";
  for (const auto &[key, a] : aggregates)
    os << "<tr data-key=\"" << escapeHtml(key) << "\" data-count=\"" << a.count
       << "\" data-bytes=\"" << llvm::formatv("{0:F0}", a.bytes)
       << "\" data-us=\"" << llvm::formatv("{0:F6}", a.us) << "\"><td>"
       << escapeHtml(key) << "</td><td class=\"num\">" << a.count
       << "</td><td class=\"num\" data-v=\"" << llvm::formatv("{0:F0}", a.bytes)
       << "\">" << llvm::formatv("{0:F0}", a.bytes) << "</td><td class=\"num\" "
       << "data-v=\"" << llvm::formatv("{0:F6}", a.us) << "\">"
       << llvm::formatv("{0:F3}", a.us) << "</td></tr>\n";
  os << "</tbody></table>";
}

constexpr const char *kStyle = R"css(
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}
h1{font-size:20px}h2{font-size:18px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:14px 0 6px}
code{font:12px ui-monospace,monospace}
.note{color:#666;font-size:12px;margin:2px 0}
.meshgrid{display:inline-grid;gap:3px}
.rank{padding:4px 8px;border-radius:3px;text-align:center;font-size:12px}
.values{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start}
svg{display:block}
.value{border:1px solid #ddd;border-radius:4px;padding:6px;max-width:300px}
.vhead{font-size:12px;margin-bottom:4px}
.tag{background:#eef;border-radius:3px;padding:0 3px;font-size:11px}
.terms{display:flex;align-items:flex-start}
.term{position:relative;background:#fff;box-shadow:1px 1px 3px #888}
.terms-note{font-size:11px;color:#a40}
svg text{font:10px sans-serif;text-anchor:middle;fill:#222}
svg rect{stroke:#fff;stroke-width:.5}
svg rect.frame{fill:#f4f4f4;stroke:#999}
svg .memory-area{fill:#9ecae1;stroke:#3182bd;stroke-width:1}
svg .memory-args{stroke:#636363;stroke-dasharray:4 3}
svg .memory-peak{fill:#de2d26}
table{border-collapse:collapse;font-size:12px;margin:4px 0}
td,th{border:1px solid #ddd;padding:2px 6px;vertical-align:top}
th{background:#f3f3f3;cursor:pointer;user-select:none}
th.asc:after{content:" \25B2"}th.desc:after{content:" \25BC"}
td.num,.num{text-align:right;font-variant-numeric:tabular-nums}
ol{margin:0;padding-left:18px}li.local{color:#777}
tr.total td{font-weight:bold}
)css";

constexpr const char *kScript = R"js(
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('th').forEach(function(th,col){
    th.addEventListener('click',function(){
      var body=table.tBodies[0],rows=Array.from(body.rows);
      var asc=!th.classList.contains('asc');
      table.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc');});
      th.classList.add(asc?'asc':'desc');
      function key(r){var c=r.cells[col];var v=c.getAttribute('data-v');
        return v!==null?parseFloat(v):c.textContent;}
      rows.sort(function(a,b){var x=key(a),y=key(b);
        var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
        return asc?c:-c;});
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
});
document.querySelectorAll('button[data-pic]').forEach(function(b){
  b.addEventListener('click',function(){
    var t=document.getElementById(b.getAttribute('data-pic'));
    b.parentNode.replaceChild(t.content.cloneNode(true),b);
  });
});
)js";

} // namespace

LogicalResult mlir::shardx::writeHtmlReport(ModuleOp module,
                                            const ReportExtras &extras,
                                            llvm::raw_ostream &os) {
  SymbolTableCollection symbols;
  ReshardPlanners planners;
  std::string title =
      extras.title.empty() ? "ShardX sharding report" : extras.title;
  std::string body;
  llvm::raw_string_ostream bodyOs(body);
  Totals totals;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    FailureOr<MeshOp> mesh = getFunctionMesh(fn, symbols);
    if (failed(mesh))
      return failure();
    std::optional<MeshInfo> info;
    if (*mesh)
      info.emplace(*mesh);
    FunctionReport report(fn, info, planners, symbols, bodyOs);
    if (failed(report.write(totals)))
      return failure();
  }

  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<title>" << escapeHtml(title) << "</title><style>" << kStyle
     << "</style></head><body><h1>" << escapeHtml(title) << "</h1>";
  os << "<section id=\"summary\"><h2>communication</h2>";
  os << "<table id=\"totals\"><thead><tr><th>reshards</th><th>collectives"
        "</th><th>bytes/rank</th><th>modeled us</th></tr></thead><tbody>";
  const Aggregate &total = totals.reshards;
  int64_t collectives = 0;
  for (const auto &[kind, a] : totals.byKind)
    collectives += a.count;
  os << "<tr class=\"total\" data-reshards=\"" << total.count
     << "\" data-collectives=\"" << collectives << "\" data-bytes=\""
     << llvm::formatv("{0:F0}", total.bytes) << "\" data-us=\""
     << llvm::formatv("{0:F6}", total.us) << "\"><td class=\"num\">"
     << total.count << "</td><td class=\"num\">" << collectives
     << "</td><td class=\"num\">" << llvm::formatv("{0:F0}", total.bytes)
     << "</td><td class=\"num\">" << llvm::formatv("{0:F3}", total.us)
     << "</td></tr></tbody></table>";
  os << "<div style=\"display:flex;gap:24px\"><div><h3>per collective kind"
        "</h3>";
  writeAggregates(os, "by-kind", "kind", totals.byKind);
  os << "</div><div><h3>per mesh axis group</h3>";
  writeAggregates(os, "by-axes", "axes", totals.byAxes);
  os << "</div><div><h3>reshards per phase</h3>";
  writeAggregates(os, "by-phase", "phase", totals.byPhase, "reshards");
  os << "</div></div>";
  if (!extras.runSummary.empty())
    os << "<p class=\"run\">" << escapeHtml(extras.runSummary) << "</p>";
  if (!extras.measured.empty()) {
    os << "<h3>measured collectives (shardx-run)</h3>";
    os << "<p class=\"note\">one more run of the sharded program with every "
          "collective call timed on every rank (threads backend); bucketed "
          "collectives are one call for several modeled ones</p>";
    os << "<table class=\"sortable\" id=\"measured\"><thead><tr><th>kind</th>"
          "<th>axes</th><th>rank</th><th>calls</th><th>modeled collectives"
          "</th><th>bytes received</th><th>modeled bytes</th><th>measured us"
          "</th><th>modeled us</th></tr></thead><tbody>";
    for (const MeasuredCollective &m : extras.measured) {
      Aggregate model;
      auto it = totals.byKindAxes.find(m.kind + "|" + m.axes);
      if (it != totals.byKindAxes.end())
        model = it->second;
      os << "<tr class=\"measured\" data-kind=\"" << escapeHtml(m.kind)
         << "\" data-axes=\"" << escapeHtml(m.axes) << "\" data-rank=\"" << m.rank
         << "\" data-calls=\"" << m.calls << "\" data-bytes=\""
         << llvm::formatv("{0:F0}", m.bytes) << "\" data-model-count=\""
         << model.count << "\" data-model-bytes=\""
         << llvm::formatv("{0:F0}", model.bytes) << "\"><td>" << escapeHtml(m.kind)
         << "</td><td>" << escapeHtml(m.axes) << "</td><td class=\"num\">" << m.rank
         << "</td><td class=\"num\">" << m.calls << "</td><td class=\"num\">"
         << model.count << "</td><td class=\"num\" data-v=\""
         << llvm::formatv("{0:F0}", m.bytes) << "\">"
         << llvm::formatv("{0:F0}", m.bytes) << "</td><td class=\"num\">"
         << llvm::formatv("{0:F0}", model.bytes) << "</td><td class=\"num\" "
         << "data-v=\"" << llvm::formatv("{0:F3}", m.seconds * 1e6) << "\">"
         << llvm::formatv("{0:F3}", m.seconds * 1e6)
         << "</td><td class=\"num\">" << llvm::formatv("{0:F3}", model.us)
         << "</td></tr>\n";
    }
    os << "</tbody></table>";
  }
  writeAlternativesSection(os, module);
  if (extras.haveChoices) {
    os << "<h3>propagation choices</h3><p class=\"note\">reshard cost of the "
          "program-order strategies: "
       << llvm::formatv("{0:F3}", extras.programOrderCost) << " us ("
       << extras.programOrderReshards
       << " reshards); after the whole-graph refinement: "
       << llvm::formatv("{0:F3}", extras.refinedCost) << " us ("
       << extras.refinedReshards << " reshards); " << extras.choices.size()
       << " ops changed strategy</p>";
    os << "<details id=\"choices\""
       << (extras.choices.size() <= 20 ? " open" : "")
       << "><summary>ops the refinement changed (" << extras.choices.size()
       << ")</summary><table class=\"sortable\"><thead><tr><th>op</th><th>"
          "source location</th><th>program order</th><th>refined</th></tr>"
          "</thead><tbody>";
    for (const PropagationChoice &c : extras.choices)
      os << "<tr class=\"choice\"><td>" << escapeHtml(c.op) << "</td><td>"
         << escapeHtml(c.location) << "</td><td><code>" << escapeHtml(c.programOrder)
         << "</code></td><td><code>" << escapeHtml(c.refined)
         << "</code></td></tr>\n";
    os << "</tbody></table></details>";
  }
  os << "</section>";
  writeMemorySection(os, extras);
  os << body << "<script>" << kScript
     << "</script></body></html>\n";
  return success();
}
