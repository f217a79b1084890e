// Rows of a tile in the GMMA K-major layout (sm90/gmma.hpp's KMajorTile) to global memory by TMA,
// issued by one thread: the Hopper forward's output (sm90/fwd/epilogue.hpp). The map clips the
// rows past the tensor's and the columns past its own, so the stores take no predicates; the
// calling threads are free once the stores are issued, where stores of their own held them until
// every row segment had left. A packed variable-length batch is one tensor to a map, which cannot
// stop at each sequence's end: its rows keep the threads' stores (warpgroup_store.hpp).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

// kRows rows of a tile of kTileRows x kCols, from the tile's row `first_row` to the map's
// (column 0, `row`, `head`, `batch`): one box per column block (the map's boxes are kRows rows)
// up to `cols`, committed as one bulk group. The writers of the tile fence their stores
// (publish_tile_to_stores) and meet the issuing thread at a barrier first.
template <int kRows, int kTileRows, int kCols, class Element>
__device__ __forceinline__ void store_tile_rows(const CUtensorMap* map, const Element* tile, int first_row, int cols,
                                                int row, int head, int batch) {
  constexpr int kBoxCols = kTmaBoxCols<Element>;
  CUTE_UNROLL
  for (int box = 0; box < kCols / kBoxCols; ++box)
    if (box * kBoxCols < cols)
      cute::SM90_TMA_STORE_4D::copy(map, tile + (box * kTileRows + first_row) * kBoxCols, box * kBoxCols, row, head,
                                    batch);
  cute::tma_store_arrive();
}

// A writer's shared-memory stores, made visible to the TMA stores (the async proxy) that read them.
__device__ __forceinline__ void publish_tile_to_stores() { cute::tma_store_fence(); }

// The issuing thread: returns once every store it committed has read its shared memory (the tile
// may be written again); their global writes complete on their own.
__device__ __forceinline__ void wait_stores_read() { cute::tma_store_wait<0>(); }

}  // namespace memattn::cuda::sm90
