//===- HalfFloat.h - bf16 and f16 elements on the host ----------*- C++ -*-===//
//
// Part of ShardX.
//
// The runtime's 16-bit float element types as storage: conversions to and
// from f32 (round to nearest even, NaN kept a NaN), so that collectives can
// reduce bf16/f16 by accumulating in f32. No MLIR/LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_HALFFLOAT_H
#define SHARDX_RUNTIME_HALFFLOAT_H

#include <cstdint>
#include <cstring>

namespace shardx::rt {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float floatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float bf16ToFloat(uint16_t h) { return floatOfBits(uint32_t(h) << 16); }

inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1); // round to nearest even
  return uint16_t(u >> 16);
}

inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) // inf or NaN
    return floatOfBits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { // zero or subnormal: man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return floatOfBits(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) // NaN
    return uint16_t(sign | 0x7e00 | ((abs >> 13) & 0x3ff));
  if (abs >= 0x477ff000u) // rounds to at least 2^16: inf
    return uint16_t(sign | 0x7c00);
  if (abs < 0x38800000u) { // below 2^-14: subnormal, in units of 2^-24
    float v = floatOfBits(abs) * 16777216.0f;
    // Round to nearest even through the float's own rounding.
    uint32_t q = uint32_t(v);
    float rest = v - float(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1)))
      ++q;
    return uint16_t(sign | q);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  uint32_t dropped = abs & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1)))
    ++h; // may carry into the exponent, as it should
  return uint16_t(sign | h);
}

/// bf16 and f16 elements: storage with conversions to float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(floatToBf16(f)) {}
  explicit operator float() const { return bf16ToFloat(bits); }
};

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f) : bits(floatToF16(f)) {}
  explicit operator float() const { return f16ToFloat(bits); }
};

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_HALFFLOAT_H
