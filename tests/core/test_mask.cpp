// The kernels' mask rule (src/core/mask.hpp) against brute force: the ranges that give trip counts
// are the exact unions of what the rows (or keys) see, not just bounds on them. The kernels skip
// tiles by them, and a count of a query tile's visitors taken from key_range (the one-pass
// backward's dQ tiles) is right only if a key tile's query_range meets the query tile exactly
// when the query tile's key_range meets the key tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/mask.hpp"
#include "support/seed.hpp"

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

MaskRule rule_of(const Case& c) { return MaskRule::make(c.q_len, c.k_len, c.left, c.right, c.bottom_right); }

std::string describe(const Case& c) {
  return "q_len " + std::to_string(c.q_len) + " k_len " + std::to_string(c.k_len) + " window (" +
         std::to_string(c.left) + ", " + std::to_string(c.right) + ") bottom_right " + std::to_string(c.bottom_right);
}

// For random spans [a0, a1) of rows (rows_to_keys) or of keys: the rule's range of what they
// see (key_range) or of what sees them (query_range) against brute force over the other side,
// which must also be one contiguous span.
void expect_exact_ranges(bool rows_to_keys) {
  std::mt19937_64 rng(testing::next_seed());
  for (const Case& c : cases()) {
    const MaskRule rule = rule_of(c);
    const std::int64_t from = rows_to_keys ? c.q_len : c.k_len, to = rows_to_keys ? c.k_len : c.q_len;
    for (int trial = 0; trial < 20; ++trial) {
      const std::int64_t a0 = std::int64_t(rng() % std::uint64_t(from)), a1 = a0 + 1 + std::int64_t(rng() % std::uint64_t(from - a0));
      SCOPED_TRACE(describe(c) + (rows_to_keys ? " rows [" : " keys [") + std::to_string(a0) + ", " +
                   std::to_string(a1) + ")");
      std::int64_t want_begin = -1, want_end = -1;
      bool contiguous = true;
      for (std::int64_t x = 0; x < to; ++x) {
        bool seen = false;
        for (std::int64_t a = a0; a < a1 && !seen; ++a) seen = rows_to_keys ? rule.visible(a, x) : rule.visible(x, a);
        if (!seen) continue;
        if (want_begin < 0) want_begin = x;
        else if (want_end != x) contiguous = false;
        want_end = x + 1;
      }
      std::int64_t begin, end;
      if (rows_to_keys) rule.key_range(a0, a1, &begin, &end);
      else rule.query_range(a0, a1, c.q_len, &begin, &end);
      EXPECT_TRUE(contiguous);
      if (want_begin < 0) {
        EXPECT_EQ(begin, end) << "nothing seen: an empty range";
      } else {
        EXPECT_EQ(begin, want_begin);
        EXPECT_EQ(end, want_end);
      }
    }
  }
}

TEST(MaskRule, KeyRangeIsTheExactUnionOfTheRowsKeys) { expect_exact_ranges(true); }

TEST(MaskRule, QueryRangeIsTheExactUnionOfTheKeysRows) { expect_exact_ranges(false); }

// Tiles of rows and keys as the one-pass backward takes them: a key tile visits the query tiles
// (multiples of kRows) that meet its query_range; a query tile counts as its visitors the key
// tiles that meet its key_range. Both must name the same pairs.
TEST(MaskRule, QueryTilesAndKeyTilesAgreeOnWhoVisitsWhom) {
  constexpr std::int64_t kRows = 16, kKeys = 32;
  for (const Case& c : cases()) {
    const MaskRule rule = rule_of(c);
    std::vector<std::int64_t> k_begin, k_end;  // each query tile's key range
    for (std::int64_t m0 = 0; m0 < c.q_len; m0 += kRows) {
      k_begin.push_back(0), k_end.push_back(0);
      rule.key_range(m0, std::min(m0 + kRows, c.q_len), &k_begin.back(), &k_end.back());
    }
    for (std::int64_t n0 = 0; n0 < c.k_len; n0 += kKeys) {
      std::int64_t q_begin, q_end;
      rule.query_range(n0, std::min(n0 + kKeys, c.k_len), c.q_len, &q_begin, &q_end);
      for (std::int64_t m0 = 0; m0 < c.q_len; m0 += kRows) {
        const bool visits = q_end > q_begin && q_begin < m0 + kRows && m0 < q_end;
        const std::size_t m = std::size_t(m0 / kRows);
        const bool counted = k_end[m] > k_begin[m] && k_begin[m] < n0 + kKeys && n0 < k_end[m];
        EXPECT_EQ(visits, counted) << describe(c) << " key tile " << n0 << " query tile " << m0;
      }
    }
  }
}

// tile_visible is exact: true for the tiles with nothing masked, false for the others. Checked one
// way only, a tile_visible that always said false would pass (and every tile would be masked); the
// count shows that the cases have such tiles.
TEST(MaskRule, AVisibleTileHasNothingMasked) {
  constexpr std::int64_t kTile = 16;
  std::int64_t visible_tiles = 0;
  for (const Case& c : cases()) {
    const MaskRule rule = rule_of(c);
    for (std::int64_t i0 = 0; i0 < c.q_len; i0 += kTile)
      for (std::int64_t j0 = 0; j0 < c.k_len; j0 += kTile) {
        const std::int64_t i1 = std::min(i0 + kTile, c.q_len), j1 = std::min(j0 + kTile, c.k_len);
        bool all = true;
        for (std::int64_t i = i0; i < i1 && all; ++i)
          for (std::int64_t j = j0; j < j1 && all; ++j) all = rule.visible(i, j);
        ASSERT_EQ(rule.tile_visible(i0, i1, j0, j1), all)
            << describe(c) << " tile rows [" << i0 << ", " << i1 << ") keys [" << j0 << ", " << j1 << ")";
        visible_tiles += all;
      }
  }
  EXPECT_GT(visible_tiles, 0);
}

// rows_seeing_all bounds the rows of tile_visible: for every key tile (ragged ones past the keys
// too, as the backward's last tile may be) and every row range, the two bounds say what the rule
// says; the counts show both answers occur.
TEST(MaskRule, RowsSeeingAllKeysBoundTheVisibleTiles) {
  constexpr std::int64_t kKeys = 16;
  std::int64_t visible = 0, hidden = 0;
  for (const Case& c : cases()) {
    const MaskRule rule = rule_of(c);
    for (std::int64_t j0 = 0; j0 < c.k_len; j0 += kKeys) {
      const std::int64_t j1 = j0 + kKeys;
      std::int64_t begin = 0, end = 0;
      rule.rows_seeing_all(j0, j1, &begin, &end);
      for (std::int64_t i0 = 0; i0 < c.q_len; ++i0)
        for (std::int64_t i1 = i0 + 1; i1 <= std::min(c.q_len, i0 + 40); i1 += 3) {
          const bool expected = rule.tile_visible(i0, i1, j0, j1);
          ASSERT_EQ(begin <= i0 && i1 <= end, expected)
              << describe(c) << " rows [" << i0 << ", " << i1 << ") keys [" << j0 << ", " << j1 << ")";
          (expected ? visible : hidden) += 1;
        }
    }
  }
  EXPECT_GT(visible, 0);
  EXPECT_GT(hidden, 0);
}

}  // namespace
}  // namespace memattn::detail
