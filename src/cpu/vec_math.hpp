// Branch-free math for the CPU tiles, written so that the compiler vectorises the loops that call
// it (libm's expf does not vectorise without -ffast-math, which would break -inf handling).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace memattn::cpu {

// e^t * 2^n for |t| <= ln(2) / 2 and integral n in [-127, 127] (2^-127 reads as 0): e^t from a
// degree-7 Taylor series (truncation error below 1e-8), 2^n from the exponent bits.
inline float exp_taylor7_scaled(float t, float n) {
  float p = 1.0f / 5040.0f;
  p = p * t + 1.0f / 720.0f;
  p = p * t + 1.0f / 120.0f;
  p = p * t + 1.0f / 24.0f;
  p = p * t + 1.0f / 6.0f;
  p = p * t + 0.5f;
  p = p * t + 1.0f;
  p = p * t + 1.0f;
  const std::int32_t bits = (std::int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

constexpr float kLog2e = 1.4426950408889634f;

// e^x with about 1e-7 relative error; exactly 0 for x < -87 (below the smallest normal float;
// masked scores are -inf). x = n ln 2 + r with n = round(x log2(e)) and r reduced with ln 2 split in
// two (Cody-Waite: n * kLn2Hi is exact), so that, unlike 2^(x log2(e)), no rounding of x's
// magnitude reaches the result (at |x| ~ 7 that rounding was a 3e-7 relative error, enough to
// put the backward's dV past twice a naive fp32 implementation's error about one run in twenty).
// exp_fast(0) = 1 exactly: the backward's P of a row with one dominant key (score_tile.hpp).
// Defined for every input (no NaN or out-of-range value reaches the integer conversion): NaN ->
// NaN, +inf and x > ln(FLT_MAX) -> +inf, -inf and x < -87 -> 0; n stays in [-126, 127] (for x in
// (88.37, 88.72] the reduced argument grows to ln 2, still about 1e-6, and only there). The clamps
// and selects cost about 15% of this function alone (AVX-512 loop over 4096 elements: 0.26-0.27
// against 0.23 ns per element), a small part of a tile's work next to its two matrix products.
inline float exp_fast(float x) {
  constexpr float kUnderflow = -87.0f, kOverflow = 88.72283935546875f;  // ~ln(FLT_MAX)
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 to 15 significant bits
  constexpr float kLn2Lo = 1.428606820309417e-6f;
  constexpr float kMaxN = 88.37f;  // round(x log2(e)) <= 127 up to here
  const float lo = x > kUnderflow ? x : kUnderflow;  // NaN -> kUnderflow
  const float xc = lo < kOverflow ? lo : kOverflow;
  const float n = std::nearbyint((lo < kMaxN ? lo : kMaxN) * kLog2e);  // (clamping n after rounding is slower)
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const float y = exp_taylor7_scaled(r, n);
  // NaN, +inf and x > kOverflow fail x <= kOverflow: x * inf is NaN for NaN, +inf otherwise.
  const float fin = x <= kOverflow ? y : x * std::numeric_limits<float>::infinity();
  return x < kUnderflow ? 0.0f : fin;
}

}  // namespace memattn::cpu
