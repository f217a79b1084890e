// Branch-free math for the CPU tiles, written so that the compiler vectorises the loops that call
// it (libm's exp2f does not vectorise without -ffast-math, which would break -inf handling).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

// 2^x with about 1e-7 relative error; exactly 0 for x <= -127 (masked scores are -inf) so that
// masked keys contribute nothing. x = round(x) + f with |f| <= 1/2, 2^f = e^(f ln 2).
inline float exp2_fast(float x) {
  constexpr float kUnderflow = -127.0f;
  const float xc = x < kUnderflow ? kUnderflow : (x > 127.0f ? 127.0f : x);
  const float n = std::nearbyint(xc);
  const float t = (xc - n) * 0.69314718055994531f;
  return x <= kUnderflow ? 0.0f : exp_taylor7_scaled(t, n);
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.69314718055994531f;

// e^x with about 1e-7 relative error; exactly 0 for x < -87 (below the smallest normal float;
// masked scores are -inf). x = n ln 2 + r with n = round(x log2(e)) and r reduced with ln 2 split in
// two (Cody-Waite: n * kLn2Hi is exact), so that, unlike 2^(x log2(e)), no rounding of x's
// magnitude reaches the result (at |x| ~ 7 that rounding was a 3e-7 relative error, enough to
// put the backward's dV past twice a naive fp32 implementation's error about one run in twenty).
inline float exp_fast(float x) {
  constexpr float kUnderflow = -87.0f, kOverflow = 88.0f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 to 15 significant bits
  constexpr float kLn2Lo = 1.428606820309417e-6f;
  const float xc = x < kUnderflow ? kUnderflow : (x > kOverflow ? kOverflow : x);
  const float n = std::nearbyint(xc * kLog2e);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  return x < kUnderflow ? 0.0f : exp_taylor7_scaled(r, n);
}

}  // namespace memattn::cpu
