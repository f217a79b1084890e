// The Hopper forward's work items as each role walks them: the producer draws them and loads their
// tiles (producer.hpp), the fp32 rows' split warpgroup prepares the tiles (tf32x3_split.hpp), the
// consumers compute (mainloop.hpp, tf32x3_mainloop.hpp). All decode an item the same way, so they
// agree on every tile that goes round the rings.
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

// The consumers' walk: body(it) for each item the producer hands out whose rows see a key; the
// rows of an item that sees none are written here (out 0, LSE -inf). ctid: the thread's index
// among the kConsumerThreads consumer threads.
template <class Traits, class Storage, class Body>
__device__ __forceinline__ void for_each_consumer_item(const FwdParams& p, Storage& s, int ctid, const Body& body) {
  RingPosition<2> item_at;
  for (std::int64_t index = take_index(s.items, item_at); index < p.num_blocks; index = take_index(s.items, item_at)) {
    FwdItemTiles it;
    if (item_tiles<Traits::kBlockM, Traits::kBlockN>(p, index, &it)) body(it);
    else if (it.rows > 0)  // the producer loads nothing for it either
      write_empty_rows<typename Traits::Element>(p, it.seq, it.work.h, it.m0, it.rows, ctid, Traits::kConsumerThreads);
  }
}

}  // namespace memattn::cuda::sm90
