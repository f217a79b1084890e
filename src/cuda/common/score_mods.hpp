// What happens to a tile of raw scores Q K^T before softmax: scale, bias (per element from global
// memory, or from a shared-memory bias tile) and mask, in log2 or natural units. Dropout, after the
// softmax, is in dropout.hpp (included here, so that this header brings every score modifier).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "cuda/common/bias_tile.hpp"
#include "cuda/common/dropout.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score_tile.hpp"
#include "cuda/common/softmax.hpp"

namespace memattn::cuda {

using namespace cute;

// The units transform_scores leaves scores in: s <- s * score + bias * this->bias. Log2 units
// (log2_units) for softmaxes that exponentiate the scores as they are (the forward's 16-bit wide
// and global-accumulator kernels); natural units (scale * s + bias: one FFMA per score with bias)
// where the exp2's FFMA multiplies by log2(e) anyway (the forward's register rows, the fp32 rows
// (kNaturalLse) and the backward's bias rows).
struct ScoreUnits {
  float score, bias;
};
__device__ __forceinline__ ScoreUnits log2_units(const FwdParams& p) { return {p.scale_log2, kLog2e}; }
__device__ __forceinline__ ScoreUnits natural_units(const FwdParams& p) { return {p.scale, 1.0f}; }

// Adds a SharedBias tile (elements of type BiasT) to scaled scores in the rows x cols view of
// m16n8 fragments: s <- s * units.score + units.bias * bias. Columns 2k and 2k + 1 of a thread
// are neighbouring keys, so each pair is one 32-bit (16-bit bias) or 64-bit (fp32) shared-memory
// load; the tile's pitch puts a quad's eight rows on different banks.
template <class BiasT, class ScoresRC, class CoordsRC>
__device__ __forceinline__ void add_shared_bias_pairs(ScoreUnits units, const SharedBias& bias, ScoresRC& s_rc,
                                                      const CoordsRC& c_rc) {
  constexpr int kRows = decltype(size<0>(s_rc))::value;
  constexpr int kCols = decltype(size<1>(s_rc))::value;
  static_assert(kCols % 2 == 0);
  const int row0 = get<0>(c_rc(0, 0));
  const int col0 = get<1>(c_rc(0, 0));
  const char* tile = bias.tile + row0 * bias.pitch + col0 * int(sizeof(BiasT));
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int dr = get<0>(c_rc(r, 0)) - row0;  // a constant
    CUTE_UNROLL
    for (int c = 0; c < kCols; c += 2) {
      const int dc = get<1>(c_rc(0, c)) - col0;  // a constant
      float2 b;
      if constexpr (sizeof(BiasT) == 4) {
        b = *reinterpret_cast<const float2*>(tile + dr * bias.pitch + dc * 4);
      } else {
        b = unpack_pair<BiasT>(*reinterpret_cast<const std::uint32_t*>(tile + dr * bias.pitch + dc * 2));
      }
      s_rc(r, c) = fmaf(s_rc(r, c), units.score, b.x * units.bias);
      s_rc(r, c + 1) = fmaf(s_rc(r, c + 1), units.score, b.y * units.bias);
    }
  }
}

// A bias tile as the Hopper forward's TMA loads write it (sm90/fwd/traits.hpp's FwdBiasTraits):
// 16-bit elements of q's dtype, kRows query rows x the key columns in blocks of 64 columns (128
// bytes a row), each block kRows rows of the 128-byte swizzle (the 16-byte chunk c of row r at
// chunk c ^ (r % 8)), the tile 1024-byte aligned. A bias broadcast over the queries has its one
// row first (`one_row`: every query reads it).
template <int kRows>
struct SwizzledBias {
  const void* tile = nullptr;
  bool one_row = false;
};

// Adds a SwizzledBias tile to the scores of a warpgroup MMA accumulator (m64nN: a thread's columns
// are 2 * (lane % 4) + 8 j + {0, 1}, so each pair is one 32-bit load from chunk j % 8 of its row's
// 64-column block): s <- s * units.score + units.bias * bias. The eight rows of a load are eight
// lanes' (r % 8 apart), so the swizzle puts them on different chunks: no bank conflicts (one row
// read by all: a broadcast).
template <class Element, int kTileRows, class ScoresRC, class CoordsRC>
__device__ __forceinline__ void add_shared_bias_pairs(ScoreUnits units, const SwizzledBias<kTileRows>& bias,
                                                      ScoresRC& s_rc, const CoordsRC& c_rc) {
  constexpr int kRows = decltype(size<0>(s_rc))::value;
  constexpr int kCols = decltype(size<1>(s_rc))::value;
  constexpr int kBlockCols = 64, kRowBytes = kBlockCols * 2;
  static_assert(kCols % 2 == 0 && sizeof(Element) == 2);
  const int row0 = bias.one_row ? 0 : get<0>(c_rc(0, 0));
  const int row_step = bias.one_row ? 0 : kRowBytes;  // bytes per row of the thread's rows (8 apart)
  const int col0 = get<1>(c_rc(0, 0));  // 2 * (lane % 4): inside the first 16-byte chunk
  const int row_swizzle = (row0 % 8) * 16;  // the same for every row of the thread (8 apart)
  const char* row_base = static_cast<const char*>(bias.tile) + row0 * kRowBytes + col0 * 2;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int dr = get<0>(c_rc(r, 0)) - get<0>(c_rc(0, 0));  // a constant, a multiple of 8
    CUTE_UNROLL
    for (int c = 0; c < kCols; c += 2) {
      const int dc = get<1>(c_rc(0, c)) - col0;  // a constant, a multiple of 8
      const int block = dc / kBlockCols, chunk = dc % kBlockCols / 8;
      const char* at = row_base + block * kTileRows * kRowBytes + dr * row_step + ((chunk * 16) ^ row_swizzle);
      const float2 b = unpack_pair<Element>(*reinterpret_cast<const std::uint32_t*>(at));
      s_rc(r, c) = fmaf(s_rc(r, c), units.score, b.x * units.bias);
      s_rc(r, c + 1) = fmaf(s_rc(r, c + 1), units.score, b.y * units.bias);
    }
  }
}

// s <- units.score * s + units.bias * bias (log2(e) * (scale * s + bias) in log2_units), and -inf
// where the mask hides the key (only when `masked`: tiles fully inside the window skip the
// per-element test). kBias says which bias code is compiled in; a problem without bias still runs
// such a kernel (p.bias is null then). With a SharedBias tile (query rows m0.., key columns n0..,
// whichever way round the scores are) the bias comes from shared memory.
template <class Element, BiasCode kBias, ScoreRows kScoreRows = ScoreRows::queries, class Scores, class Coords>
__device__ __forceinline__ void transform_scores(const FwdParams& p, const detail::MaskRule& rule, const TileOrigin& t,
                                                 bool masked, Scores& s, const Coords& coord,
                                                 SharedBias shared_bias, ScoreUnits units) {
  constexpr bool kKeyRows = kScoreRows == ScoreRows::keys;
  constexpr bool kBiasCode = kBias != BiasCode::none;
  const bool tile_bias = kBias == BiasCode::tile && shared_bias.tile != nullptr;
  const bool has_bias = kBias == BiasCode::global && p.bias != nullptr;
  const char* bias_base = nullptr;
  if (has_bias)
    bias_base = static_cast<const char*>(p.bias) +
                (std::int64_t(t.b) * p.bias_batch_stride + std::int64_t(t.h) * p.bias_head_stride) *
                    (p.bias_is_f32 ? 4 : 2);
  // m16n8 fragments with query rows: a thread's neighbouring values are neighbouring keys, read
  // from the tile in pairs. (The SIMT kernels' 4 x 4 fragments are rank 2.)
  constexpr bool kPairs = !kKeyRows && decltype(rank(s.layout()))::value == 3;
  bool done = false;
  if constexpr (kPairs) {
    if (tile_bias) {
      Tensor s_rc = rowcol(s);
      if (p.bias_is_f32) add_shared_bias_pairs<float>(units, shared_bias, s_rc, rowcol(coord));
      else add_shared_bias_pairs<Element>(units, shared_bias, s_rc, rowcol(coord));
      done = true;
    }
  }
  if (!done) {
    CUTE_UNROLL
    for (int e = 0; e < size(s); ++e) {
      std::int64_t i, j;
      query_key<kScoreRows>(t, coord, e, &i, &j);
      float b = 0.0f;
      if constexpr (kBiasCode) {
        if (tile_bias) {
          int r, c;
          tile_row_col<kScoreRows>(coord, e, &r, &c);
          b = shared_bias_at<Element>(p, shared_bias, r, c);
        } else if (has_bias && i < t.q_len && j < t.k_len) {
          const std::int64_t off = i * p.bias_row_stride + j * p.bias_col_stride;
          b = p.bias_is_f32 ? __ldg(reinterpret_cast<const float*>(bias_base) + off)
                            : float(reinterpret_cast<const Element*>(bias_base)[off]);
        }
      }
      s(e) = kBiasCode ? fmaf(s(e), units.score, b * units.bias) : s(e) * units.score;
    }
  }
  // The mask in a loop of its own behind one branch per tile, so that the tiles inside the window
  // execute none of its 64-bit comparisons (inside the loop above, nvcc predicated them into
  // every tile of the backward's dQ kernel).
  if (masked) {
    CUTE_UNROLL
    for (int e = 0; e < size(s); ++e) {
      std::int64_t i, j;
      query_key<kScoreRows>(t, coord, e, &i, &j);
      if (!rule.visible(i, j)) s(e) = -INFINITY;
    }
  }
}

// Zeroes P and dS where the mask hides the key (both fragments laid out as `coord`), for
// gradients computed from unscaled scores (gradient_tile without bias).
template <ScoreRows kScoreRows, class S, class DP, class Coords>
__device__ __forceinline__ void zero_hidden(const detail::MaskRule& rule, const TileOrigin& t, S& s, DP& dp,
                                            const Coords& coord) {
  CUTE_UNROLL
  for (int e = 0; e < size(s); ++e) {
    std::int64_t i, j;
    query_key<kScoreRows>(t, coord, e, &i, &j);
    if (!rule.visible(i, j)) {
      s(e) = 0.0f;
      dp(e) = 0.0f;
    }
  }
}

// The forward's fast paths of transform_scores and apply_dropout for m16n8 accumulator fragments
// with (query, key) coordinates (the accumulator's identity tensor, partitioned like it): the same
// results, computed per row with 32-bit offsets inside the tile. A thread's columns are its first
// column plus compile-time offsets, and its rows the same, so the mask is two 32-bit bounds per
// row and each element compares a constant against them: no 64-bit index or per-element
// coordinate stays live across the key loop.
// With a SharedBias or SwizzledBias tile the bias comes from shared memory (zero-filled past the
// sequence).
// The scores are left in natural units (scale * s + bias: one FFMA per score with bias); the
// softmax's exp2 FFMA multiplies by log2(e).
template <class Element, BiasCode kBias, class Scores, class Coords, class TileBias = SharedBias>
__device__ __forceinline__ void transform_scores_rows(const FwdParams& p, const detail::MaskRule& rule,
                                                      const TileOrigin& t, bool masked, Scores& s, const Coords& coord,
                                                      TileBias shared_bias = {}) {
  Tensor s_rc = rowcol(s);
  Tensor c_rc = rowcol(coord);
  constexpr int kRows = decltype(size<0>(s_rc))::value;
  constexpr int kCols = decltype(size<1>(s_rc))::value;
  constexpr int kSpan = 1 << 16;  // bound on a tile's rows and columns
  const int row0 = get<0>(c_rc(0, 0));
  const int col0 = get<1>(c_rc(0, 0));
  const std::int64_t base_i = t.m0 + row0;
  const auto clamp32 = [](std::int64_t v) { return int(v < -kSpan ? -kSpan : v > kSpan ? kSpan : v); };
  constexpr bool kGlobalBias = kBias == BiasCode::global;  // the per-element path below
  const bool tile_bias = kBias == BiasCode::tile && shared_bias.tile != nullptr;
  if (tile_bias) {
    if constexpr (std::is_same_v<TileBias, SharedBias>) {
      if (p.bias_is_f32) add_shared_bias_pairs<float>(natural_units(p), shared_bias, s_rc, c_rc);
      else add_shared_bias_pairs<Element>(natural_units(p), shared_bias, s_rc, c_rc);
    } else {
      add_shared_bias_pairs<Element>(natural_units(p), shared_bias, s_rc, c_rc);  // q's dtype only
    }
  } else {
    const bool has_bias = kGlobalBias && p.bias != nullptr;  // read from global memory
    [[maybe_unused]] const int rows_in = clamp32(t.q_len - base_i), cols_in = clamp32(t.k_len - t.n0 - col0);
    const char* bias_row = nullptr;
    std::int64_t bias_cs = 0;
    if (has_bias) {
      bias_cs = p.bias_col_stride;
      bias_row = static_cast<const char*>(p.bias) + (std::int64_t(t.b) * p.bias_batch_stride +
                                                     std::int64_t(t.h) * p.bias_head_stride +
                                                     base_i * p.bias_row_stride + (t.n0 + col0) * bias_cs) *
                                                        (p.bias_is_f32 ? 4 : 2);
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int dr = get<0>(c_rc(r, 0)) - row0;  // a constant
      [[maybe_unused]] std::int64_t boff = 0;
      if constexpr (kGlobalBias)
        if (has_bias) boff = std::int64_t(dr) * p.bias_row_stride;
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const int dc = get<1>(c_rc(0, c)) - col0;  // a constant
        float b = 0.0f;
        if constexpr (kGlobalBias) {
          if (has_bias && dr < rows_in && dc < cols_in) {
            const std::int64_t off = boff + std::int64_t(dc) * bias_cs;
            b = p.bias_is_f32 ? __ldg(reinterpret_cast<const float*>(bias_row) + off)
                              : float(reinterpret_cast<const Element*>(bias_row)[off]);
          }
        }
        s_rc(r, c) = kGlobalBias ? fmaf(s_rc(r, c), p.scale, b) : s_rc(r, c) * p.scale;
      }
    }
  }
  if (!masked) return;
  // Visible keys of row i relative to the thread's first column: [lo - col0, hi - col0). Clamping
  // to [-kSpan, kSpan] keeps every in-tile comparison unchanged.
  const std::int64_t lo0 = rule.left < 0 ? -kSpan : base_i + rule.shift - rule.left - t.n0 - col0;
  const std::int64_t hi_k = rule.k_len - t.n0 - col0;  // keys past k_len are masked
  const std::int64_t hi0 = rule.right < 0 ? hi_k : base_i + rule.shift + rule.right + 1 - t.n0 - col0;
  const int lo_base = clamp32(lo0), hi_base = clamp32(hi0), hi_cap = clamp32(hi_k);
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int dr = get<0>(c_rc(r, 0)) - row0;
    const int lo = lo_base + dr;
    const int hi = min(hi_base + dr, hi_cap);
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int dc = get<1>(c_rc(0, c)) - col0;
      if (!(dc >= lo && dc < hi)) s_rc(r, c) = -INFINITY;
    }
  }
}

}  // namespace memattn::cuda
