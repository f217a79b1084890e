// The Hopper forward's work items as each role walks them: the producer draws and decodes them
// and loads their tiles (producer.hpp), the fp32 rows' split warpgroup prepares the tiles
// (tf32x3_split.hpp), the consumers compute (mainloop.hpp, tf32x3_mainloop.hpp). All read the
// producer's decoding from the items' ring, so they agree on every tile that goes round the rings.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/key_tiles.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

// A work item: its query tile and the key tiles that tile sees.
struct FwdItemTiles {
  WorkItem work;
  SequenceInfo seq;
  std::int64_t m0;  // the tile's first query row in the sequence
  int rows;         // its query rows in the sequence (0: the tile lies past the sequence's end)
  KeyTiles t;
};

// Whether the item has query rows that see a key (no tile is loaded for it otherwise).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool item_tiles(const FwdParams& p, std::int64_t index, FwdItemTiles* it) {
  it->work = decode_work(p, index);
  it->seq = sequence_info(p, it->work.b);
  it->m0 = std::int64_t(it->work.m_block) * kBlockM;
  it->rows = it->m0 < it->seq.q_len ? int(min(std::int64_t(kBlockM), it->seq.q_len - it->m0)) : 0;
  return it->rows > 0 && key_tiles<kBlockN>(p, it->seq, it->m0, it->rows, &it->t);
}

// An item as the producer hands it on: its index (one past the items ends the walk), decoded.
struct FwdHandedItem {
  std::int64_t index;
  bool sees_keys;      // item_tiles' answer; past the items, false
  FwdItemTiles tiles;  // tiles.rows and the rest as item_tiles left them
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ FwdHandedItem hand_item(const FwdParams& p, std::int64_t index) {
  FwdHandedItem h{};
  h.index = index;
  h.sees_keys = index < p.num_blocks && item_tiles<kBlockM, kBlockN>(p, index, &h.tiles);
  return h;
}

// The items in shared memory, from the producer to the other roles (ItemRing, pipeline.hpp): the
// slot the consumers are finishing, the one the producer loads and the next (for_each_drawn_item).
//
// Each role had decoded an index itself (IndexRing, pipeline.hpp, as the backward still does):
// the work order's 64-bit divisions, the sequence's bounds and the key tiles cost the consumers
// ~1,300 cycles between two items (H200, clock64 stamps, D = 64 at S = 512: a tenth of an
// item). Decoded once, by the producer, and handed on an item ahead: D = 64 S = 512 -4%, causal
// -8% (CLI, H200). Handed on once the item's loads were issued, the producer's draw and decoding
// came late and the consumers waited for the next item (D = 128 S = 2048 causal +4%; +2-3% is
// left there: at D = 128 the consumers, no longer decoding, wait for the next Q instead).
inline constexpr int kFwdItemSlots = 3;
using FwdItemRing = ItemRing<FwdHandedItem, kFwdItemSlots>;

// The producer's walk (one thread): the CTA's first item is its block index, each next one the
// counter's next draw past the first wave (p.items_drawn, cleared before the launch), so that the
// items go out in index order, each to the CTA that asks first. Each item is drawn, decoded and
// stored for the readers before body(item) runs for the one before it; body reads it in place.
template <int kBlockM, int kBlockN, class Body>
__device__ __forceinline__ void for_each_drawn_item(const FwdParams& p, FwdItemRing& ring, const Body& body) {
  RingPosition<kFwdItemSlots> at;
  const auto hand_on = [&](std::int64_t index) -> const FwdHandedItem& {
    ring.barriers.wait_free(at);
    ring.item[at.stage] = hand_item<kBlockM, kBlockN>(p, index);
    ring.barriers.arrive(at);
    const FwdHandedItem& stored = ring.item[at.stage];
    at.advance();
    return stored;
  };
  const FwdHandedItem* item = &hand_on(blockIdx.x);
  while (item->index < p.num_blocks) {
    const FwdHandedItem* next = &hand_on(std::int64_t(gridDim.x) + std::int64_t(atomicAdd(p.items_drawn, 1ull)));
    body(*item);
    item = next;
  }
}

// The readers' walk: body(item) for each item the producer hands this CTA, in order, read where it
// lies; its slot is released once body returns.
template <class Body>
__device__ __forceinline__ void for_each_handed_item(const FwdParams& p, FwdItemRing& ring, const Body& body) {
  RingPosition<kFwdItemSlots> at;
  while (true) {
    ring.barriers.wait(at);
    const FwdHandedItem& item = ring.item[at.stage];
    const bool last = item.index >= p.num_blocks;
    if (!last) body(item);
    ring.barriers.release(at);
    at.advance();
    if (last) return;
  }
}

// The consumers' walk: body(it) for each item the producer hands out whose rows see a key; the
// rows of an item that sees none are written here (out 0, LSE -inf). ctid: the thread's index
// among the kConsumerThreads consumer threads.
template <class Traits, class Storage, class Body>
__device__ __forceinline__ void for_each_consumer_item(const FwdParams& p, Storage& s, int ctid, const Body& body) {
  // Inlined by force: with dropout's code the body outgrew nvcc's inlining budget, and a call in
  // the consumers' walk serialises every wgmma of the kernel (ptxas C7510).
  for_each_handed_item(p, s.items, [&](const FwdHandedItem& h) __attribute__((always_inline)) {
    const FwdItemTiles it = h.tiles;  // copied: within 2% of reading it in place, either way (H200)
    if (h.sees_keys) body(it);
    else if (it.rows > 0)  // the producer loads nothing for it either
      write_empty_rows<typename Traits::Element>(p, it.seq, it.work.h, it.m0, it.rows, ctid, Traits::kConsumerThreads);
  });
}

}  // namespace memattn::cuda::sm90
