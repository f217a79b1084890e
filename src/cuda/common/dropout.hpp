// Dropout on a tile of probabilities: which elements the counter-based Philox stream drops
// (core/philox.hpp: the same bits on every backend and kernel), per element or with one Philox call
// shared by the lanes that need its words.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/philox.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score_tile.hpp"

namespace memattn::cuda {

using namespace cute;

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

// apply_dropout for m16n8 accumulator fragments with (query, key) coordinates, per row with 32-bit
// offsets inside the tile (the forward's fast path, as transform_scores_rows in score_mods.hpp):
// the Philox counter takes (j >> 2, i) truncated to 32 bits, and tiles start at multiples of four
// keys, so 32-bit offsets give the same words.
template <class Probs, class Coords>
__device__ __forceinline__ void apply_dropout_rows(const FwdParams& p, const TileOrigin& t, Probs& prob,
                                                   const Coords& coord) {
  Tensor p_rc = rowcol(prob);
  Tensor c_rc = rowcol(coord);
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  const std::uint32_t bh = std::uint32_t(std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h));
  const int row0 = get<0>(c_rc(0, 0)), col0 = get<1>(c_rc(0, 0));
  const std::uint32_t i0 = std::uint32_t(t.m0) + std::uint32_t(row0);
  const std::uint32_t j0 = std::uint32_t(std::uint64_t(t.n0) >> 2);  // t.n0 % 4 == 0
  CUTE_UNROLL
  for (int r = 0; r < size<0>(p_rc); ++r) {
    const std::uint32_t i = i0 + std::uint32_t(get<0>(c_rc(r, 0)) - row0);
    CUTE_UNROLL
    for (int c = 0; c < size<1>(p_rc); c += 2) {
      const int col = get<1>(c_rc(0, c));  // even: columns col and col + 1 share one Philox call
      const detail::Philox4 w =
          detail::philox4x32_10(detail::Philox4{j0 + std::uint32_t(col >> 2), i, bh, key.c3}, key.k0, key.k1);
      const int lane = col & 3;
      if (detail::philox_word(w, lane) < key.threshold) p_rc(r, c) = 0.0f;
      if (detail::philox_word(w, lane + 1) < key.threshold) p_rc(r, c + 1) = 0.0f;
    }
  }
}

// The dropout decisions of one m16n8 accumulator fragment as bits (bit e: element e is kept),
// with each Philox call shared by the lanes that need its words (kDropoutPaired). Elements whose
// coordinates lie past the tile's sequence get arbitrary bits (they are masked anyway).
// - ScoreRows::queries (the forward and the dQ kernel): lanes t and t ^ 1 hold the same rows r,
//   r + 8 and the two halves of a 4-key group: each computes one row's words and passes two to the
//   other.
// - ScoreRows::keys (the dK/dV kernels): lanes t, t + 4, t + 8, t + 12 (same t % 4) hold
//   the 4 keys of one group for the same two queries, in rows k and k + 8: the four counters
//   (key group of k or k + 8, query q0 or q0 + 1) are computed one per lane, and each lane collects
//   its word (k % 4) of all four with three shuffles.
template <ScoreRows kScoreRows, class FragLayout, class Coords>
__device__ __forceinline__ std::uint64_t dropout_keep_bits(const FwdParams& p, const TileOrigin& t,
                                                           FragLayout frag, const Coords& coord) {
  constexpr bool kKeyRows = kScoreRows == ScoreRows::keys;
  Tensor c_rc = rowcol(coord);
  static_assert(decltype(size(coord))::value <= 64 && decltype(size<0>(c_rc))::value % 2 == 0);
  const auto index = rowcol_layout(frag);  // (row, col) -> element e of the register fragment
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  const std::uint32_t bh = std::uint32_t(std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h));
  const std::uint32_t i0 = std::uint32_t(t.m0), j0 = std::uint32_t(std::uint64_t(t.n0) >> 2);  // t.n0 % 4 == 0
  std::uint64_t bits = 0;
  const auto set = [&](int r, int c, std::uint32_t word) {
    if (word >= key.threshold) bits |= std::uint64_t(1) << index(r, c);
  };
  CUTE_UNROLL
  for (int m = 0; m < size<0>(c_rc); m += 2) {  // rowcol rows m and m + 1: fragment rows r and r + 8
    CUTE_UNROLL
    for (int c = 0; c < size<1>(c_rc); c += 2) {
      const int row = get<0>(c_rc(m, c)), col = get<1>(c_rc(m, c));  // tile coordinates, col even
      if constexpr (!kKeyRows) {
        const bool upper = (col & 2) != 0;
        const std::uint32_t i = i0 + std::uint32_t(upper ? get<0>(c_rc(m + 1, c)) : row);
        const detail::Philox4 w =
            detail::philox4x32_10(detail::Philox4{j0 + std::uint32_t(col >> 2), i, bh, key.c3}, key.k0, key.k1);
        const std::uint32_t own0 = upper ? w.z : w.x, own1 = upper ? w.w : w.y;
        const std::uint32_t got0 = __shfl_xor_sync(0xffffffffu, upper ? w.x : w.z, 1);
        const std::uint32_t got1 = __shfl_xor_sync(0xffffffffu, upper ? w.y : w.w, 1);
        set(m, c, upper ? got0 : own0);
        set(m, c + 1, upper ? got1 : own1);
        set(m + 1, c, upper ? own0 : got0);
        set(m + 1, c + 1, upper ? own1 : got1);
      } else {
        // Rows are keys: row (k) and row + 8; columns queries col, col + 1. Counter q of the four:
        // key group of row (q < 2) or row + 8, query col + (q & 1).
        constexpr int kKeyInGroupBits = 0b1100;  // lane bits 2-3: which key of the 4-key group
        const int lane = int(threadIdx.x % 32), s = row & 3;
        const int q = s;  // this lane computes counter s
        const std::uint32_t jg = j0 + std::uint32_t((row + (q < 2 ? 0 : 8)) >> 2);
        const detail::Philox4 w = detail::philox4x32_10(
            detail::Philox4{jg, i0 + std::uint32_t(col + (q & 1)), bh, key.c3}, key.k0, key.k1);
        const auto word = [&](int k) { return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w; };
        std::uint32_t mine[4];  // word s of counters 0..3
        CUTE_UNROLL
        for (int d = 0; d < 4; ++d) {
          // Round d: this lane reads counter (s + d) & 3 from the lane that computed it, which
          // sends word (its s - d) & 3, the one this lane needs.
          const int src = (lane & ~kKeyInGroupBits) | (((s + d) & 3) << 2);
          const std::uint32_t got = d == 0 ? word(s) : __shfl_sync(0xffffffffu, word((s - d) & 3), src);
          const int counter = (s + d) & 3;
          CUTE_UNROLL
          for (int k = 0; k < 4; ++k)
            if (k == counter) mine[k] = got;
        }
        set(m, c, mine[0]);
        set(m, c + 1, mine[1]);
        set(m + 1, c, mine[2]);
        set(m + 1, c + 1, mine[3]);
      }
    }
  }
  return bits;
}

// apply_dropout_rows with each Philox call shared by the lanes that need its words
// (dropout_keep_bits): half the calls.
template <class Probs, class Coords>
__device__ __forceinline__ void apply_dropout_rows_paired(const FwdParams& p, const TileOrigin& t, Probs& prob,
                                                          const Coords& coord) {
  const std::uint64_t keep = dropout_keep_bits<ScoreRows::queries>(p, t, prob.layout(), coord);
  CUTE_UNROLL
  for (int e = 0; e < size(prob); ++e)
    if (((keep >> e) & 1) == 0) prob(e) = 0.0f;
}

// Whether dropout keeps element (i, j) of head row bh (one Philox call per element).
__device__ __forceinline__ bool dropout_keeps(const FwdParams& p, std::uint64_t bh, std::int64_t i, std::int64_t j) {
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  return detail::philox_word(detail::dropout_words(key, bh, i, j), int(j & 3)) >= key.threshold;
}

}  // namespace memattn::cuda
