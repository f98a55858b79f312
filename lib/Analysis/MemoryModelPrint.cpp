//===- MemoryModelPrint.cpp - The memory profile as text and JSON ---------===//
//
// Part of ShardX.
//
// How a MemoryProfile (MemoryModel.cpp computes it) is shown: the remark
// text of shardx-print-plan and the JSON of its memory-json option and of
// the JIT's memory_profile.
//
//===----------------------------------------------------------------------===//

#include "shardx/Analysis/MemoryModel.h"

#include "mlir/IR/Location.h"
#include "mlir/IR/Operation.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace mlir;
using namespace mlir::shardx;

namespace {

std::string locationString(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->getLoc().print(os);
  return s;
}

} // namespace

StringRef mlir::shardx::memoryRoleName(MemoryRole role) {
  switch (role) {
  case MemoryRole::Parameter:
    return "parameters";
  case MemoryRole::OptimizerState:
    return "optimizer state";
  case MemoryRole::Input:
    return "inputs";
  case MemoryRole::Activation:
    return "activations";
  case MemoryRole::Gradient:
    return "gradients";
  case MemoryRole::OptimizerTemp:
    return "optimizer temporaries";
  case MemoryRole::Collective:
    return "collective buffers";
  case MemoryRole::Result:
    return "results";
  }
  return "unknown";
}

std::string mlir::shardx::formatBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0)
    return std::to_string(bytes) + " B";
  return llvm::formatv("{0:F2} {1}", v, units[u]).str();
}

void MemoryProfile::print(llvm::raw_ostream &os) const {
  os << "memory of @" << function << " per rank: peak "
     << formatBytes(peakBytes) << " (" << peakBytes << " bytes)";
  if (Operation *op = peakOp())
    os << " at " << op->getName() << " " << locationString(op) << " (op "
       << peakIndex + 1 << " of " << ops.size() << ")";
  os << (bufferized ? ", modeled on buffers" : "");
  auto list = [&](ArrayRef<MemoryRole> roles) {
    bool first = true;
    for (MemoryRole r : roles) {
      int64_t bytes = peakByRole[static_cast<size_t>(r)];
      if (!bytes)
        continue;
      os << (first ? "" : ", ") << memoryRoleName(r) << " "
         << formatBytes(bytes);
      first = false;
    }
    if (first)
      os << "none";
  };
  os << "\n  arguments " << formatBytes(argumentBytes) << ": ";
  list({MemoryRole::Parameter, MemoryRole::OptimizerState, MemoryRole::Input});
  os << "\n  allocated at the peak " << formatBytes(allocatedPeakBytes) << " ("
     << allocatedPeakBytes << " bytes): ";
  list({MemoryRole::Activation, MemoryRole::Gradient, MemoryRole::OptimizerTemp,
        MemoryRole::Collective, MemoryRole::Result});
  if (unsizedValues)
    os << "\n  " << unsizedValues
       << " values of dynamic size counted as 0 bytes";
}

void MemoryProfile::printJson(llvm::raw_ostream &os) const {
  llvm::json::Object roles;
  for (size_t r = 0; r < kNumMemoryRoles; ++r)
    roles[memoryRoleName(static_cast<MemoryRole>(r))] = peakByRole[r];
  llvm::json::Array timeline;
  for (int64_t v : live)
    timeline.push_back(v);
  llvm::json::Array bufferList;
  for (const MemoryBuffer &b : buffers)
    if (b.bytes)
      bufferList.push_back(
          llvm::json::Object{{"origin", b.origin},
                             {"bytes", b.bytes},
                             {"role", memoryRoleName(b.role)},
                             {"first", b.first},
                             {"last", b.last},
                             {"loc", b.op ? locationString(b.op) : ""}});
  llvm::json::Object o{
      {"function", function},
      {"peak_bytes", peakBytes},
      {"allocated_peak_bytes", allocatedPeakBytes},
      {"argument_bytes", argumentBytes},
      {"peak_index", peakIndex},
      {"peak_op", peakOp() ? peakOp()->getName().getStringRef().str() : ""},
      {"peak_loc", peakOp() ? locationString(peakOp()) : ""},
      {"by_role", std::move(roles)},
      {"bufferized", bufferized},
      {"unsized_values", unsizedValues},
      {"timeline", std::move(timeline)},
      {"buffers", std::move(bufferList)}};
  os << llvm::json::Value(std::move(o));
}
