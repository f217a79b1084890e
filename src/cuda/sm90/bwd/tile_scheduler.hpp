// The Hopper backward's work: a persistent grid whose CTAs draw the work items (key tiles, or parts
// of the last wave's split tiles: one_pass_bwd_tail_split.hpp) as they finish one, and each item's
// steps are the query tiles that see its keys, for every query head of its kv head's group (the
// one-pass backward's order). The producers and the consumers walk the same items (one draws,
// IndexRing hands them on) and steps (KeyTileSteps), so that every load a producer issues is the
// one the consumers wait for.
#pragma once

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/bwd/dq_out.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

struct StepPos {
  int h;            // query head
  std::int64_t m0;  // first query row, in the sequence
};

// The steps of one work item: query tiles [query_begin, tiles_end) of each head of the group,
// this part's share of them. They go up the query tiles of each head, and down them under
// `deterministic` (DqAdds::key_tile_order; dq_writer.hpp): there key tile n adds into a query tile
// after tile n - 1, and walking down from the last, both reach each query tile at the same step.
// Going up, a causal mask starts tile n kBlockN / kBlockM steps after tile n - 1, and the work
// order had to delay it by as much: causal 0.82-0.87x the default's speed at D = 128 against
// 0.92-0.96x walking down (H200).
template <int kBlockM>
struct KeyTileSteps {
  std::int64_t n0;  // first key
  int keys;         // keys of the tile inside the sequence
  int first_head;
  std::int64_t query_begin, tiles_end;
  int q_tiles, first, count;

  template <DqAdds kAdds>
  __device__ __forceinline__ StepPos start() const {
    if (q_tiles == 0) return {first_head, query_begin};
    const int tile = kAdds == DqAdds::key_tile_order ? q_tiles - 1 - first % q_tiles : first % q_tiles;
    return {first_head + first / q_tiles, query_begin + std::int64_t(tile) * kBlockM};
  }
  template <DqAdds kAdds>
  __device__ __forceinline__ StepPos after(StepPos s) const {
    if constexpr (kAdds == DqAdds::key_tile_order) {
      if (s.m0 == query_begin) return {s.h + 1, tiles_end - kBlockM};
      return {s.h, s.m0 - kBlockM};
    } else {
      if (s.m0 + kBlockM == tiles_end) return {s.h + 1, query_begin};
      return {s.h, s.m0 + kBlockM};
    }
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

// Work item `index` decoded into w; false where its tile lies past the keys (nothing to do,
// nothing loaded).
template <int kBlockM, int kBlockN, DqAdds kAdds>
__device__ __forceinline__ bool decode_work_item(const BwdParams& p, std::int64_t index, BwdWorkItem<kBlockM>* item) {
  BwdWorkItem<kBlockM>& w = *item;
  w.part = kv_tile_part(p, index);
  w.tile = decode_kv_work(p, w.part.tile);
  w.seq = sequence_info(p, w.tile.b);
  KeyTileSteps<kBlockM>& t = w.steps;
  t.n0 = std::int64_t(w.tile.n_block) * kBlockN;
  if (t.n0 >= w.seq.k_len) return false;
  t.keys = int(min(std::int64_t(kBlockN), w.seq.k_len - t.n0));
  std::int64_t query_end = 0;
  mask_rule(p, w.seq).query_range(t.n0, t.n0 + t.keys, w.seq.q_len, &t.query_begin, &query_end);
  if constexpr (kAdds == DqAdds::key_tile_order) t.query_begin = t.query_begin / kBlockM * kBlockM;  // dq_writer.hpp
  t.q_tiles = query_end > t.query_begin ? int((query_end - t.query_begin + kBlockM - 1) / kBlockM) : 0;
  t.tiles_end = t.query_begin + std::int64_t(t.q_tiles) * kBlockM;
  t.first_head = w.tile.hk * p.group;
  const int all = p.group * t.q_tiles;
  t.first = int(std::int64_t(all) * w.part.part / w.part.parts);
  t.count = int(std::int64_t(all) * (w.part.part + 1) / w.part.parts) - t.first;
  return true;
}

// The persistent grid's schedule (for_each_drawn_index, pipeline.hpp). The query producer warp
// walks furthest ahead (up to the ring of Q and dO), so it draws, once the last item's steps are
// issued. The items go out in the work order (the heaviest key tiles first under a causal mask),
// each to the CTA that asks first, so that uneven items do not leave CTAs idle at the end (a fixed
// grid stride had lost 10-15% on the causal rows to its uneven last wave, H100). `lane`: the warp's.
template <int kBlockM, int kBlockN, DqAdds kAdds, int kSlots, class Body>
__device__ __forceinline__ void for_each_drawn_item(const BwdParams& p, IndexRing<kSlots>& ring, int lane,
                                                    const Body& body) {
  const auto share = [](std::int64_t drawn) { return __shfl_sync(0xffffffffu, drawn, 0); };
  for_each_drawn_index(p.kv_items_drawn, p.kv_work_items, ring, lane == 0, share, [&](std::int64_t index) {
    BwdWorkItem<kBlockM> w;
    if (decode_work_item<kBlockM, kBlockN, kAdds>(p, index, &w)) body(static_cast<const BwdWorkItem<kBlockM>&>(w));
  });
}

// body(item) for each item the drawer hands this CTA, in order (the K and V producer, the
// consumer warpgroups, the dQ writer); every thread reads each index.
template <int kBlockM, int kBlockN, DqAdds kAdds, int kSlots, class Body>
__device__ __forceinline__ void for_each_handed_item(const BwdParams& p, IndexRing<kSlots>& ring, const Body& body) {
  for_each_handed_index(p.kv_work_items, ring, [&](std::int64_t index) {
    BwdWorkItem<kBlockM> w;
    if (decode_work_item<kBlockM, kBlockN, kAdds>(p, index, &w)) body(static_cast<const BwdWorkItem<kBlockM>&>(w));
  });
}

}  // namespace memattn::cuda::sm90
