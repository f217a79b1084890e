// Which (query tile, head, sequence) a CTA works on, and where a sequence's rows are. The grid is
// one-dimensional and CTAs stride over the work, so any batch x heads x tiles fits (no gridDim.y/z
// limits). Heavier tiles are handed out first: under a causal mask the last query tiles, and in the
// backward the first key tiles.
#pragma once

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/fwd_params.hpp"

namespace memattn::cuda {

struct WorkItem {
  int m_block;
  int h;
  int b;
};

// Work item `index` as (pair, rank): the rank-th heaviest of the `tiles` tiles of a (sequence,
// head) pair. One pair after another (groups 0), under a causal mask the last pair's heaviest
// tile starts when little other work is left and most of the GPU idles behind it (a model of the
// hardware's scheduler puts the suite's causal forward 10-15% over its ideal time,
// bench/ab/s15_schedule.py). So the pairs go in `groups` groups (sizes differing by at most one,
// the larger first), each tile rank by tile rank across its pairs: the heaviest tiles of a group
// start together, and the host makes a group large enough that its work covers every resident
// CTA (dispatch.cpp, work_groups()), and no larger, so that the K and V (or Q and dO) its CTAs
// share stay few.
struct TileRank {
  std::int64_t pair;
  int rank;
};

__device__ __forceinline__ TileRank rank_work(std::int64_t index, int tiles, std::int64_t pairs, std::int64_t groups) {
  if (groups <= 0 || groups >= pairs) return {index / tiles, int(index % tiles)};
  const std::int64_t small = pairs / groups, large_groups = pairs % groups;  // those have small + 1 pairs
  const std::int64_t large_items = large_groups * (small + 1) * tiles;
  std::int64_t first, size;  // the group's first pair and its pairs
  if (index < large_items) {
    size = small + 1;
    first = index / (size * tiles) * size;
  } else {
    size = small;
    first = large_groups * (small + 1) + (index - large_items) / (size * tiles) * size;
  }
  const std::int64_t r = index - first * tiles;  // within the group
  return {first + r % size, int(r / size)};
}

__device__ __forceinline__ WorkItem decode_work(const FwdParams& p, std::int64_t index) {
  const TileRank t = rank_work(index, p.num_m_blocks, std::int64_t(p.batch) * p.heads_q, p.work_groups);
  WorkItem w;
  w.m_block = p.num_m_blocks - 1 - t.rank;
  w.h = int(t.pair % p.heads_q);
  w.b = int(t.pair / p.heads_q);
  return w;
}

struct SequenceInfo {
  std::int64_t batch;  // index into the tensors' batch dimension (0 with variable lengths)
  std::int64_t q_begin, q_len;
  std::int64_t k_begin, k_len;
};

template <class Params>
__device__ __forceinline__ SequenceInfo sequence_info(const Params& p, int b) {
  if (p.seqstart_q == nullptr) return {b, 0, p.seqlen_q, 0, p.seqlen_k};
  SequenceInfo s;
  s.batch = 0;
  s.q_begin = p.seqstart_q[b];
  s.q_len = p.seqstart_q[b + 1] - s.q_begin;
  s.k_begin = p.seqstart_k[b];
  s.k_len = p.seqused_k ? p.seqused_k[b] : p.seqstart_k[b + 1] - s.k_begin;
  return s;
}

// The problem's mask (causal alignment, window) on one sequence's query and key lengths.
template <class Params>
__device__ __forceinline__ detail::MaskRule mask_rule(const Params& p, const SequenceInfo& seq) {
  return detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
}

}  // namespace memattn::cuda
