// Host conversions between float and the 16-bit storage types (src/core/numeric.hpp): round to
// nearest even like the GPU's conversions, every value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/numeric.hpp"
#include "support/seed.hpp"

namespace memattn::detail {
namespace {

TEST(Numeric, HalfRoundTripsEveryValue) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = half_to_float(std::uint16_t(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), bits) << std::hex << bits;
  }
}

TEST(Numeric, HalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even (1.0)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);            // rounds to inf
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);                 // tie -> 0
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);                 // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) * (1 - 1.0f / 2048)), 0x0400);  // up to normal
  std::mt19937_64 g(testing::next_seed());
  std::uniform_real_distribution<float> u(-70000.f, 70000.f);
  for (int n = 0; n < 100000; ++n) {  // against double-precision rounding of the neighbours
    const float f = u(g) * (n % 2 ? 1e-4f : 1.0f);
    const float r = half_to_float(float_to_half(f));
    if (std::isinf(r)) continue;
    const std::uint16_t b = float_to_half(f);
    const float lo = half_to_float(std::uint16_t(b - 1)), hi = half_to_float(std::uint16_t(b + 1));
    EXPECT_LE(std::abs(double(r) - f), std::abs(double(lo) - f)) << f;
    EXPECT_LE(std::abs(double(r) - f), std::abs(double(hi) - f)) << f;
  }
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = bf16_to_float(std::uint16_t(bits));
    if (!std::isnan(f)) EXPECT_EQ(float_to_bf16(f), bits);
  }
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

}  // namespace
}  // namespace memattn::detail
