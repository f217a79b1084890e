// The Hopper forward's epilogue, per consumer warpgroup: normalise the output rows, write their
// LSE, then the output tile through shared memory (storage.hpp: its own, or the Q tile's once its
// wgmma reads are complete). Each warpgroup writes and stores its own 64 rows (their bytes in the
// K-major tile are its own), so it waits only for itself (a named barrier of 128 threads). The
// rows leave by TMA (tma_store.hpp) where a map describes the output and the lengths are fixed:
// one thread issues the stores and the warpgroup goes on to its next work item. Otherwise (a
// packed variable-length batch, whose boxes would cross into the next sequence's rows, or an
// output no map describes) its threads store 16-byte row segments predicated on the rows and Dv.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_store.hpp"
#include "cuda/sm90/warpgroup_store.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// Named barriers kWarpgroupBarrier + w: consumer warpgroup w's own (cutlass::arch::NamedBarrier
// numbers them after the ones it reserves; the ping-pong turns take one more per warpgroup).
inline constexpr int kWarpgroupBarrier = 1;

// Storage: FwdSharedStorage<Traits> or Tf32x3FwdStorage<Traits>; q_stage: the item's Q buffer
// (the output's space where kOutputInQ). o_map: the output's map, or null for the threads' stores.
// fp32 rows take the LSE from the top score (kNaturalLse), as their backward expects. out_scale:
// dropout's 1 / (1 - p), else 1.
template <class Traits, class Storage, class AccO, class Softmax>
__device__ __forceinline__ void write_output(const FwdParams& p, const CUtensorMap* o_map, Storage& s,
                                             int q_stage, const SequenceInfo& seq, int h, std::int64_t m0, int rows,
                                             AccO& acc_o, Softmax& softmax, float out_scale, int ctid) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kHeadDim = Traits::kHeadDim;
  typename Traits::MmaO mma_o;
  auto thr_o = mma_o.get_thread_slice(ctid);
  Tensor acc_o_rc = rowcol(acc_o);
  float lse[decltype(size<0>(acc_o_rc))::value];
  if constexpr (kNaturalLse<Element>) {
    float norm[decltype(size<0>(acc_o_rc))::value];
    softmax.final_factors_natural(out_scale, norm, lse);
    softmax.scale_rows(acc_o_rc, norm);
  } else {
    softmax.finalize(acc_o_rc, out_scale, lse);
  }
  write_lse(p, seq, h, m0, rows, lse, rowcol(thr_o.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kHeadDim>{})))));

  // The warpgroup's barrier orders its last reads of its rows of the output tile (the previous
  // work item's stores: the issuing thread's wait covers the TMA's) before these writes. (The
  // warpgroup's wgmma, which all its threads have issued since, orders the threads' reads too, but
  // compute-sanitizer's racecheck does not see that: with several items per CTA it reported the
  // stores' reads against these writes.)
  const Tensor sO = cute::make_tensor(make_smem_ptr(s.output(q_stage)), typename Traits::SmemLayoutQ{});
  const int wg = ctid / Traits::kWarpgroupThreads;
  const int wg_rows = rows - wg * kWarpgroupRows;
  const std::int64_t wg_m0 = m0 + wg * kWarpgroupRows;
  const int barrier = kWarpgroupBarrier + wg;
  const bool issuer = ctid % Traits::kWarpgroupThreads == 0;
  if (o_map != nullptr && issuer) wait_stores_read();
  cutlass::arch::NamedBarrier::sync(Traits::kWarpgroupThreads, barrier);
  if (o_map != nullptr) {
    write_warpgroup_rows<Element>(mma_o, convert_fragment<Element>(acc_o), sO, ctid);
    publish_tile_to_stores();
    cutlass::arch::NamedBarrier::sync(Traits::kWarpgroupThreads, barrier);
    if (issuer && wg_rows > 0) {
      store_tile_rows<kWarpgroupRows, kBlockM, kHeadDim>(o_map, s.output(q_stage), wg * kWarpgroupRows, p.head_dim_v,
                                                         int(seq.q_begin + wg_m0), h, int(seq.batch));
      // The next Q tile arrives where the stores read.
      if constexpr (Storage::kOutputInQ) wait_stores_read();
    }
    return;
  }
  store_warpgroup_rows(mma_o, convert_fragment<Element>(acc_o), sO, o_at<Element>(p, seq.batch, seq.q_begin + wg_m0, h),
                       p.o_row_stride, wg_rows, p.head_dim_v, ctid, barrier);
  // Where the output shares the Q tile's space, the next Q tile arrives by TMA (the async proxy)
  // over what these threads read and wrote.
  if constexpr (Storage::kOutputInQ) publish_smem_writes();
}

// The end of a consumer thread's walk: the output's stores it issued have read their tile (the
// CTA's shared memory must outlive them).
__device__ __forceinline__ void finish_output(const CUtensorMap* o_map, int ctid) {
  if (o_map != nullptr && ctid % kWarpgroupThreads == 0) wait_stores_read();
}

}  // namespace memattn::cuda::sm90
