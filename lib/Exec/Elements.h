//===- Elements.h - Tensor elements as doubles ------------------*- C++ -*-===//
//
// Part of ShardX.
//
// Private to lib/Exec: one element of any DType read as or written from a
// double, for the reductions of assemble(), random inputs and compare().
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_EXEC_ELEMENTS_H
#define SHARDX_LIB_EXEC_ELEMENTS_H

#include "shardx/Runtime/DType.h"
#include "shardx/Runtime/HalfFloat.h"

#include <cstdint>
#include <cstring>
#include <limits>

namespace shardx::exec::detail {

using rt::DType;

template <typename T> double load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}

template <typename T> void store(char *p, double v) {
  T x = static_cast<T>(v);
  std::memcpy(p, &x, sizeof(T));
}

/// A bf16/f16 element's bits.
inline uint16_t bits16(const char *p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return h;
}

inline void storeBits16(char *p, uint16_t h) { std::memcpy(p, &h, sizeof(h)); }

inline double loadAsDouble(const char *p, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return load<float>(p);
  case DType::F64:
    return load<double>(p);
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
  case DType::Index:
    return load<int64_t>(p);
  case DType::I16:
    return load<int16_t>(p);
  case DType::I8:
  case DType::I1:
    return load<int8_t>(p);
  case DType::BF16:
    return shardx::rt::bf16ToFloat(bits16(p));
  case DType::F16:
    return shardx::rt::f16ToFloat(bits16(p));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

inline void storeFromDouble(char *p, double v, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return store<float>(p, v);
  case DType::F64:
    return store<double>(p, v);
  case DType::I32:
    return store<int32_t>(p, v);
  case DType::I64:
  case DType::Index:
    return store<int64_t>(p, v);
  case DType::I16:
    return store<int16_t>(p, v);
  case DType::I8:
  case DType::I1:
    return store<int8_t>(p, v);
  case DType::BF16:
    return storeBits16(p, shardx::rt::floatToBf16(static_cast<float>(v)));
  case DType::F16:
    return storeBits16(p, shardx::rt::floatToF16(static_cast<float>(v)));
  }
}


} // namespace shardx::exec::detail

#endif // SHARDX_LIB_EXEC_ELEMENTS_H
