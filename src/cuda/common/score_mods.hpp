// What happens to a tile of raw scores Q K^T before softmax (scale, bias, mask; in log2 or
// natural units) and to its probabilities after (dropout). Elements are addressed through a
// coordinate tensor partitioned like the accumulator, so this works for any fragment layout.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/mask.hpp"
#include "core/philox.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"

namespace memattn::cuda {

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

// The same within the tile: query row r and key column c of element e (a shared bias tile's
// element, whichever way round the scores are).
template <bool kKeyRows, class Coords>
__device__ __forceinline__ void tile_row_col(const Coords& coord, int e, int* r, int* c) {
  *r = kKeyRows ? get<1>(coord(e)) : get<0>(coord(e));
  *c = kKeyRows ? get<0>(coord(e)) : get<1>(coord(e));
}

// One (query tile, key tile) of bias in shared memory, in the bias's dtype (fp32 or 16-bit): rows
// of kPitch bytes, sized for fp32 plus 16 bytes, so that the 8 rows an m16n8 fragment read spans
// start 4 banks apart (no bank conflicts for 16-bit bias, 2-way for fp32).
template <int kRows, int kCols>
struct BiasTileShape {
  static constexpr int kPitch = kCols * 4 + 16;
  static constexpr int kBytes = kRows * kPitch;
};

// Where transform_scores(_rows) reads the bias: global memory per element (tile null), or a
// BiasTileShape tile of query rows x key columns.
struct SharedBias {
  char* tile = nullptr;  // the tile's (0, 0)
  int pitch = 0;         // bytes per row
};

// The bias of element (r, c) (query row, key column) of a SharedBias tile.
template <class Element>
__device__ __forceinline__ float shared_bias_at(const FwdParams& p, const SharedBias& t, int r, int c) {
  const char* row = t.tile + r * t.pitch;
  return p.bias_is_f32 ? reinterpret_cast<const float*>(row)[c] : float(reinterpret_cast<const Element*>(row)[c]);
}

// 16 bytes from global to shared memory, of which the first src_bytes are read and the rest zeroed.
__device__ __forceinline__ void cp_async_zfill16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}

// Issues the cp.async copies of the bias of query rows m0.. and keys n0.. of sequence b, head h
// into a BiasTileShape<kRows, kCols> tile (rows past q_len and keys past k_len read as zero), for
// a bias of kElemBytes-byte elements. Needs bias_col_stride == 1 and 16-byte aligned rows (the
// dispatcher checks). A thread copies the same 16-byte column chunk of every kThreads /
// kChunksPerRow-th row, so its column bounds and first address are worked out once per tile and
// each copy only steps the address: with the row, column, bounds and 64-bit address rebuilt per
// copy, each copy cost ~25 instructions (4-8 copies per thread and tile). The element size is a
// template argument so that all of it is shifts.
template <int kRows, int kCols, int kThreads, int kElemBytes>
__device__ __forceinline__ void load_bias_tile_of(const FwdParams& p, int b, int h, std::int64_t m0, std::int64_t n0,
                                                  std::int64_t q_len, std::int64_t k_len, char* dst) {
  using Shape = BiasTileShape<kRows, kCols>;
  constexpr int kElemsPerChunk = 16 / kElemBytes, kChunksPerRow = kCols / kElemsPerChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow;
  static_assert(kCols % kElemsPerChunk == 0 && kThreads % kChunksPerRow == 0);  // a column chunk per thread
  const int r0 = int(threadIdx.x) / kChunksPerRow;
  // A copy of no bytes reads nothing: its source is the row's address whatever the bounds.
  const char* src = static_cast<const char*>(p.bias) +
                    (std::int64_t(b) * p.bias_batch_stride + std::int64_t(h) * p.bias_head_stride +
                     (m0 + r0) * p.bias_row_stride + n0 + int(threadIdx.x) % kChunksPerRow * kElemsPerChunk) *
                        kElemBytes;
  // Not unrolled: the registers of unrolled copies made the 168-register forward bias row spill.
#pragma unroll 1
  for (int r = r0; r < kRows; r += kRowStep) {
    // The column and its bounds come again from an opaque thread index at each copy (a few
    // instructions) instead of staying live through the loop: at the forward's call the
    // registers are full (kept live, they spilled 40 bytes in the key loop).
    const int k = opaque_thread<kThreads>() % kChunksPerRow;
    const std::int64_t j = n0 + k * kElemsPerChunk;
    const int bytes = m0 + r < q_len && j < k_len ? int(min(std::int64_t(16), (k_len - j) * kElemBytes)) : 0;
    cp_async_zfill16(dst + r * Shape::kPitch + k * 16, src, bytes);
    src += std::int64_t(kRowStep) * p.bias_row_stride * kElemBytes;
  }
}

template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_bias_tile(const FwdParams& p, int b, int h, std::int64_t m0, std::int64_t n0,
                                               std::int64_t q_len, std::int64_t k_len, char* dst) {
  if (p.bias_is_f32) load_bias_tile_of<kRows, kCols, kThreads, 4>(p, b, h, m0, n0, q_len, k_len, dst);
  else load_bias_tile_of<kRows, kCols, kThreads, 2>(p, b, h, m0, n0, q_len, k_len, dst);
}

// 16 bytes from global to shared memory.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}

// load_bias_tile with its copies unrolled, for kernels with registers to spare (the backward's):
// a copy costs a 64-bit add and the cp.async at a constant shared-memory offset (~24 instructions
// in the loop above), and a tile inside the sequence, the uniform common case, tests no bounds.
// When kRows is not a multiple of the rows one round of copies covers (a 32 x 32 tile of 256
// threads), the threads past the tile's last row skip the last round.
template <int kRows, int kCols, int kThreads, int kElemBytes>
__device__ __forceinline__ void load_bias_tile_unrolled_of(const FwdParams& p, int b, int h, std::int64_t m0,
                                                           std::int64_t n0, std::int64_t q_len, std::int64_t k_len,
                                                           char* dst) {
  using Shape = BiasTileShape<kRows, kCols>;
  constexpr int kElemsPerChunk = 16 / kElemBytes, kChunksPerRow = kCols / kElemsPerChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow, kCopies = (kRows + kRowStep - 1) / kRowStep;
  constexpr bool kRagged = kRows % kRowStep != 0;
  static_assert(kCols % kElemsPerChunk == 0 && kThreads % kChunksPerRow == 0);
  const int t = opaque_thread<kThreads>();
  const int r0 = t / kChunksPerRow, k = t % kChunksPerRow;
  const std::int64_t row_bytes = p.bias_row_stride * kElemBytes, step = kRowStep * row_bytes;
  // The tile's origin (the same in every thread: uniform registers) plus the thread's offset.
  const char* tile = static_cast<const char*>(p.bias) +
                     (std::int64_t(b) * p.bias_batch_stride + std::int64_t(h) * p.bias_head_stride +
                      m0 * p.bias_row_stride + n0) *
                         kElemBytes;
  const char* src = tile + (r0 * row_bytes + k * 16);
  dst += r0 * Shape::kPitch + k * 16;
  const auto in_tile = [&](int i) { return !kRagged || r0 + i * kRowStep < kRows; };
  if (m0 + kRows <= q_len && n0 + kCols <= k_len) {
    CUTE_UNROLL
    for (int i = 0; i < kCopies; ++i)
      if (in_tile(i)) cp_async16(dst + i * kRowStep * Shape::kPitch, src + i * step);
    return;
  }
  // A copy of no bytes reads nothing: its source is the row's address whatever the bounds.
  const std::int64_t j = n0 + k * kElemsPerChunk;
  const int col_bytes = j < k_len ? int(min(std::int64_t(16), (k_len - j) * kElemBytes)) : 0;
  const std::int64_t rows_in = q_len - m0 - r0;
  CUTE_UNROLL
  for (int i = 0; i < kCopies; ++i)
    if (in_tile(i))
      cp_async_zfill16(dst + i * kRowStep * Shape::kPitch, src + i * step, i * kRowStep < rows_in ? col_bytes : 0);
}

template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_bias_tile_unrolled(const FwdParams& p, int b, int h, std::int64_t m0,
                                                        std::int64_t n0, std::int64_t q_len, std::int64_t k_len,
                                                        char* dst) {
  if (p.bias_is_f32) load_bias_tile_unrolled_of<kRows, kCols, kThreads, 4>(p, b, h, m0, n0, q_len, k_len, dst);
  else load_bias_tile_unrolled_of<kRows, kCols, kThreads, 2>(p, b, h, m0, n0, q_len, k_len, dst);
}

// The units transform_scores leaves scores in: s <- s * score + bias * this->bias. Log2 units
// (log2_units) for softmaxes that exponentiate the scores as they are (the forward's wide, global-
// accumulator and fp32 kernels); natural units (scale * s + bias: one FFMA per score with bias)
// where the exp2's FFMA multiplies by log2(e) anyway (the forward's register rows and the
// backward's bias rows).
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

// s <- units.score * s + units.bias * bias (log2(e) * (scale * s + bias) in log2_units), and -inf
// where the mask hides the key (only when `masked`: tiles fully inside the window skip the
// per-element test). kBias says which bias code is compiled in; a problem without bias still runs
// such a kernel (p.bias is null then). With a SharedBias tile (query rows m0.., key columns n0..,
// whichever way round the scores are) the bias comes from shared memory.
template <class Element, BiasCode kBias, bool kKeyRows = false, class Scores, class Coords>
__device__ __forceinline__ void transform_scores(const FwdParams& p, const detail::MaskRule& rule, const TileOrigin& t,
                                                 bool masked, Scores& s, const Coords& coord,
                                                 SharedBias shared_bias, ScoreUnits units) {
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
      query_key<kKeyRows>(t, coord, e, &i, &j);
      float b = 0.0f;
      if constexpr (kBiasCode) {
        if (tile_bias) {
          int r, c;
          tile_row_col<kKeyRows>(coord, e, &r, &c);
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
      query_key<kKeyRows>(t, coord, e, &i, &j);
      if (!rule.visible(i, j)) s(e) = -INFINITY;
    }
  }
}

// Zeroes P and dS where the mask hides the key (both fragments laid out as `coord`), for
// gradients computed from unscaled scores (gradient_tile without bias).
template <bool kKeyRows, class S, class DP, class Coords>
__device__ __forceinline__ void zero_hidden(const detail::MaskRule& rule, const TileOrigin& t, S& s, DP& dp,
                                            const Coords& coord) {
  CUTE_UNROLL
  for (int e = 0; e < size(s); ++e) {
    std::int64_t i, j;
    query_key<kKeyRows>(t, coord, e, &i, &j);
    if (!rule.visible(i, j)) {
      s(e) = 0.0f;
      dp(e) = 0.0f;
    }
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

// The forward's fast paths of transform_scores and apply_dropout for m16n8 accumulator fragments
// with (query, key) coordinates (the accumulator's identity tensor, partitioned like it): the same
// results, computed per row with 32-bit offsets inside the tile. A thread's columns are its first
// column plus compile-time offsets, and its rows the same, so the mask is two 32-bit bounds per
// row and each element compares a constant against them: no 64-bit index or per-element
// coordinate stays live across the key loop.
// With a SharedBias tile the bias comes from shared memory (zero-filled past the sequence).
// The scores are left in natural units (scale * s + bias: one FFMA per score with bias); the
// softmax's exp2 FFMA multiplies by log2(e).
template <class Element, BiasCode kBias, class Scores, class Coords>
__device__ __forceinline__ void transform_scores_rows(const FwdParams& p, const detail::MaskRule& rule,
                                                      const TileOrigin& t, bool masked, Scores& s, const Coords& coord,
                                                      SharedBias shared_bias = {}) {
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
    if (p.bias_is_f32) add_shared_bias_pairs<float>(natural_units(p), shared_bias, s_rc, c_rc);
    else add_shared_bias_pairs<Element>(natural_units(p), shared_bias, s_rc, c_rc);
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

// apply_dropout for the same fragments: the Philox counter takes (j >> 2, i) truncated to 32 bits,
// and tiles start at multiples of four keys, so 32-bit offsets give the same words.
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
// - Query rows (kKeyRows false: the forward and the dQ kernel): lanes t and t ^ 1 hold the same rows r, r + 8 and
//   the two halves of a 4-key group: each computes one row's words and passes two to the other.
// - Key rows (kKeyRows true, the dK/dV kernels): lanes t, t + 4, t + 8, t + 12 (same t % 4) hold
//   the 4 keys of one group for the same two queries, in rows k and k + 8: the four counters
//   (key group of k or k + 8, query q0 or q0 + 1) are computed one per lane, and each lane collects
//   its word (k % 4) of all four with three shuffles.
template <bool kKeyRows, class FragLayout, class Coords>
__device__ __forceinline__ std::uint64_t dropout_keep_bits(const FwdParams& p, const TileOrigin& t,
                                                           FragLayout frag, const Coords& coord) {
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
  const std::uint64_t keep = dropout_keep_bits<false>(p, t, prob.layout(), coord);
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
