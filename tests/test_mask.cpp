// The kernels' mask rule (src/core/mask.hpp) against brute force: the ranges that give trip counts
// are the exact unions of what the rows (or keys) see, not just bounds on them. The kernels skip
// tiles by them, and a count of a query tile's visitors taken from key_range (the one-pass
// backward's dQ tiles) is right only if a key tile's query_range meets the query tile exactly
// when the query tile's key_range meets the key tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/mask.hpp"

namespace memattn::detail {
namespace {

struct Case {
  std::int64_t q_len, k_len, left, right;
  bool bottom_right;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::int64_t lengths[] = {1, 17, 64, 100, 255};
  const std::int64_t windows[] = {-1, 0, 3, 40};
  for (std::int64_t q : lengths)
    for (std::int64_t k : lengths)
      for (std::int64_t left : windows)
        for (std::int64_t right : windows)
          for (bool br : {false, true}) out.push_back({q, k, left, right, br});
  return out;
}

// [begin, end) of the indices in [lo, hi) where `pred` holds, and whether they are contiguous.
template <class Pred>
void span_of(std::int64_t lo, std::int64_t hi, Pred pred, std::int64_t* begin, std::int64_t* end, bool* contiguous) {
  *begin = -1, *end = -1;
  *contiguous = true;
  for (std::int64_t x = lo; x < hi; ++x) {
    if (!pred(x)) continue;
    if (*begin < 0) *begin = x;
    else if (*end != x) *contiguous = false;
    *end = x + 1;
  }
}

TEST(MaskRule, KeyRangeIsTheExactUnionOfTheRowsKeys) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    const MaskRule rule = MaskRule::make(c.q_len, c.k_len, c.left, c.right, c.bottom_right);
    for (int trial = 0; trial < 20; ++trial) {
      const std::int64_t i0 = std::int64_t(rng() % c.q_len), i1 = i0 + 1 + std::int64_t(rng() % (c.q_len - i0));
      std::int64_t want_begin, want_end, begin, end;
      bool contiguous;
      span_of(0, c.k_len, [&](std::int64_t j) {
        for (std::int64_t i = i0; i < i1; ++i)
          if (rule.visible(i, j)) return true;
        return false;
      }, &want_begin, &want_end, &contiguous);
      rule.key_range(i0, i1, &begin, &end);
      SCOPED_TRACE(testing::Message() << "q_len " << c.q_len << " k_len " << c.k_len << " window (" << c.left << ", "
                                      << c.right << ") bottom_right " << c.bottom_right << " rows [" << i0 << ", "
                                      << i1 << ")");
      EXPECT_TRUE(contiguous);
      if (want_begin < 0) {
        EXPECT_EQ(begin, end) << "no key visible: an empty range";
      } else {
        EXPECT_EQ(begin, want_begin);
        EXPECT_EQ(end, want_end);
      }
    }
  }
}

TEST(MaskRule, QueryRangeIsTheExactUnionOfTheKeysRows) {
  std::mt19937 rng(11);
  for (const Case& c : cases()) {
    const MaskRule rule = MaskRule::make(c.q_len, c.k_len, c.left, c.right, c.bottom_right);
    for (int trial = 0; trial < 20; ++trial) {
      const std::int64_t j0 = std::int64_t(rng() % c.k_len), j1 = j0 + 1 + std::int64_t(rng() % (c.k_len - j0));
      std::int64_t want_begin, want_end, begin, end;
      bool contiguous;
      span_of(0, c.q_len, [&](std::int64_t i) {
        for (std::int64_t j = j0; j < j1; ++j)
          if (rule.visible(i, j)) return true;
        return false;
      }, &want_begin, &want_end, &contiguous);
      rule.query_range(j0, j1, c.q_len, &begin, &end);
      SCOPED_TRACE(testing::Message() << "q_len " << c.q_len << " k_len " << c.k_len << " window (" << c.left << ", "
                                      << c.right << ") bottom_right " << c.bottom_right << " keys [" << j0 << ", "
                                      << j1 << ")");
      EXPECT_TRUE(contiguous);
      if (want_begin < 0) {
        EXPECT_EQ(begin, end) << "no row sees these keys: an empty range";
      } else {
        EXPECT_EQ(begin, want_begin);
        EXPECT_EQ(end, want_end);
      }
    }
  }
}

// Tiles of rows and keys as the one-pass backward takes them: a key tile visits the query tiles
// (multiples of kRows) that meet its query_range; a query tile counts as its visitors the key
// tiles that meet its key_range. Both must name the same pairs.
TEST(MaskRule, QueryTilesAndKeyTilesAgreeOnWhoVisitsWhom) {
  constexpr std::int64_t kRows = 16, kKeys = 32;
  for (const Case& c : cases()) {
    const MaskRule rule = MaskRule::make(c.q_len, c.k_len, c.left, c.right, c.bottom_right);
    for (std::int64_t n0 = 0; n0 < c.k_len; n0 += kKeys) {
      std::int64_t q_begin, q_end;
      rule.query_range(n0, std::min(n0 + kKeys, c.k_len), c.q_len, &q_begin, &q_end);
      for (std::int64_t m0 = 0; m0 < c.q_len; m0 += kRows) {
        const bool visits = q_end > q_begin && q_begin < m0 + kRows && m0 < q_end;
        std::int64_t k_begin, k_end;
        rule.key_range(m0, std::min(m0 + kRows, c.q_len), &k_begin, &k_end);
        const bool counted = k_end > k_begin && k_begin < n0 + kKeys && n0 < k_end;
        EXPECT_EQ(visits, counted) << "q_len " << c.q_len << " k_len " << c.k_len << " window (" << c.left << ", "
                                   << c.right << ") bottom_right " << c.bottom_right << " key tile " << n0
                                   << " query tile " << m0;
      }
    }
  }
}

TEST(MaskRule, AVisibleTileHasNothingMasked) {
  for (const Case& c : cases()) {
    const MaskRule rule = MaskRule::make(c.q_len, c.k_len, c.left, c.right, c.bottom_right);
    for (std::int64_t i0 = 0; i0 < c.q_len; i0 += 16)
      for (std::int64_t j0 = 0; j0 < c.k_len; j0 += 16) {
        const std::int64_t i1 = std::min(i0 + 16, c.q_len), j1 = std::min(j0 + 16, c.k_len);
        if (!rule.tile_visible(i0, i1, j0, j1)) continue;
        for (std::int64_t i = i0; i < i1; ++i)
          for (std::int64_t j = j0; j < j1; ++j) ASSERT_TRUE(rule.visible(i, j)) << i << ", " << j;
      }
  }
}

}  // namespace
}  // namespace memattn::detail
