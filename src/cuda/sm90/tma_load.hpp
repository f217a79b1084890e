// A tile's TMA load into the GMMA K-major layout (sm90/gmma.hpp's KMajorTile), issued by one
// thread and completing on an mbarrier: the Hopper family's producers (sm90/fwd/, sm90/bwd/).
#pragma once

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

// One tile of kRows rows of one head, from column `col` on: its column boxes of 128 bytes, each a
// column block of the K-major layout (kRows rows of 128 bytes), completing on `full`.
template <int kRows, int kCols, class Element>
__device__ __forceinline__ void load_tile(const CUtensorMap* map, std::uint64_t* full, Element* dst, int row, int head,
                                          int batch, int col = 0) {
  constexpr auto kCacheHint = static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  constexpr int kBoxCols = kTmaBoxCols<Element>;
  CUTE_UNROLL
  for (int box = 0; box < kCols / kBoxCols; ++box)
    cute::SM90_TMA_LOAD_4D::copy(map, full, kCacheHint, dst + box * kRows * kBoxCols, col + box * kBoxCols, row, head,
                                 batch);
}

// Zeroes rows [first_row, kRows) of a load_tile tile: whole 128-byte rows of each column block (the
// swizzle moves 16-byte chunks within a row only), 16 bytes a store, shared by `threads` threads
// (`tid` the caller's index among them). The caller orders the stores after the tile's load has
// landed, and publishes them to the tensor cores (publish_smem_writes) before its readers' barrier.
// Used where a box runs on past a packed sequence's rows into rows that must count as zeros.
template <int kRows, int kCols, class Element>
__device__ __forceinline__ void zero_tile_rows(Element* tile, int first_row, int tid, int threads) {
  constexpr int kBoxCols = kTmaBoxCols<Element>, kBlocks = kCols / kBoxCols;
  constexpr int kChunks = kTmaBoxBytes / 16;  // per row of a block
  constexpr int kChunkElems = 16 / int(sizeof(Element));
  const int chunks = (kRows - first_row) * kBlocks * kChunks;
  for (int i = tid; i < chunks; i += threads) {
    const int row = first_row + i / (kBlocks * kChunks), block = i / kChunks % kBlocks, chunk = i % kChunks;
    *reinterpret_cast<uint4*>(tile + (block * kRows + row) * kBoxCols + chunk * kChunkElems) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace memattn::cuda::sm90
