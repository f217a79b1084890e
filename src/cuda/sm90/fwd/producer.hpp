// The Hopper forward's producer: one thread of the producer warpgroup draws the CTA's work items
// (for_each_drawn_item, work_items.hpp: each next one as it starts this one's loads, so that a CTA
// whose items were light takes more; a grid stride had left the causal last wave uneven), hands
// each to the consumers decoded (its key tiles too, so both sides agree on every load) and issues
// the TMA loads: for each query tile that sees a key, its Q tile, then K (and the bias of the
// query tile and key tile, on the rows with one) and V tile by tile, last to first as the
// consumers walk them. A load waits only for its buffer to be released, so the producer runs up
// to kStages key tiles ahead; the next work item's loads start once its Q tile's buffer is free
// (storage.hpp: at once with two Q buffers, after the last S GEMM of the item before, or after its
// epilogue).
#pragma once

#include <cstdint>

#include "cuda/common/key_tiles.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/fwd/params.hpp"
#include "cuda/sm90/fwd/traits.hpp"
#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/pipeline.hpp"
#include "cuda/sm90/tma_load.hpp"
#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

// Storage: FwdSharedStorage<Traits> or Tf32x3FwdStorage<Traits> (its q, k, v buffers and rings).
template <class Traits, class Storage>
__device__ void produce(const TmaFwdParams& tp, Storage& s) {
  const FwdParams& p = tp.p;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  cute::prefetch_tma_descriptor(&tp.q);
  cute::prefetch_tma_descriptor(&tp.k);
  cute::prefetch_tma_descriptor(&tp.v);
  if constexpr (Traits::kBiasTile) cute::prefetch_tma_descriptor(&tp.bias);
  if (tp.o_by_tma) cute::prefetch_tma_descriptor(&tp.o);  // the consumers' epilogue stores through it
  RingPosition<Storage::kQStages> q_at;
  RingPosition<Traits::kStages> k_at, v_at;
  [[maybe_unused]] RingPosition<Traits::kBiasStages> bias_at;
  for_each_drawn_item<kBlockM, kBlockN>(p, s.items, [&](const FwdHandedItem& h) {
    if (!h.sees_keys) return;
    const FwdItemTiles& it = h.tiles;
    const WorkItem& work = it.work;
    const KeyTiles& t = it.t;
    const int batch = int(it.seq.batch);
    load_tile<kBlockM, kHeadDim>(&tp.q, s.q_barriers.acquire(q_at, Traits::kTileBytesQ), s.q[q_at.stage],
                                 int(it.seq.q_begin + it.m0), work.h, batch);
    q_at.advance();
    const int hk = work.h / p.group;
    // The bias's box: a broadcast dimension is one of size 1 in its map (a query-broadcast bias
    // lands as the tile's first row, the rest zeros); with variable lengths the bias's batch
    // dimension is the sequence's.
    [[maybe_unused]] const int bias_row = p.bias_row_stride != 0 ? int(it.m0) : 0;
    [[maybe_unused]] const int bias_h = p.bias_head_stride != 0 ? work.h : 0;
    [[maybe_unused]] const int bias_b = p.bias_batch_stride != 0 ? work.b : 0;
    for (int n = t.last; n >= t.first; --n) {
      const int row = int(it.seq.k_begin + std::int64_t(n) * kBlockN);
      load_tile<kBlockN, kHeadDim>(&tp.k, s.k_barriers.acquire(k_at, Traits::kTileBytesKV), s.k[k_at.stage], row,
                                   hk, batch);
      k_at.advance();
      if constexpr (Traits::kBiasTile) {
        load_tile<kBlockM, kBlockN>(&tp.bias, s.bias_barriers.acquire(bias_at, Traits::kTileBytesBias),
                                    s.bias[bias_at.stage], bias_row, bias_h, bias_b, n * kBlockN);
        bias_at.advance();
      }
      load_tile<kBlockN, kHeadDim>(&tp.v, s.v_barriers.acquire(v_at, Traits::kTileBytesKV), s.v[v_at.stage], row,
                                   hk, batch);
      v_at.advance();
    }
  });
}

}  // namespace memattn::cuda::sm90
