//===- RuntimeDType.h - MLIR element types as runtime dtypes ----*- C++ -*-===//
//
// Part of ShardX.
//
// The one map from MLIR element types to the runtime's element types
// (shardx/Runtime/DType.h, the table of names, sizes and kinds): the program
// description, the collectives' runtime calls and the GEMM calls of both
// targets name their element types through it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_RUNTIMEDTYPE_H
#define SHARDX_DIALECT_SHARDX_IR_RUNTIMEDTYPE_H

#include "shardx/Runtime/DType.h"

#include "mlir/IR/Types.h"

#include <optional>

namespace mlir::shardx {

/// The runtime's element type for `element` (signless integers, the floats
/// and `index`), or nullopt where the runtime has none.
inline std::optional<::shardx::rt::DType> getRuntimeDType(Type element) {
  using ::shardx::rt::DType;
  if (element.isF32())
    return DType::F32;
  if (element.isF64())
    return DType::F64;
  if (element.isBF16())
    return DType::BF16;
  if (element.isF16())
    return DType::F16;
  if (element.isIndex())
    return DType::Index;
  if (element.isSignlessInteger(64))
    return DType::I64;
  if (element.isSignlessInteger(32))
    return DType::I32;
  if (element.isSignlessInteger(16))
    return DType::I16;
  if (element.isSignlessInteger(8))
    return DType::I8;
  if (element.isSignlessInteger(1))
    return DType::I1;
  return std::nullopt;
}

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_IR_RUNTIMEDTYPE_H
