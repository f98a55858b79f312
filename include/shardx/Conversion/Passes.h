//===- Passes.h - ShardX conversion passes ----------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_CONVERSION_PASSES_H
#define SHARDX_CONVERSION_PASSES_H

#include "shardx/Conversion/ShardToShardX/ShardToShardX.h"
#include "shardx/Conversion/ShardXToRuntime/ShardXToRuntime.h"

namespace mlir::shardx {

#define GEN_PASS_REGISTRATION
#include "shardx/Conversion/Passes.h.inc"

} // namespace mlir::shardx

#endif // SHARDX_CONVERSION_PASSES_H
