// Split keys, the kernel's side: a query tile's key tiles divided over FwdParams::num_splits CTAs,
// each writing its rows' output (normalised over its own keys) and LSE in fp32 to the workspace.
// split_combine.cu merges the parts by their LSE into out and lse. Why: with few query tiles
// (decoding: one query row per sequence) one CTA per tile leaves most SMs idle while it walks
// every key; parts of the keys fill them.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda {

using namespace cute;

// Narrows the key tiles [*first, *last] to part `split` of p.num_splits (equal runs of whole
// tiles, the last part shorter); false when the part has none.
__device__ __forceinline__ bool split_key_tiles(const FwdParams& p, int split, int* first, int* last) {
  if (p.num_splits <= 1) return true;
  const int tiles = *last - *first + 1;
  const int per = (tiles + p.num_splits - 1) / p.num_splits;
  const int begin = *first + split * per;
  *last = min(*last, begin + per - 1);
  *first = begin;
  return *first <= *last;
}

// The element offset of (split, sequence, head, row 0) in partial_lse; partial_out's is head_dim_v
// times it. Rows are the tensor's (packed with variable lengths).
__device__ __forceinline__ std::int64_t partial_offset(const FwdParams& p, const SequenceInfo& seq, int h, int split) {
  return ((std::int64_t(split) * p.partial_batch + seq.batch) * p.heads_q + h) * p.partial_rows + seq.q_begin;
}

// One part's rows [m0, m0 + rows): acc the output normalised over the part's keys (the (rows,
// cols) view of a register fragment, fp32), lse[r] the LSE of the thread's r-th row, coords the
// (rows, cols) view of the fragment's tile coordinates. The lanes that share a row write its
// columns; the first of them the LSE.
template <int kRowThreads = 4, int kRows, class Acc, class Coords>
__device__ __forceinline__ void write_partial(const FwdParams& p, const SequenceInfo& seq, int h, int split,
                                              std::int64_t m0, int rows, const Acc& acc, const float (&lse)[kRows],
                                              const Coords& coords) {
  const std::int64_t base = partial_offset(p, seq, h, split) + m0;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int row = get<0>(coords(r, 0));
    if (row >= rows) continue;
    float* out = p.partial_out + (base + row) * p.head_dim_v;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(acc); ++c) {
      const int col = get<1>(coords(r, c));
      if (col < p.head_dim_v) out[col] = acc(r, c);
    }
    if (threadIdx.x % kRowThreads == 0) p.partial_lse[base + row] = lse[r];
  }
}

// A part without keys for rows [m0, m0 + rows): LSE -inf, output 0 (the combine weighs it 0).
template <int kThreads>
__device__ __forceinline__ void write_empty_partial(const FwdParams& p, const SequenceInfo& seq, int h, int split,
                                                    std::int64_t m0, int rows) {
  const std::int64_t base = partial_offset(p, seq, h, split) + m0;
  for (int e = threadIdx.x; e < rows * p.head_dim_v; e += kThreads) p.partial_out[base * p.head_dim_v + e] = 0.0f;
  for (int r = threadIdx.x; r < rows; r += kThreads) p.partial_lse[base + r] = -INFINITY;
}

}  // namespace memattn::cuda
