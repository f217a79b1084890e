// Host-side conversions between float and the 16-bit storage types (IEEE half, bfloat16), with
// round-to-nearest-even, so that every CPU path rounds exactly like the GPU's conversions.
#pragma once

#include <cstdint>
#include <cstring>

#include "memattn/types.hpp"

namespace memattn::detail {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float bf16_to_float(std::uint16_t h) { return bits_float(std::uint32_t(h) << 16); }

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);
  // Subnormal half: value = man * 2^-24, exact in float.
  const float v = float(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to inf (>= 65520)
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale into the integer mantissa and round to nearest even.
    if (abs < 0x33000000u) return std::uint16_t(sign);  // below half the smallest subnormal
    const std::uint32_t e = abs >> 23;
    const std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24 here
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return std::uint16_t(sign | r);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15 (in the shifted field)
  r += 0xfffu + ((r >> 13) & 1u);
  return std::uint16_t(sign | (r >> 13));
}

// Reads element `offset` of an array of `dtype` as float (f64 is rounded).
inline float load_float(const void* base, DType dtype, std::int64_t offset) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::f64: return float(static_cast<const double*>(base)[offset]);
  }
  return 0.f;
}

// Reads element `offset` exactly, as double.
inline double load_double(const void* base, DType dtype, std::int64_t offset) {
  if (dtype == DType::f64) return static_cast<const double*>(base)[offset];
  return load_float(base, dtype, offset);
}

inline void store_float(void* base, DType dtype, std::int64_t offset, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[offset] = value; return;
    case DType::f16: static_cast<std::uint16_t*>(base)[offset] = float_to_half(value); return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[offset] = float_to_bf16(value); return;
    case DType::f64: static_cast<double*>(base)[offset] = value; return;
  }
}

// Stores a double into an array of `dtype`, rounding once to the dtype.
inline void store_double(void* base, DType dtype, std::int64_t offset, double value) {
  if (dtype == DType::f64) static_cast<double*>(base)[offset] = value;
  else store_float(base, dtype, offset, float(value));
}

// Rounds a float to the precision of `dtype` (identity for f32).
inline float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::f32: return value;
    case DType::f16: return half_to_float(float_to_half(value));
    case DType::bf16: return bf16_to_float(float_to_bf16(value));
    case DType::f64: return value;
  }
  return value;
}

}  // namespace memattn::detail
