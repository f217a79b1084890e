// The Hopper backward's epilogue, per work item: a split tile's parts meet (gather_split_tile),
// then each consumer warpgroup writes its own 64 keys' dK (scaled) and dV through the K and V
// tiles' shared memory, so that global stores are 16-byte row segments; the tiles are then
// released to the producer for the next item's K and V.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/common/bwd_common.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"
#include "cuda/sm90/bwd/storage.hpp"
#include "cuda/sm90/bwd/tile_scheduler.hpp"
#include "cuda/sm90/gmma.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// Named barriers (cutlass::arch::NamedBarrier numbers them after the ones it reserves): all
// consumer threads', then each consumer warpgroup's own.
inline constexpr int kConsumersBarrier = 1;
inline constexpr int kBwdWarpgroupBarrier = 2;

template <class Traits>
__device__ __forceinline__ void consumers_sync() {
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kConsumersBarrier);
}

// One gradient's 64 x kHeadDim rows of warpgroup `wg` from its fragment, through `smem` (a K-major
// tile no wgmma reads any more), to `gmem_rows` (rows and columns past the tensor's not written).
template <class Traits, class Frag>
__device__ __forceinline__ void store_warpgroup_rows(const Frag& frag, typename Traits::Element* smem,
                                                     typename Traits::Element* gmem_rows, std::int64_t row_stride,
                                                     int rows, int cols, int ctid) {
  using Element = typename Traits::Element;
  constexpr int kWarpgroupRows = 64;
  typename Traits::MmaDkv mma;
  Tensor sT = cute::make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutKV{});
  auto r2s = make_tiled_copy_C(typename Traits::Tiles::RegToSmemAtom{}, mma);
  auto r2s_thr = r2s.get_thread_slice(ctid);
  copy(r2s, r2s_thr.retile_S(frag), r2s_thr.partition_D(sT));
  const int wg = ctid / Traits::kWarpgroupThreads;
  cutlass::arch::NamedBarrier::sync(Traits::kWarpgroupThreads, kBwdWarpgroupBarrier + wg);
  const auto tile = make_shape(Int<kWarpgroupRows>{}, Int<Traits::kHeadDim>{});
  const Tensor sT_wg = local_tile(sT, tile, make_coord(wg, 0));
  Tensor gT = cute::make_tensor(make_gmem_ptr(gmem_rows), tile, make_stride(row_stride, _1{}));
  typename Traits::Tiles::StoreCopy store;
  auto store_thr = store.get_thread_slice(ctid % Traits::kWarpgroupThreads);
  store_predicated(store, store_thr.partition_S(sT_wg), store_thr.partition_D(gT),
                   store_thr.partition_S(make_identity_tensor(tile)), rows, cols);
}

// After every consumer's last read of K and V (the caller's barrier).
template <class Traits, class Acc>
__device__ __forceinline__ void write_key_grads(const BwdParams& p, BwdSharedStorage<Traits>& s,
                                                const BwdWorkItem<Traits::kBlockM>& w, Acc& acc_dk, Acc& acc_dv,
                                                int ctid) {
  using Element = typename Traits::Element;
  if (w.part.parts > 1 &&
      !gather_split_tile<Traits::kConsumerThreads>(p, w.part, acc_dk, acc_dv, unsigned(ctid), consumers_sync<Traits>))
    return;
  CUTE_UNROLL
  for (int e = 0; e < size(acc_dk); ++e) acc_dk(e) *= p.scale;
  const int wg = ctid / Traits::kWarpgroupThreads;
  const std::int64_t row = w.seq.k_begin + w.steps.n0 + 64 * wg;
  const int rows = w.steps.keys - 64 * wg;
  store_warpgroup_rows<Traits>(convert_fragment<Element>(acc_dk), s.k, dk_at<Element>(p, w.seq.batch, row, w.tile.hk),
                               p.dk_row_stride, rows, p.head_dim, ctid);
  store_warpgroup_rows<Traits>(convert_fragment<Element>(acc_dv), s.v, dv_at<Element>(p, w.seq.batch, row, w.tile.hk),
                               p.dv_row_stride, rows, p.head_dim_v, ctid);
}

}  // namespace memattn::cuda::sm90
