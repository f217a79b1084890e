// Philox4x32-10 (src/core/philox.hpp) and the dropout mapping built on it: known answers, the
// kept fraction, the documented counter mapping, and identical masks across the reference, the
// forward and the backward of a backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "memattn/dropout.hpp"
#include "memattn/reference.hpp"
#include "support/check.hpp"
#include "support/dropout_masks.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

// Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
TEST(Philox, KnownAnswers) {
  const struct {
    std::uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kat) {
    std::uint32_t out[4];
    philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]) << "word " << i;
  }
}

TEST(Dropout, ThresholdRoundsP) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25), 0x40000000u);
  EXPECT_EQ(dropout_threshold(std::nextafter(1.0, 0.0)), 0xffffffffu);
}

// The kept fraction of 4M elements is within 6 binomial standard deviations of 1 - p.
TEST(Dropout, KeptFractionIsOneMinusP) {
  for (double p : {0.1, 0.5, 0.9}) {
    const std::int64_t heads = 4, rows = 512, cols = 2048;
    std::int64_t kept = 0;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) kept += dropout_keep(123, 9, 1, h, heads, i, j, p);
    const double n = double(heads * rows * cols);
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(double(kept), n * (1 - p), 6 * sigma) << "p = " << p;
  }
}

// Changing any coordinate of the mapping changes the mask: (seed, offset, b, h, i, j) all count.
TEST(Dropout, EveryCoordinateMatters) {
  const auto mask = [](std::uint64_t seed, std::uint64_t offset, std::int64_t b, std::int64_t h, std::int64_t i) {
    std::vector<bool> m;
    for (std::int64_t j = 0; j < 256; ++j) m.push_back(dropout_keep(seed, offset, b, h, 4, i, j, 0.5));
    return m;
  };
  const auto base = mask(1, 0, 0, 0, 0);
  EXPECT_NE(base, mask(2, 0, 0, 0, 0));
  EXPECT_NE(base, mask(1ull << 32 | 1, 0, 0, 0, 0));
  EXPECT_NE(base, mask(1, 1, 0, 0, 0));
  EXPECT_NE(base, mask(1, 0, 1, 0, 0));
  EXPECT_NE(base, mask(1, 0, 0, 1, 0));
  EXPECT_NE(base, mask(1, 0, 0, 0, 1));
  EXPECT_EQ(base, mask(1, 0, 0, 0, 0));
}

// dropout_keep is the mapping include/memattn/dropout.hpp documents, computed here from Philox
// itself: counter (j / 4, i, b * Hq + h, offset), key = seed low word first, word j % 4 kept iff
// >= dropout_threshold(p), at random coordinates (offset < 2^32, j up to 2^34).
TEST(Dropout, KeepIsTheDocumentedCounterMapping) {
  std::mt19937_64 g(next_seed());
  for (int n = 0; n < 20000; ++n) {
    const std::uint64_t seed = g(), offset = g() >> 32;
    const std::int64_t heads = std::int64_t(1 + g() % 64), b = std::int64_t(g() % 1000), h = std::int64_t(g() % std::uint64_t(heads));
    const std::int64_t i = std::int64_t(g() >> 32), j = std::int64_t(g() >> 30);
    const double p = (n % 3 == 0) ? 0.5 : double(g() >> 11) * 0x1.0p-53;  // [0, 1)
    const std::uint32_t counter[4] = {std::uint32_t(std::uint64_t(j) / 4), std::uint32_t(i), std::uint32_t(b * heads + h),
                                      std::uint32_t(offset)};
    const std::uint32_t key[2] = {std::uint32_t(seed), std::uint32_t(seed >> 32)};
    std::uint32_t words[4];
    philox4x32_10(counter, key, words);
    const bool want = words[j % 4] >= dropout_threshold(p);
    ASSERT_EQ(dropout_keep(seed, offset, b, h, heads, i, j, p), want)
        << "seed " << seed << " offset " << offset << " b " << b << " h " << h << " of " << heads << " i " << i
        << " j " << j << " p " << p;
  }
}

TEST(Dropout, ForwardAndBackwardMasksMatchTheMappingOnCpu) { check_dropout_masks(Backend::cpu, true); }
TEST(Dropout, ForwardAndBackwardMasksMatchTheMappingInTheReference) { check_dropout_masks(Backend::reference, true); }

}  // namespace
}  // namespace memattn::testing
