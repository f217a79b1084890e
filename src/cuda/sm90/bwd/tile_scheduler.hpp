// The Hopper backward's work: the CTAs take the work items (key tiles, or parts of the last wave's
// split tiles: one_pass_bwd_tail_split.hpp) in a grid stride, and each item's steps are the query
// tiles that see its keys, for every query head of its kv head's group (the one-pass backward's
// order). The producers and the consumers walk the same items and steps (for_each_work_item,
// KeyTileSteps), so that every load a producer issues is the one the consumers wait for.
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

// A work item of the grid stride: which part of which key tile, of which sequence, and its steps.
template <int kBlockM>
struct BwdWorkItem {
  KvTilePart part;
  KvWorkItem tile;
  SequenceInfo seq;
  KeyTileSteps<kBlockM> steps;
};

// body(item) for each of this CTA's work items, in order; items whose tile lies past the keys
// (nothing to do, nothing loaded) are passed over.
template <int kBlockM, int kBlockN, class Body>
__device__ __forceinline__ void for_each_work_item(const BwdParams& p, const Body& body) {
  for (std::int64_t index = blockIdx.x; index < p.kv_work_items; index += gridDim.x) {
    BwdWorkItem<kBlockM> w;
    w.part = kv_tile_part(p, index);
    w.tile = decode_kv_work(p, w.part.tile);
    w.seq = sequence_info(p, w.tile.b);
    KeyTileSteps<kBlockM>& t = w.steps;
    t.n0 = std::int64_t(w.tile.n_block) * kBlockN;
    if (t.n0 >= w.seq.k_len) continue;
    t.keys = int(min(std::int64_t(kBlockN), w.seq.k_len - t.n0));
    std::int64_t query_end = 0;
    mask_rule(p, w.seq).query_range(t.n0, t.n0 + t.keys, w.seq.q_len, &t.query_begin, &query_end);
    t.q_tiles = query_end > t.query_begin ? int((query_end - t.query_begin + kBlockM - 1) / kBlockM) : 0;
    t.tiles_end = t.query_begin + std::int64_t(t.q_tiles) * kBlockM;
    t.first_head = w.tile.hk * p.group;
    const int all = p.group * t.q_tiles;
    t.first = int(std::int64_t(all) * w.part.part / w.part.parts);
    t.count = int(std::int64_t(all) * (w.part.part + 1) / w.part.parts) - t.first;
    body(static_cast<const BwdWorkItem<kBlockM>&>(w));
  }
}

}  // namespace memattn::cuda::sm90
