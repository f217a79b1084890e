// The attention mask as the kernels use it: per-element visibility plus the trip counts that let
// a kernel skip fully masked tiles, mask only boundary tiles and run unmasked tiles fast.
// Host and device code share it; the reference deliberately does not (it has its own rule).
#pragma once

#include <cstdint>

#include "core/philox.hpp"  // MEMATTN_HD

namespace memattn::detail {

struct MaskRule {
  std::int64_t shift = 0;   // diagonal of row i is i + shift (k_len - q_len for bottom_right)
  std::int64_t left = -1;   // window sizes, -1 = unbounded
  std::int64_t right = -1;
  std::int64_t k_len = 0;   // keys of this sequence

  MEMATTN_HD static MaskRule make(std::int64_t q_len, std::int64_t k_len, std::int64_t left,
                                  std::int64_t right, bool bottom_right) {
    MaskRule m;
    m.shift = bottom_right ? k_len - q_len : 0;
    m.left = left;
    m.right = right;
    m.k_len = k_len;
    return m;
  }

  // First and one-past-last visible key of row i (empty when first >= last).
  MEMATTN_HD std::int64_t first_key(std::int64_t i) const {
    const std::int64_t lo = left < 0 ? 0 : i + shift - left;
    return lo < 0 ? 0 : lo;
  }
  MEMATTN_HD std::int64_t end_key(std::int64_t i) const {
    const std::int64_t hi = right < 0 ? k_len : i + shift + right + 1;
    return hi > k_len ? k_len : hi;
  }
  MEMATTN_HD bool visible(std::int64_t i, std::int64_t j) const {
    return j >= first_key(i) && j < end_key(i);
  }

  // Keys that some row of [i0, i1) can see: [*begin, *end). Rows see a window that moves right
  // as i grows, so the union is bounded by the first row's start and the last row's end.
  MEMATTN_HD void key_range(std::int64_t i0, std::int64_t i1, std::int64_t* begin, std::int64_t* end) const {
    *begin = first_key(i0);
    *end = end_key(i1 - 1);
    if (*end < *begin) *end = *begin;
  }

  // Rows that see some key of [j0, j1): [*begin, *end), clipped to [0, q_len).
  MEMATTN_HD void query_range(std::int64_t j0, std::int64_t j1, std::int64_t q_len, std::int64_t* begin,
                              std::int64_t* end) const {
    std::int64_t lo = right < 0 ? 0 : j0 - shift - right;  // end_key(i) > j0
    std::int64_t hi = left < 0 ? q_len : j1 - 1 - shift + left + 1;  // first_key(i) <= j1 - 1
    lo = lo < 0 ? 0 : lo;
    hi = hi > q_len ? q_len : hi;
    *begin = lo;
    *end = hi < lo ? lo : hi;
  }

  // True when every (i, j) of [i0, i1) x [j0, j1) is visible, so the tile needs no masking.
  MEMATTN_HD bool tile_visible(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return first_key(i1 - 1) <= j0 && j1 <= end_key(i0);
  }

  // The rows that see every key of [j0, j1): [*begin, *end), empty when none does, so that
  // tile_visible(i0, i1, j0, j1) == (*begin <= i0 && i1 <= *end) for every i0 < i1. A loop over
  // the row tiles of one key tile then tests two bounds instead of the rule.
  MEMATTN_HD void rows_seeing_all(std::int64_t j0, std::int64_t j1, std::int64_t* begin, std::int64_t* end) const {
    // first_key(i) <= j0 for i <= j0 - shift + left; end_key(i) >= j1 for i >= j1 - shift - right - 1
    // (and only within the keys).
    *begin = right < 0 ? INT64_MIN / 2 : j1 - shift - right - 1;
    *end = left < 0 ? INT64_MAX / 2 : j0 - shift + left + 1;
    if (j1 > k_len || *end < *begin) *end = *begin;
  }
};

}  // namespace memattn::detail
