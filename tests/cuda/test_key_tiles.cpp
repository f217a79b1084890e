// The forward's trip counts from the mask (src/cuda/common/key_tiles.hpp), which the Hopper
// forward's producer and consumers both follow, against every (query, key) pair: a key tile
// outside [first, last] holds no visible pair, every tile with one is inside, and a tile inside
// [full_lo, full_hi] is visible whole, with no key past the sequence. Host arithmetic over random
// lengths, windows and both alignments.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "core/mask.hpp"
#include "cuda/common/key_tiles.hpp"

namespace memattn::cuda {
namespace {

template <int kBlockN>
void check_query_tiles(const detail::MaskRule& rule, std::int64_t q_len, int block_m) {
  for (std::int64_t m0 = 0; m0 < q_len; m0 += block_m) {
    const int rows = int(q_len - m0 < block_m ? q_len - m0 : block_m);
    KeyTiles t{};
    const bool any = key_tiles<kBlockN>(rule, m0, rows, &t);
    bool seen = false;
    for (std::int64_t n = 0; n * kBlockN < rule.k_len; ++n) {
      const std::int64_t j0 = n * kBlockN, j1 = j0 + kBlockN;
      bool visible_pair = false, all_visible = j1 <= rule.k_len;
      for (std::int64_t i = m0; i < m0 + rows; ++i)
        for (std::int64_t j = j0; j < j1; ++j) {
          const bool v = j < rule.k_len && rule.visible(i, j);
          visible_pair |= v;
          all_visible &= v;
        }
      seen |= visible_pair;
      SCOPED_TRACE("rows " + std::to_string(m0) + ".." + std::to_string(m0 + rows) + ", key tile " +
                   std::to_string(n));
      if (visible_pair) {
        ASSERT_TRUE(any);
        EXPECT_TRUE(t.first <= n && n <= t.last);
      }
      if (any && n >= t.first && n <= t.last && n >= t.full_lo && n <= t.full_hi) EXPECT_TRUE(all_visible);
    }
    EXPECT_EQ(any, seen) << "rows " << m0 << ".." << m0 + rows;
  }
}

TEST(KeyTiles, MatchEveryPair) {
  std::mt19937_64 rng(20261127);
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t q_len = pick(1, 300), k_len = pick(1, 420);
    const std::int64_t left = pick(0, 3) == 0 ? -1 : pick(0, 200), right = pick(0, 3) == 0 ? -1 : pick(0, 60);
    const detail::MaskRule rule = detail::MaskRule::make(q_len, k_len, left, right, pick(0, 1) == 1);
    SCOPED_TRACE("q_len " + std::to_string(q_len) + ", k_len " + std::to_string(k_len) + ", window (" +
                 std::to_string(left) + ", " + std::to_string(right) + "), shift " + std::to_string(rule.shift));
    check_query_tiles<64>(rule, q_len, 128);
    check_query_tiles<128>(rule, q_len, 128);
    check_query_tiles<192>(rule, q_len, 128);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace memattn::cuda
