// A consumer warpgroup's rows of an output tile to global memory through shared memory, so that
// global stores are 16-byte row segments: the Hopper forward's output (sm90/fwd/epilogue.hpp) and
// the Hopper backward's dK and dV (sm90/bwd/epilogue.hpp).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/common/fragments.hpp"
#include "cuda/common/swizzled_tiles.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

inline constexpr int kWarpgroupRows = 64;  // a consumer warpgroup's rows of a wgmma tile
inline constexpr int kWarpgroupThreads = 128;

// Warpgroup `tid / 128`'s 64 rows of `frag` (the 16-bit accumulator fragment of `mma`, whose
// warpgroups are stacked along the rows) into the K-major tile `sT` that no wgmma reads any more.
// `tid`: the thread's index among the consumer threads.
template <class Element, class TiledMma, class Frag, class SmemTile>
__device__ __forceinline__ void write_warpgroup_rows(const TiledMma& mma, const Frag& frag, const SmemTile& sT,
                                                     int tid) {
  using Tiles = SwizzledTiles<Element, kWarpgroupThreads>;
  auto r2s = make_tiled_copy_C(typename Tiles::RegToSmemAtom{}, mma);
  auto r2s_thr = r2s.get_thread_slice(tid);
  copy(r2s, r2s_thr.retile_S(frag), r2s_thr.partition_D(sT));
}

// write_warpgroup_rows, then, after the warpgroup's named barrier `barrier`, its rows to
// `gmem_rows` (the first of them, rows `row_stride` apart) by the warpgroup's threads: rows past
// `rows` and columns past `cols` are not written.
template <class Element, class TiledMma, class Frag, class SmemTile>
__device__ __forceinline__ void store_warpgroup_rows(const TiledMma& mma, const Frag& frag, const SmemTile& sT,
                                                     Element* gmem_rows, std::int64_t row_stride, int rows, int cols,
                                                     int tid, int barrier) {
  using Tiles = SwizzledTiles<Element, kWarpgroupThreads>;
  write_warpgroup_rows<Element>(mma, frag, sT, tid);
  const int wg = tid / kWarpgroupThreads;
  cutlass::arch::NamedBarrier::sync(kWarpgroupThreads, barrier);
  const auto tile = make_shape(Int<kWarpgroupRows>{}, size<1>(sT));
  const Tensor sT_wg = local_tile(sT, tile, make_coord(wg, 0));
  Tensor gT = cute::make_tensor(make_gmem_ptr(gmem_rows), tile, make_stride(row_stride, _1{}));
  typename Tiles::StoreCopy store;
  auto store_thr = store.get_thread_slice(tid % kWarpgroupThreads);
  store_predicated(store, store_thr.partition_S(sT_wg), store_thr.partition_D(gT),
                   store_thr.partition_S(make_identity_tensor(tile)), rows, cols);
}

}  // namespace memattn::cuda::sm90
