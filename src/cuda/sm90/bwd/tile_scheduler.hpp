// The Hopper backward's work: the CTAs take the work items (key tiles, or parts of the last wave's
// split tiles: one_pass_bwd_tail_split.hpp) in a grid stride, and each item's steps are the query
// tiles that see its keys, for every query head of its kv head's group (the one-pass backward's
// order). The producer and the consumers walk the same items and steps (KeyTileSteps), so that
// every load the producer issues is the one the consumers wait for.
#pragma once

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda::sm90 {

struct StepPos {
  int h;            // query head
  std::int64_t m0;  // first query row, in the sequence
};

// The steps of one work item: query tiles [query_begin, tiles_end) of each head of the group,
// this part's share of them.
template <int kBlockM>
struct KeyTileSteps {
  std::int64_t n0;  // first key
  int keys;         // keys of the tile inside the sequence
  int first_head;
  std::int64_t query_begin, tiles_end;
  int q_tiles, first, count;

  __device__ __forceinline__ StepPos start() const {
    if (q_tiles == 0) return {first_head, query_begin};
    return {first_head + first / q_tiles, query_begin + std::int64_t(first % q_tiles) * kBlockM};
  }
  __device__ __forceinline__ StepPos after(StepPos s) const {
    if (s.m0 + kBlockM == tiles_end) return {s.h + 1, query_begin};
    return {s.h, s.m0 + kBlockM};
  }
};

// Work item `index`'s tile and sequence, and its steps; false when the tile lies past the keys
// (nothing to do, nothing loaded).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool work_item(const BwdParams& p, std::int64_t index, KvTilePart* part, KvWorkItem* work,
                                          SequenceInfo* seq, KeyTileSteps<kBlockM>* t) {
  *part = kv_tile_part(p, index);
  *work = decode_kv_work(p, part->tile);
  *seq = sequence_info(p, work->b);
  t->n0 = std::int64_t(work->n_block) * kBlockN;
  if (t->n0 >= seq->k_len) return false;
  t->keys = int(min(std::int64_t(kBlockN), seq->k_len - t->n0));
  std::int64_t query_end = 0;
  mask_rule(p, *seq).query_range(t->n0, t->n0 + t->keys, seq->q_len, &t->query_begin, &query_end);
  t->q_tiles = query_end > t->query_begin ? int((query_end - t->query_begin + kBlockM - 1) / kBlockM) : 0;
  t->tiles_end = t->query_begin + std::int64_t(t->q_tiles) * kBlockM;
  t->first_head = work->hk * p.group;
  const int all = p.group * t->q_tiles;
  t->first = int(std::int64_t(all) * part->part / part->parts);
  t->count = int(std::int64_t(all) * (part->part + 1) / part->parts) - t->first;
  return true;
}

}  // namespace memattn::cuda::sm90
