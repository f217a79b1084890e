// Online softmax on register fragments, in base 2. The four threads of a quad share the rows of
// an m16n8 fragment, so row reductions are two xor-shuffles. Row sums stay per-thread partial
// sums until the end (every thread of a quad rescales by the same factor).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

namespace memattn::cuda::sm80 {

using namespace cute;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));  // ex2(-inf) = +0
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kRows>  // rows a thread holds: 2 * MMA_M
struct OnlineSoftmax {
  float row_max[kRows];  // in log2 units
  float row_sum[kRows];  // this thread's share of the row

  __device__ __forceinline__ void init() {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
  }

  // scores: (rows, cols) view of one tile of log2-domain scores (-inf where masked); becomes the
  // probabilities relative to the running max. acc: (rows, cols) view of the output accumulator,
  // rescaled where the max moved.
  template <class Scores, class Acc>
  __device__ __forceinline__ void update(Scores& scores, Acc& acc) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float tile_max = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) tile_max = fmaxf(tile_max, scores(r, c));
      const float new_max = quad_max(tile_max);
      // A row that has seen nothing visible keeps max -inf: exponentiate against 0 so that its
      // probabilities are exp2(-inf) = 0, and leave its accumulator alone.
      const bool empty = new_max == -INFINITY;
      const float shift = empty ? 0.0f : new_max;
      const float rescale = empty ? 1.0f : fast_exp2(row_max[r] - new_max);
      row_max[r] = new_max;
      float sum = 0.0f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) {
        scores(r, c) = fast_exp2(scores(r, c) - shift);
        sum += scores(r, c);
      }
      row_sum[r] = row_sum[r] * rescale + sum;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(acc); ++c) acc(r, c) *= rescale;
    }
  }

  // Divides the accumulator rows by their sums (times out_scale, the dropout factor) and gives
  // each row's natural-log LSE; rows that saw no key get 0 and -inf.
  template <class Acc>
  __device__ __forceinline__ void finalize(Acc& acc, float out_scale, float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = row_max[r] == -INFINITY || !(sum > 0.0f);
      const float norm = empty ? 0.0f : out_scale / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] + __log2f(sum)) * 0.6931471805599453f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(acc); ++c) acc(r, c) *= norm;
    }
  }
};

}  // namespace memattn::cuda::sm80
