//===- Passes.h - The sharding report pass ----------------------*- C++ -*-===//
//
// Part of ShardX.
//
// `shardx-report` (Passes.td): `--shardx-report=out.html`, or
// `--shardx-report="output=out.html title=..."`.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_REPORT_PASSES_H
#define SHARDX_REPORT_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir::shardx {

#define GEN_PASS_DECL
#include "shardx/Report/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardx/Report/Passes.h.inc"

} // namespace mlir::shardx

#endif // SHARDX_REPORT_PASSES_H
