//===- DType.h - The element types of ShardX tensors ------------*- C++ -*-===//
//
// Part of ShardX.
//
// The one table of element types: their names (as MLIR prints them, which is
// how the program description spells them), sizes and kinds. The executor's
// host tensors, the collectives' buffers and the Python binding's arrays all
// use it. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_DTYPE_H
#define SHARDX_RUNTIME_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardx::rt {

/// An element type. The first six are the ones collectives move and reduce
/// (isCollectiveType); BF16 and F16 reduce by accumulating in f32
/// (HalfFloat.h). Index is MLIR's `index` (64 bits here).
enum class DType : uint8_t { F32, F64, I32, I64, BF16, F16, I16, I8, I1, Index };

/// What ShardX knows of one element type.
struct DTypeInfo {
  DType type;
  /// MLIR's spelling, the program description's `dtype`.
  const char *name;
  uint8_t bytes;
  bool isFloat;
  /// Collectives move and reduce it.
  bool collective;
  /// Its `descr` in .npy headers; null: not read or written as .npy.
  const char *npyDescr;
};

/// In DType order.
inline constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "f32", 4, true, true, "<f4"},
    {DType::F64, "f64", 8, true, true, "<f8"},
    {DType::I32, "i32", 4, false, true, "<i4"},
    {DType::I64, "i64", 8, false, true, "<i8"},
    {DType::BF16, "bf16", 2, true, true, nullptr},
    {DType::F16, "f16", 2, true, true, nullptr},
    {DType::I16, "i16", 2, false, false, nullptr},
    {DType::I8, "i8", 1, false, false, "|i1"},
    {DType::I1, "i1", 1, false, false, "|b1"},
    {DType::Index, "index", 8, false, false, nullptr},
};

inline constexpr const DTypeInfo &getDTypeInfo(DType type) {
  return kDTypes[static_cast<size_t>(type)];
}

/// The type MLIR spells `name`, if ShardX has it.
inline std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &info : kDTypes)
    if (name == info.name)
      return info.type;
  return std::nullopt;
}

inline const char *stringifyDType(DType type) {
  return getDTypeInfo(type).name;
}
inline size_t dtypeSize(DType type) { return getDTypeInfo(type).bytes; }
/// f32, f64, bf16, f16.
inline bool isFloat(DType type) { return getDTypeInfo(type).isFloat; }
inline bool isHalfFloat(DType type) {
  return type == DType::BF16 || type == DType::F16;
}
inline bool isCollectiveType(DType type) {
  return getDTypeInfo(type).collective;
}

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_DTYPE_H
