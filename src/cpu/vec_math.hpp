// Branch-free math for the CPU tiles, written so that the compiler vectorises the loops that call
// it (libm's exp2f does not vectorise without -ffast-math, which would break -inf handling).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace memattn::cpu {

// 2^x with about 1e-7 relative error; exactly 0 for x <= -127 (masked scores are -inf) so that
// masked keys contribute nothing. x = round(x) + f with |f| <= 1/2, 2^f from a degree-7 Taylor
// series of e^(f ln 2) (truncation error below 1e-8).
inline float exp2_fast(float x) {
  constexpr float kUnderflow = -127.0f;
  const float xc = x < kUnderflow ? kUnderflow : (x > 127.0f ? 127.0f : x);
  const float n = std::nearbyint(xc);
  const float t = (xc - n) * 0.69314718055994531f;
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
  return x <= kUnderflow ? 0.0f : p * scale;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.69314718055994531f;

}  // namespace memattn::cpu
