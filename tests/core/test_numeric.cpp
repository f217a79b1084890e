// Host conversions between float and the 16-bit storage types (src/core/numeric.hpp): round to
// nearest even like the GPU's conversions, every value, infinities, NaN, subnormals, and the
// typed loads and stores the CPU paths read and write tensors with.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

TEST(Numeric, HalfSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_half(inf), 0x7c00);
  EXPECT_EQ(float_to_half(-inf), 0xfc00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);  // the largest half
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(half_to_float(0x7c00), inf);
  EXPECT_EQ(half_to_float(0xfc00), -inf);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // the largest subnormal
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));      // the smallest normal
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
}

TEST(Numeric, Bf16SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(inf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-inf), 0xff80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7f);             // the largest bf16
  EXPECT_EQ(float_to_bf16(bits_float(0x00010000u)), 0x0001);             // subnormals keep their bits
  // A NaN whose payload sits in the low bits only must stay a NaN (not round to inf).
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(0xff800001u)))));
}

// Typed loads and stores: a store rounds to the dtype once (round_to gives the value kept), a
// load reads it back exactly; f64 keeps a double unrounded.
TEST(Numeric, StoresRoundToTheDtypeAndLoadsReadBack) {
  std::mt19937_64 g(testing::next_seed());
  std::normal_distribution<float> normal;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(to_string(dtype));
    alignas(8) unsigned char buffer[4 * 8];
    for (int n = 0; n < 1000; ++n) {
      const float x = normal(g) * (n % 3 == 0 ? 1000.0f : 1.0f);
      const std::int64_t slot = n % 4;
      store_float(buffer, dtype, slot, x);
      EXPECT_EQ(load_float(buffer, dtype, slot), round_to(dtype, x)) << x;
      EXPECT_EQ(load_double(buffer, dtype, slot), double(round_to(dtype, x))) << x;
    }
    // The other slots are untouched by a store: the element size is the dtype's.
    for (std::int64_t slot = 0; slot < 4; ++slot) store_float(buffer, dtype, slot, float(slot + 1));
    store_float(buffer, dtype, 2, -7.0f);
    EXPECT_EQ(load_float(buffer, dtype, 1), 2.0f);
    EXPECT_EQ(load_float(buffer, dtype, 2), -7.0f);
    EXPECT_EQ(load_float(buffer, dtype, 3), 4.0f);
  }
  EXPECT_EQ(round_to(DType::f16, 1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);
  EXPECT_EQ(round_to(DType::f16, 1.0f + 1.0f / 4096), 1.0f);
  EXPECT_EQ(round_to(DType::bf16, 1.0f + 1.0f / 256), 1.0f);
  alignas(8) unsigned char wide[8];
  const double third = 1.0 / 3.0;
  store_double(wide, DType::f64, 0, third);
  EXPECT_EQ(load_double(wide, DType::f64, 0), third);
  EXPECT_EQ(load_float(wide, DType::f64, 0), float(third));
  store_double(wide, DType::f32, 1, third);
  EXPECT_EQ(load_double(wide, DType::f32, 1), double(float(third)));
}

}  // namespace
}  // namespace memattn::detail
