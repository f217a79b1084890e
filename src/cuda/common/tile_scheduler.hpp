// Which (query tile, head, sequence) a CTA works on, and where a sequence's rows are. The grid is
// one-dimensional and CTAs stride over the work, so any batch x heads x tiles fits (no gridDim.y/z
// limits). Heavier tiles are handed out first: under a causal mask the last query tiles, and in the
// backward the first key tiles.
#pragma once

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/key_tiles.hpp"
#include "cuda/common/work_order.hpp"

namespace memattn::cuda {

struct WorkItem {
  int m_block;
  int h;
  int b;
  int split;  // which part of the query tile's keys (split keys), else 0
};

// With split keys the parts of one query tile are neighbouring work items, so that they run
// together and the tile's Q stays in L2 for all of them.
__device__ __forceinline__ WorkItem decode_work(const FwdParams& p, std::int64_t index) {
  const int splits = p.num_splits > 1 ? p.num_splits : 1;
  const TileRank t = rank_work(index / splits, p.num_m_blocks, std::int64_t(p.batch) * p.heads_q, p.work_groups);
  WorkItem w;
  w.m_block = p.num_m_blocks - 1 - t.rank;
  w.h = int(t.pair % p.heads_q);
  w.b = int(t.pair / p.heads_q);
  w.split = int(index % splits);
  return w;
}

struct SequenceInfo {
  std::int64_t batch;  // index into the tensors' batch dimension (0 with variable lengths)
  std::int64_t q_begin, q_len;
  std::int64_t k_begin, k_len;
  std::int64_t k_end;  // the sequence's key rows end here (past k_begin + k_len with seqused_k)
};

__device__ __forceinline__ std::int64_t clamp_index(int x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : std::int64_t(x));
}

// With variable lengths the values come from device arrays that the host may not have checked
// (Varlen::bounded: nothing synchronises): each is clamped into the packed tensors and each length
// to the bound that sized the grid and the bias, so no value can index out of bounds. Checked
// values pass unchanged.
template <class Params>
__device__ __forceinline__ SequenceInfo sequence_info(const Params& p, int b) {
  if (p.seqstart_q == nullptr) return {b, 0, p.seqlen_q, 0, p.seqlen_k, p.seqlen_k};
  SequenceInfo s;
  s.batch = 0;
  s.q_begin = clamp_index(p.seqstart_q[b], 0, p.packed_q);
  const std::int64_t q_end = clamp_index(p.seqstart_q[b + 1], s.q_begin, p.packed_q);
  s.q_len = min(q_end - s.q_begin, p.seqlen_q);
  s.k_begin = clamp_index(p.seqstart_k[b], 0, p.packed_k);
  s.k_end = clamp_index(p.seqstart_k[b + 1], s.k_begin, p.packed_k);
  const std::int64_t k_len = s.k_end - s.k_begin;
  s.k_len = min(p.seqused_k ? clamp_index(p.seqused_k[b], 0, k_len) : k_len, p.seqlen_k);
  return s;
}

// A KV cache call's sequence b: its own batch entry of q, and the keys its cache holds after the
// append, clamped to the longest (validated values pass unchanged).
__device__ __forceinline__ SequenceInfo cache_sequence_info(const FwdParams& p, int b) {
  const std::int64_t keys = min(clamp_index(p.cache_seqlens[b], 0, p.seqlen_k) + p.cache_new_keys, p.seqlen_k);
  return {b, 0, p.seqlen_q, 0, keys, keys};
}

// The problem's mask (causal alignment, window) on one sequence's query and key lengths.
template <class Params>
__device__ __forceinline__ detail::MaskRule mask_rule(const Params& p, const SequenceInfo& seq) {
  return detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
}

// The key tiles that query rows [m0, m0 + rows) of sequence `seq` see (key_tiles.hpp).
template <int kBlockN>
__device__ __forceinline__ bool key_tiles(const FwdParams& p, const SequenceInfo& seq, std::int64_t m0, int rows,
                                          KeyTiles* t) {
  return key_tiles<kBlockN>(mask_rule(p, seq), m0, rows, t);
}

}  // namespace memattn::cuda
