// What happens to a tile of raw scores Q K^T before softmax (scale to base 2, bias, mask) and to
// its probabilities after (dropout). Elements are addressed through a coordinate tensor
// partitioned like the accumulator, so this works for any fragment layout.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/mask.hpp"
#include "core/philox.hpp"
#include "cuda/fwd_params.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

constexpr float kLog2e = 1.4426950408889634f;

// Where one tile of scores sits: sequence b (the b of bias and dropout), query head h, query rows
// from m0 and key columns from n0 (local to the sequence), and the valid extents.
struct TileOrigin {
  int b, h;
  std::int64_t m0, n0;
  std::int64_t q_len, k_len;
};

// The (query, key) position of element e of a tile whose coordinates are (query, key) or, for the
// backward's transposed tiles (kKeyRows), (key, query).
template <bool kKeyRows, class Coords>
__device__ __forceinline__ void query_key(const TileOrigin& t, const Coords& coord, int e, std::int64_t* i,
                                          std::int64_t* j) {
  *i = t.m0 + (kKeyRows ? get<1>(coord(e)) : get<0>(coord(e)));
  *j = t.n0 + (kKeyRows ? get<0>(coord(e)) : get<1>(coord(e)));
}

// s <- log2(e) * (scale * s + bias), and -inf where the mask hides the key (only when `masked`:
// tiles fully inside the window skip the per-element test). kBiasCode compiles the bias in; a
// problem without bias still runs such a kernel (p.bias is null then).
template <class Element, bool kBiasCode, bool kKeyRows = false, class Scores, class Coords>
__device__ __forceinline__ void transform_scores(const FwdParams& p, const detail::MaskRule& rule, const TileOrigin& t,
                                                 bool masked, Scores& s, const Coords& coord) {
  const bool has_bias = kBiasCode && p.bias != nullptr;
  const char* bias_base = nullptr;
  if (has_bias)
    bias_base = static_cast<const char*>(p.bias) +
                (std::int64_t(t.b) * p.bias_batch_stride + std::int64_t(t.h) * p.bias_head_stride) *
                    (p.bias_is_f32 ? 4 : 2);
  CUTE_UNROLL
  for (int e = 0; e < size(s); ++e) {
    std::int64_t i, j;
    query_key<kKeyRows>(t, coord, e, &i, &j);
    float x = s(e) * p.scale_log2;
    if constexpr (kBiasCode) {
      if (has_bias && i < t.q_len && j < t.k_len) {
        const std::int64_t off = i * p.bias_row_stride + j * p.bias_col_stride;
        const float b = p.bias_is_f32 ? __ldg(reinterpret_cast<const float*>(bias_base) + off)
                                      : float(reinterpret_cast<const Element*>(bias_base)[off]);
        x = fmaf(b, kLog2e, x);
      }
    }
    if (masked && !rule.visible(i, j)) x = -INFINITY;
    s(e) = x;
  }
}

// Zeroes the dropped probabilities. Values (2k, 2k + 1) of an m16n8 fragment are neighbouring
// columns of one row, so one Philox call (four keys) serves each pair.
template <class Probs, class Coords>
__device__ __forceinline__ void apply_dropout(const FwdParams& p, const TileOrigin& t, Probs& prob, const Coords& coord) {
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  const std::uint64_t bh = std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h);
  CUTE_UNROLL
  for (int e = 0; e < size(prob); e += 2) {
    const std::int64_t i = t.m0 + get<0>(coord(e));
    const std::int64_t j = t.n0 + get<1>(coord(e));
    const detail::Philox4 w = detail::dropout_words(key, bh, i, j);
    const int lane = int(j & 3);
    if (detail::philox_word(w, lane) < key.threshold) prob(e) = 0.0f;
    if (detail::philox_word(w, lane + 1) < key.threshold) prob(e + 1) = 0.0f;
  }
}

// Whether dropout keeps element (i, j) of head row bh (one Philox call per element).
__device__ __forceinline__ bool dropout_keeps(const FwdParams& p, std::uint64_t bh, std::int64_t i, std::int64_t j) {
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  return detail::philox_word(detail::dropout_words(key, bh, i, j), int(j & 3)) >= key.threshold;
}

}  // namespace memattn::cuda::sm80
