// The Hopper backward's producers: two warps of the producer warpgroup walk the CTA's work items
// in the consumers' order (tile_scheduler.hpp), each on its own, so that neither waits for the
// other's buffers. One loads K and V per item (TMA) once the consumers have released the last
// item's; the other draws the items and loads each step's Q and dO (TMA) into the ring as soon as
// a buffer is free, up to kStages steps ahead and across items, with the step's LSE (base 2, +inf
// past the sequence, so that those rows' P is 0) and delta loaded by its lanes into the same ring
// buffer, each lane arriving on its barrier after its stores.
//
// A packed variable-length batch: a query tile's box runs on past its sequence's rows into the
// next rows, where P is 0 but 0 x NaN in Q or dO is not (dK += dS^T Q, dV += P^T dO). There the Q
// and dO boxes land on a barrier of the producer warp's own, whose lanes zero those rows and
// publish the zeros before arriving on the ring's barrier.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/bwd_common.hpp"
#include "cuda/sm90/bwd/params.hpp"
#include "cuda/sm90/bwd/storage.hpp"
#include "cuda/sm90/bwd/tile_scheduler.hpp"
#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_load.hpp"

namespace memattn::cuda::sm90 {

// K and V, by one thread of the producer warpgroup's second warp: each item's tiles once the
// consumers have released the last item's (after its dK and dV stores).
template <class Traits, DqAdds kAdds>
__device__ void produce_keys(const TmaBwdParams& tp, BwdSharedStorage<Traits>& s) {
  const BwdParams& p = tp.p;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  cute::prefetch_tma_descriptor(&tp.k);
  cute::prefetch_tma_descriptor(&tp.v);
  RingPosition<1> kv_at;
  for_each_handed_item<kBlockM, kBlockN, kAdds>(p, s.items, [&](const BwdWorkItem<kBlockM>& w) {
    std::uint64_t* full = s.kv_barriers.acquire(kv_at, 2 * Traits::kTileBytesKV);
    const int row = int(w.seq.k_begin + w.steps.n0);
    load_tile<kBlockN, kHeadDim>(&tp.k, full, s.k, row, w.tile.hk, int(w.seq.batch));
    load_tile<kBlockN, kHeadDim>(&tp.v, full, s.v, row, w.tile.hk, int(w.seq.batch));
    kv_at.advance();
  });
}

// Each step's Q, dO (TMA, by the first lane) and row statistics (all lanes), by the producer
// warpgroup's first warp; `lane` is the thread's lane.
template <class Traits, DqAdds kAdds>
__device__ void produce_queries(const TmaBwdParams& tp, BwdSharedStorage<Traits>& s, int lane) {
  const BwdParams& p = tp.p;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  if (lane == 0) {
    cute::prefetch_tma_descriptor(&tp.q);
    cute::prefetch_tma_descriptor(&tp.dout);
  }
  RingPosition<Traits::kStages> q_at;
  std::uint32_t landed_phase = 0;  // of s.q_landed
  for_each_drawn_item<kBlockM, kBlockN, kAdds>(p, s.items, lane, [&](const BwdWorkItem<kBlockM>& w) {
    const SequenceInfo& seq = w.seq;
    const KeyTileSteps<kBlockM>& t = w.steps;
    StepPos at = t.template start<kAdds>();
    for (int step = 0; step < t.count; ++step, at = t.template after<kAdds>(at)) {
      const int stage = q_at.stage;
      const std::int64_t q_row = seq.q_begin + at.m0;
      const int rows = int(min(std::int64_t(kBlockM), seq.q_len - at.m0));
      const bool crosses = p.seqstart_q != nullptr && rows < kBlockM;  // into the next sequence's rows
      s.q_barriers.wait_free(q_at);
      if (lane == 0) {
        std::uint64_t* full = &s.q_landed;
        if (crosses) FullBarrier::arrive_and_expect_tx(full, 2 * Traits::kTileBytesQ);
        else full = s.q_barriers.expect(q_at, 2 * Traits::kTileBytesQ);
        load_tile<kBlockM, kHeadDim>(&tp.q, full, s.q[stage], int(q_row), at.h, int(seq.batch));
        load_tile<kBlockM, kHeadDim>(&tp.dout, full, s.dout[stage], int(q_row), at.h, int(seq.batch));
      }
      if (crosses) {
        FullBarrier::wait(&s.q_landed, landed_phase);
        zero_tile_rows<kBlockM, kHeadDim>(s.q[stage], rows, lane, Traits::kProducerThreads);
        zero_tile_rows<kBlockM, kHeadDim>(s.dout[stage], rows, lane, Traits::kProducerThreads);
        publish_smem_writes();
        __syncwarp();  // every lane past the wait before lane 0 arms the barrier again
        landed_phase ^= 1;
        if (lane == 0) s.q_barriers.arrive(q_at);  // in place of the arrival that announced the bytes
      }
      const float* lse = lse_at(p, seq.batch, q_row, at.h);
      const float* delta = delta_at(p, seq.batch, q_row, at.h);
      for (int r = lane; r < kBlockM; r += Traits::kProducerThreads) {
        s.lse2[stage][r] = r < rows ? staged_lse<Element>(__ldg(lse + r * p.lse_row_stride)) : INFINITY;
        s.delta[stage][r] = r < rows ? __ldg(delta + r) : 0.0f;
      }
      s.q_barriers.arrive(q_at);
      q_at.advance();
    }
  });
}

}  // namespace memattn::cuda::sm90
