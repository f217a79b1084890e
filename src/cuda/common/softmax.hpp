// Online softmax on register fragments, in base 2. kRowThreads lanes share a row, kLaneStride
// apart (the four consecutive threads of a quad for m16n8 fragments; 16 in the fp32 SIMT kernel;
// eight lanes four apart where a fragment's columns are the rows, sm80/decode/), so row reductions
// are log2(kRowThreads) xor-shuffles. Row sums stay per-thread partial sums until the end (all threads
// of a row rescale by the same factor).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <type_traits>

namespace memattn::cuda {

using namespace cute;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Rows whose scores stay in natural units through the softmax, whose forward takes the LSE from
// the top score (final_factors_natural) and whose backward recomputes P against it in natural
// units (bwd_common.hpp): the fp32 rows, so that fp32 keeps fp32 accuracy at any logit scale, for
// two more FP32 operations per score in the backward. The 16-bit rows keep one FFMA per score in
// base 2: its relative error of about |S| 2^-23 on P stays below their own rounding until
// |S| ~ 1e4 (docs/decisions.md, large logits).
template <class Element>
inline constexpr bool kNaturalLse = std::is_same_v<Element, float>;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));  // ex2(-inf) = +0
  return y;
}

// How far (in log2 units) a row's scores may rise above the running maximum they are taken
// against before the maximum moves. Below it, a tile's probabilities are computed against the old
// maximum (at most 2^8 = 256: bf16 and fp16 keep their relative precision there as the PV GEMM's
// operands, and fp32's sums are far inside their range) and the output accumulator keeps its
// scale; the LSE adds the maximum actually used, so the result is the same up to rounding.
// Random scores' maxima settle within the first tiles, and after that no tile moves one, whereas
// with an exact running maximum a warp of the wide rows (which holds all 64 rows of its output
// columns) rescaled at nearly every tile: a multiply per accumulator element, about a fifth of
// that loop's instructions.
inline constexpr float kMaxRiseLog2 = 8.0f;

// The maximum a row takes a tile against: `running` unless the tile's own exceeds it by more than
// kMaxRiseLog2. A row that has seen nothing (-inf) takes any finite one.
__device__ __forceinline__ float settled_max(float running, float tile_max) {
  return tile_max > running + kMaxRiseLog2 ? tile_max : running;
}

// A row's running maximum after a tile whose own maximum is `tile_max` (log2 units).
struct RowMaxMove {
  float shift;    // what the tile's scores are exponentiated against
  float rescale;  // the factor the row's sum and output accumulator take (exactly 1 if it did not move)
};
__device__ __forceinline__ RowMaxMove move_row_max(float& row_max, float tile_max) {
  const float new_max = settled_max(row_max, tile_max);
  // A row that has seen nothing visible keeps max -inf: exponentiate against 0 so that its
  // probabilities are exp2(-inf) = 0, and leave its accumulator alone.
  const bool empty = new_max == -INFINITY;
  const RowMaxMove move{empty ? 0.0f : new_max, empty ? 1.0f : fast_exp2(row_max - new_max)};
  row_max = new_max;
  return move;
}

template <int kRowThreads, int kLaneStride = 1>
__device__ __forceinline__ float row_max_all(float x) {
  CUTE_UNROLL
  for (int offset = kLaneStride; offset < kRowThreads * kLaneStride; offset *= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

template <int kRowThreads, int kLaneStride = 1>
__device__ __forceinline__ float row_sum_all(float x) {
  CUTE_UNROLL
  for (int offset = kLaneStride; offset < kRowThreads * kLaneStride; offset *= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <int kRows, int kRowThreads = 4, int kLaneStride = 1>  // rows a thread holds (2 * MMA_M for m16n8 fragments)
struct OnlineSoftmax {
  float row_max[kRows];    // in log2 units
  float row_sum[kRows];    // this thread's share of the row
  float top_score[kRows];  // the largest score given to update(), as given (final_factors_natural)

  __device__ __forceinline__ void init() {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
      top_score[r] = -INFINITY;
    }
  }

  // scores: (rows, cols) view of one tile of scores that `scale` (> 0) takes to the log2 domain
  // (-inf where masked); becomes the probabilities relative to the running max (move_row_max).
  // rescale[r]: the factor the output accumulator's row r must be multiplied by because its max
  // moved. With the scale here, each score costs one FFMA before its exp2 instead of an FMUL and
  // an FADD.
  template <class Scores>
  __device__ __forceinline__ void update(Scores& scores, float (&rescale)[kRows], float scale = 1.0f) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float tile_max = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) tile_max = fmaxf(tile_max, scores(r, c));
      tile_max = row_max_all<kRowThreads, kLaneStride>(tile_max);
      top_score[r] = fmaxf(top_score[r], tile_max);
      const RowMaxMove move = move_row_max(row_max[r], tile_max * scale);
      rescale[r] = move.rescale;
      float sum = 0.0f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) {
        scores(r, c) = fast_exp2(fmaf(scores(r, c), scale, -move.shift));
        sum += scores(r, c);
      }
      row_sum[r] = row_sum[r] * rescale[r] + sum;
    }
  }

  // The same, rescaling an accumulator held in registers. Every lane of the warp must call this.
  template <class Scores, class Acc>
  __device__ __forceinline__ void update(Scores& scores, Acc& acc, float scale = 1.0f) {
    float rescale[kRows];
    update(scores, rescale, scale);
    rescale_if_moved(acc, rescale);
  }

  template <class Acc>
  __device__ __forceinline__ static void scale_rows(Acc& acc, const float (&factor)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r)
      CUTE_UNROLL
      for (int c = 0; c < size<1>(acc); ++c) acc(r, c) *= factor[r];
  }

  // scale_rows with the running maxima's rescale factors. Once the maxima settle (settled_max),
  // tiles move no row's max in the whole warp: those skip it (a multiply per accumulator element,
  // about a tenth of the forward's key-loop instructions at D = 128). Every lane of the warp must
  // call this (the vote).
  template <class Acc>
  __device__ __forceinline__ static void rescale_if_moved(Acc& acc, const float (&factor)[kRows]) {
    bool moved = false;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) moved |= factor[r] != 1.0f;
    if (__any_sync(0xffffffffu, moved)) scale_rows(acc, factor);
  }

  // Per-row output factors once every key has been seen: out_scale / row sum (out_scale is the
  // dropout factor), and each row's natural-log LSE; rows that saw no key get 0 and -inf.
  __device__ __forceinline__ void final_factors(float out_scale, float (&norm)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = row_sum_all<kRowThreads, kLaneStride>(row_sum[r]);
      const bool empty = row_max[r] == -INFINITY || !(sum > 0.0f);
      norm[r] = empty ? 0.0f : out_scale / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] + __log2f(sum)) * kLn2;
    }
  }

  // final_factors for a softmax whose every update() was given natural-unit scores and scale
  // kLog2e: LSE = top score + ln(sum of exp(score - top score)), rounded once. A row dominated by
  // one key then has LSE equal to that key's score exactly, so a backward that recomputes the same
  // score gets P = exp(0) = 1 (staged_lse and gradient_tile in bwd_common.hpp). The base-2 LSE of final_factors is
  // off by a few roundings of |LSE| instead, which P inherits as a relative error of |S| 2^-23.
  // The sum was taken against the running max (up to kMaxRiseLog2 below the top score): fmaf
  // gives that offset, top * log2 e - row_max, with one rounding.
  __device__ __forceinline__ void final_factors_natural(float out_scale, float (&norm)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = row_sum_all<kRowThreads, kLaneStride>(row_sum[r]);
      const bool empty = row_max[r] == -INFINITY || !(sum > 0.0f);
      norm[r] = empty ? 0.0f : out_scale / sum;
      const float log2_rest = __log2f(sum) - fmaf(top_score[r], kLog2e, -row_max[r]);
      lse[r] = empty ? -INFINITY : fmaf(log2_rest, kLn2, top_score[r]);
    }
  }

  // Divides the accumulator rows by their sums (times out_scale) and gives each row's LSE.
  template <class Acc>
  __device__ __forceinline__ void finalize(Acc& acc, float out_scale, float (&lse)[kRows]) {
    float norm[kRows];
    final_factors(out_scale, norm, lse);
    scale_rows(acc, norm);
  }
};

}  // namespace memattn::cuda
