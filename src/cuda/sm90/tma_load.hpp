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

}  // namespace memattn::cuda::sm90
