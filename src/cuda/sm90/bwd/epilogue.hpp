// The Hopper backward's epilogue, per work item: a split tile's parts meet (gather_split_tile),
// then each consumer warpgroup writes its own 64 keys' dK (scaled) and dV through the K and V
// tiles' shared memory (store_warpgroup_rows); the tiles are then released to the producer for
// the next item's K and V.
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
#include "cuda/sm90/warpgroup_store.hpp"

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
  const std::int64_t row = w.seq.k_begin + w.steps.n0 + kWarpgroupRows * wg;
  const int rows = w.steps.keys - kWarpgroupRows * wg;
  typename Traits::MmaDkv mma;
  const Tensor sK = cute::make_tensor(make_smem_ptr(s.k), typename Traits::SmemLayoutKV{});
  const Tensor sV = cute::make_tensor(make_smem_ptr(s.v), typename Traits::SmemLayoutKV{});
  store_warpgroup_rows(mma, convert_fragment<Element>(acc_dk), sK, dk_at<Element>(p, w.seq.batch, row, w.tile.hk),
                       p.dk_row_stride, rows, p.head_dim, ctid, kBwdWarpgroupBarrier + wg);
  store_warpgroup_rows(mma, convert_fragment<Element>(acc_dv), sV, dv_at<Element>(p, w.seq.batch, row, w.tile.hk),
                       p.dv_row_stride, rows, p.head_dim_v, ctid, kBwdWarpgroupBarrier + wg);
}

}  // namespace memattn::cuda::sm90
