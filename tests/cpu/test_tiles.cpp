// Moving tiles between strided tensors and float scratch (src/cpu/tiles.hpp): the conversions
// agree with src/core/numeric.hpp for every 16-bit value (the f16 loads may use the compiler's
// _Float16), and rows land where the strides say, padded rows zeroed, nothing else written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/tiles.hpp"
#include "support/seed.hpp"

namespace memattn::cpu {
namespace {

bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

TEST(Tiles, SixteenBitLoadsMatchTheConversions) {
  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) all[bits] = std::uint16_t(bits);
  std::vector<float> got(all.size());
  for (const float mul : {1.0f, 0.125f, -3.0f}) {
    to_float(all.data(), DType::f16, std::int64_t(all.size()), mul, got.data());
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits)
      ASSERT_TRUE(same(got[bits], mul * detail::half_to_float(std::uint16_t(bits)))) << std::hex << bits;
    to_float(all.data(), DType::bf16, std::int64_t(all.size()), mul, got.data());
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits)
      ASSERT_TRUE(same(got[bits], mul * detail::bf16_to_float(std::uint16_t(bits)))) << std::hex << bits;
  }
}

TEST(Tiles, StoresRoundLikeTheConversions) {
  std::mt19937_64 g(memattn::testing::next_seed());
  std::normal_distribution<float> normal;
  std::vector<float> src(4096);
  for (float& x : src) x = normal(g) * 100.0f;
  std::vector<std::uint16_t> half(src.size()), bf16(src.size());
  std::vector<float> f32(src.size());
  from_float(src.data(), std::int64_t(src.size()), 0.5f, half.data(), DType::f16);
  from_float(src.data(), std::int64_t(src.size()), 0.5f, bf16.data(), DType::bf16);
  from_float(src.data(), std::int64_t(src.size()), 0.5f, f32.data(), DType::f32);
  for (std::size_t e = 0; e < src.size(); ++e) {
    ASSERT_EQ(half[e], detail::float_to_half(0.5f * src[e])) << src[e];
    ASSERT_EQ(bf16[e], detail::float_to_bf16(0.5f * src[e])) << src[e];
    ASSERT_EQ(f32[e], 0.5f * src[e]);
  }
}

// A [B=2, M=7, H=3, D=5] f32 tensor with padded rows and heads; element (b, m, h, e) holds
// 1000 b + 100 m + 10 h + e.
struct Strided {
  static constexpr std::int64_t B = 2, M = 7, H = 3, D = 5;
  std::vector<float> data;
  TensorRef view;
  Strided() {
    const std::int64_t head_stride = D + 2, row_stride = H * head_stride + 1, batch_stride = M * row_stride + 3;
    data.assign(std::size_t(B * batch_stride), NAN);
    view = make_tensor(data.data(), DType::f32, {B, M, H, D}, {batch_stride, row_stride, head_stride, 1});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t e = 0; e < D; ++e) at(b, m, h, e) = float(1000 * b + 100 * m + 10 * h + e);
  }
  float& at(std::int64_t b, std::int64_t m, std::int64_t h, std::int64_t e) {
    return data[std::size_t(b * view.strides[0] + m * view.strides[1] + h * view.strides[2] + e)];
  }
};

TEST(Tiles, LoadRowsFollowTheStridesAndZeroThePadding) {
  Strided t;
  const std::int64_t ld = 8, rows = 3, pad_rows = 4;
  std::vector<float> dst(std::size_t(pad_rows * ld), -1.0f);
  load_rows(t.view, 1, 2, rows, pad_rows, 2, 2.0f, dst.data(), ld);
  for (std::int64_t r = 0; r < pad_rows; ++r)
    for (std::int64_t e = 0; e < ld; ++e) {
      const float want = e >= Strided::D ? -1.0f : r < rows ? 2.0f * t.at(1, 2 + r, 2, e) : 0.0f;
      EXPECT_EQ(dst[std::size_t(r * ld + e)], want) << "row " << r << " element " << e;
    }
  std::vector<float> tdst(std::size_t(Strided::D * ld), -1.0f), row_buf(Strided::D);
  load_rows_transposed(t.view, 0, 4, rows, pad_rows, 1, 1.0f, row_buf.data(), tdst.data(), ld);
  for (std::int64_t e = 0; e < Strided::D; ++e)
    for (std::int64_t r = 0; r < ld; ++r) {
      const float want = r >= pad_rows ? -1.0f : r < rows ? t.at(0, 4 + r, 1, e) : 0.0f;
      EXPECT_EQ(tdst[std::size_t(e * ld + r)], want) << "element " << e << " row " << r;
    }
}

TEST(Tiles, StoreRowsWritesTheirElementsOnly) {
  Strided t;
  const std::vector<float> before = t.data;
  const std::int64_t ld = 6, rows = 2;
  std::vector<float> src(std::size_t(rows * ld));
  for (std::size_t e = 0; e < src.size(); ++e) src[e] = float(e) + 0.5f;
  store_rows(t.view, 1, 5, rows, 0, src.data(), ld, 4.0f);
  for (std::size_t e = 0; e < t.data.size(); ++e) {
    const std::int64_t off = std::int64_t(e);
    const std::int64_t b = off / t.view.strides[0], in_b = off % t.view.strides[0];
    const std::int64_t m = in_b / t.view.strides[1], in_m = in_b % t.view.strides[1];
    const std::int64_t h = in_m / t.view.strides[2], x = in_m % t.view.strides[2];
    const bool written = b == 1 && m >= 5 && m < 5 + rows && h == 0 && x < Strided::D && m < Strided::M;
    if (written)
      EXPECT_EQ(t.data[e], 4.0f * src[std::size_t((m - 5) * ld + x)]) << "m " << m << " element " << x;
    else
      EXPECT_TRUE(same(t.data[e], before[e])) << "offset " << e << " written";
  }
}

TEST(Tiles, BiasOffsetPinsBroadcastDimensions) {
  const float data[1] = {0};
  const TensorRef bias = make_tensor(data, DType::f32, {2, 3, 4, 5}, {1000, 100, 10, 1});
  const bool none[4] = {false, false, false, false}, heads_and_rows[4] = {false, true, true, false};
  EXPECT_EQ(bias_offset(bias, none, 1, 2, 3, 4), 1234);
  EXPECT_EQ(bias_offset(bias, heads_and_rows, 1, 2, 3, 4), 1004);
}

}  // namespace
}  // namespace memattn::cpu
