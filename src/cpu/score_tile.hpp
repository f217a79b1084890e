// The parts of a score tile that the CPU forward and backward share: the scores
// S = scale * (Q K^T) + bias with the mask applied, the LSE of a row, and the dropout keep mask of a
// tile. The tile may be stored either way round (the forward keeps S^T, the backward S): element
// (r, c) of query row r and key column c lives at s[r * layout.row + c * layout.col].
//
// The backward recomputes P = exp(S - LSE) from the forward's LSE, so both passes compute every
// score bit for bit alike (the same products summed in the same order by gemm, whichever operand
// is A; the same float scale; the same bias term), and both work in the natural domain, the LSE's.
// Then the forward's rounding of a score cancels in S - LSE: a row with one dominant key has
// sum 1, LSE = its score exactly, and P = exp(0) = 1 in the backward as in the forward. Any
// difference (the forward in base 2 with LSE converted to the natural log, or S scaled differently
// in the two passes, as the backends once did) leaves S - LSE off by a few roundings of |S|, about
// |S| 2^-24 each: dV was off by 1.4e-2 relative at scores of 1e5 in fp32. What remains is the
// float32 LSE's own rounding on rows whose sum is not 1 (|LSE| 2^-24 at most).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/mask.hpp"
#include "core/philox.hpp"
#include "core/problem.hpp"
#include "cpu/tiles.hpp"
#include "cpu/vec_math.hpp"

namespace memattn::cpu {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct TileCoords {
  std::int64_t b;         // sequence index (the b of bias and dropout)
  std::int64_t h;         // query head
  std::int64_t i0, rows;  // query rows [i0, i0 + rows), local to the sequence
  std::int64_t j0, cols;  // key rows [j0, j0 + cols), local to the sequence
};

struct TileLayout {
  std::int64_t row, col;  // strides of a query row and a key column
};

// S = scale * (Q K^T) + bias from the tile of dot products Q K^T: multiplies by the float scale
// (scaling the sums rather than Q spares every query element a rounding), adds the bias and sets
// masked elements (and key columns at or past t.cols, up to tile_cols) to -inf. row_buf: tile_cols
// floats of scratch. The tile is tile_rows x tile_cols in either layout, all of it scaled.
inline void finish_scores(const detail::Problem& p, const TensorRef& bias, const detail::MaskRule& rule,
                          const TileCoords& t, std::int64_t tile_rows, std::int64_t tile_cols, TileLayout layout,
                          float* s, float* row_buf) {
  const float scale = float(p.scale);
  for (std::int64_t e = 0; e < tile_rows * tile_cols; ++e) s[e] *= scale;
  if (p.has_bias) {
    const std::int64_t jstride = p.bias_broadcast[3] ? 0 : bias.strides[3];
    for (std::int64_t r = 0; r < t.rows; ++r) {
      const std::int64_t off = bias_offset(bias, p.bias_broadcast, t.b, t.h, t.i0 + r, t.j0);
      if (jstride == 1) {
        to_float(static_cast<const char*>(bias.data) + off * std::int64_t(dtype_size(bias.dtype)), bias.dtype,
                 t.cols, 1.0f, row_buf);
      } else {
        for (std::int64_t c = 0; c < t.cols; ++c)
          row_buf[c] = detail::load_float(bias.data, bias.dtype, off + c * jstride);
      }
      float* srow = s + r * layout.row;
      for (std::int64_t c = 0; c < t.cols; ++c) srow[c * layout.col] += row_buf[c];
    }
  }
  if (t.cols == tile_cols && rule.tile_visible(t.i0, t.i0 + t.rows, t.j0, t.j0 + t.cols)) return;
  for (std::int64_t r = 0; r < t.rows; ++r) {
    const std::int64_t lo = rule.first_key(t.i0 + r) - t.j0;
    const std::int64_t hi = std::min(rule.end_key(t.i0 + r) - t.j0, t.cols);
    float* srow = s + r * layout.row;
    for (std::int64_t c = 0; c < tile_cols; ++c)
      if (c < lo || c >= hi) srow[c * layout.col] = kNegInf;
  }
}

// The LSE of a row with running maximum `row_max` and sum of exp(S - row_max) `row_sum`:
// row_max + log(row_sum) in double, rounded once on storing, so that a sum of exactly 1 gives
// LSE = row_max exactly.
inline float row_lse(float row_max, float row_sum) {
  return float(double(row_max) + std::log(double(row_sum)));
}

// keep(r, c) = 1 or 0 for the tile's elements, same layout as the scores (columns past t.cols: 0).
inline void dropout_tile(const detail::Problem& p, const TileCoords& t, std::int64_t tile_cols, TileLayout layout,
                         float* keep) {
  const detail::DropoutKey key{std::uint32_t(p.dropout_seed), std::uint32_t(p.dropout_seed >> 32),
                               std::uint32_t(p.dropout_offset), p.dropout_threshold};
  const std::uint64_t bh = std::uint64_t(t.b * p.heads_q + t.h);
  for (std::int64_t r = 0; r < t.rows; ++r) {
    float* krow = keep + r * layout.row;
    for (std::int64_t c = t.cols; c < tile_cols; ++c) krow[c * layout.col] = 0.0f;
    // Philox words come in groups of four keys aligned to j % 4 == 0.
    for (std::int64_t j = t.j0 & ~std::int64_t(3); j < t.j0 + t.cols; j += 4) {
      const detail::Philox4 w = detail::dropout_words(key, bh, t.i0 + r, j);
      for (int lane = 0; lane < 4; ++lane) {
        const std::int64_t c = j + lane - t.j0;
        if (c >= 0 && c < t.cols) krow[c * layout.col] = detail::philox_word(w, lane) >= key.threshold ? 1.0f : 0.0f;
      }
    }
  }
}

}  // namespace memattn::cpu
