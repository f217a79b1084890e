// The Hopper backward's consumer warpgroups: for each work item, wait for K and V, then per step
// (a query tile of one head, as the producer loaded it into the ring):
//   S^T = K Q^T, then dP^T = V dO^T with P's exponentials issued beside it (exp_scores_part);
//   P^T and dS^T elementwise (gradient_tile, key rows); dS^T stored for the dQ GEMM;
//   dV += P^T dO issued with P^T from registers;
//   one barrier of the consumer threads (every warpgroup's dS^T in), the previous step's dQ on its
//   way to the workspace (dq_out.hpp), then dQ = dS K and dK += dS^T Q (dS^T from registers)
//   queued behind dV; dQ staged once it completes, while dK runs; the ring buffer released after dK.
// A step starts on the ring's barrier instead of a CTA barrier after copies every warp issued
// (the one-pass rows), and the loads run up to kStages steps ahead. The tensor cores take dV while
// the warps wait at the barrier, and dK while they stage dQ: against dV and dK both issued before
// the barrier and dQ staged after all three (H200, CLI, bf16): D = 128 +4-7% (S = 8192 475 -> 505
// TFLOP/s, causal 470 -> 500; S = 2048 430 -> 449); FlashAttention-3's order too.
// The dS^T tile and the dQ stage alternate between two buffers, so that one barrier per step
// orders them: a warpgroup may write the next step's dS^T while the other still reads this one's
// in its dQ GEMM, and the dQ stage is rewritten once its last reduction has read it (dq_out.hpp).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/one_pass_bwd_dq_flush.hpp"
#include "cuda/sm90/bwd/dq_out.hpp"
#include "cuda/sm90/bwd/epilogue.hpp"
#include "cuda/sm90/bwd/storage.hpp"
#include "cuda/sm90/bwd/tile_scheduler.hpp"
#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_load.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// ctid: the thread's index among the consumer threads.
template <class Traits, DqAdds kAdds>
__device__ void consume(const BwdParams& p, BwdSharedStorage<Traits>& s, int ctid) {
  using Element = typename Traits::Element;
  using Gemms = typename Traits::Gemms;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kSlicesK = kHeadDim / 16;  // k16 slices of the S^T and dP^T GEMMs
  const auto tile_s = make_shape(Int<kBlockN>{}, Int<kBlockM>{});  // keys x queries
  const auto tile_kv = make_shape(Int<kBlockN>{}, Int<kHeadDim>{});
  const auto tile_dq = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  typename Traits::MmaSdp mma_sdp;
  typename Traits::MmaDkv mma_dkv;
  typename Traits::MmaDq mma_dq;
  const Tensor sK = cute::make_tensor(make_smem_ptr(s.k), typename Traits::SmemLayoutKV{});
  const Tensor sV = cute::make_tensor(make_smem_ptr(s.v), typename Traits::SmemLayoutKV{});
  const Tensor sKt = cute::make_tensor(make_smem_ptr(s.k), typename Traits::SmemLayoutKt{});
  auto ds_store = make_tiled_copy_C(typename Traits::Tiles::RegToSmemAtom{}, mma_sdp);
  RingPosition<1> kv_at;
  RingPosition<Traits::kStages> q_at;
  DqToWriter to_writer;  // deterministic only

  for_each_handed_item<kBlockM, kBlockN, kAdds>(p, s.items, [&](const BwdWorkItem<kBlockM>& w) {
    const SequenceInfo& seq = w.seq;
    const KeyTileSteps<kBlockM>& t = w.steps;
    const detail::MaskRule rule = mask_rule(p, seq);
    DqFromConsumers from_consumers;
    auto& dq_out = dq_route<kAdds>(to_writer, from_consumers);
    Tensor acc_dk = partition_fragment_C(mma_dkv, tile_kv);
    Tensor acc_dv = partition_fragment_C(mma_dkv, tile_kv);
    clear(acc_dk);
    clear(acc_dv);
    // The steps whose rows see all the tile's keys need no mask: two bounds, so that the rule and
    // the sequence's lengths are read only on the masked steps (registers across the steps).
    std::int64_t visible_begin = 0, visible_end = 0;
    rule.rows_seeing_all(t.n0, t.n0 + kBlockN, &visible_begin, &visible_end);
    s.kv_barriers.wait(kv_at);
    // A packed variable-length batch: the K and V boxes ran on past the sequence's keys into the
    // next rows, whose dS is 0 but 0 x NaN in K is not (dQ += dS K): zeroed before any GEMM.
    if (p.seqstart_k != nullptr && t.keys < kBlockN) {
      zero_tile_rows<kBlockN, kHeadDim>(s.k, t.keys, ctid, Traits::kConsumerThreads);
      zero_tile_rows<kBlockN, kHeadDim>(s.v, t.keys, ctid, Traits::kConsumerThreads);
      publish_smem_writes();
      consumers_sync<Traits>();
    }

    StepPos at = t.template start<kAdds>();
    for (int step = 0; step < t.count; ++step, at = t.template after<kAdds>(at)) {
      const int buf = step & 1;
      // Everything derived from the thread index is rebuilt each step from an opaque copy of it,
      // so that no per-thread coordinates or addresses stay live across the steps (registers).
      const int tid = opaque(ctid);
      __builtin_assume(tid >= 0 && tid < Traits::kConsumerThreads);
      const Tensor coord_s = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(tile_s));
      const Tensor coord_dq = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(tile_dq));
      auto ds_store_thr = ds_store.get_thread_slice(tid);
      const int rows = int(min(std::int64_t(kBlockM), seq.q_len - at.m0));
      const float* lse2 = s.lse2[q_at.stage];
      const float* delta = s.delta[q_at.stage];
      const Tensor sQ = cute::make_tensor(make_smem_ptr(s.q[q_at.stage]), typename Traits::SmemLayoutQ{});
      const Tensor sQt = cute::make_tensor(make_smem_ptr(s.q[q_at.stage]), typename Traits::SmemLayoutQt{});
      const Tensor sdO = cute::make_tensor(make_smem_ptr(s.dout[q_at.stage]), typename Traits::SmemLayoutQ{});
      const Tensor sdOt = cute::make_tensor(make_smem_ptr(s.dout[q_at.stage]), typename Traits::SmemLayoutQt{});
      Tensor sdSt = cute::make_tensor(make_smem_ptr(s.ds[buf]), typename Traits::SmemLayoutPt{});
      const Tensor sdS = cute::make_tensor(make_smem_ptr(s.ds[buf]), typename Traits::SmemLayoutP{});

      Tensor acc_s = partition_fragment_C(mma_sdp, tile_s);
      Tensor acc_dp = partition_fragment_C(mma_sdp, tile_s);
      clear(acc_s);
      clear(acc_dp);
      s.q_barriers.wait(q_at);
      Gemms::template scores<kSlicesK>(
          mma_sdp, sQ, sK, acc_s, sdO, sV, acc_dp, tid, [](int) {},
          [&](int kk) { exp_scores_part<kSlicesK, ScoreRows::keys>(acc_s, coord_s, lse2, p.scale_log2, kk); });
      const TileOrigin origin{w.tile.b, at.h, at.m0, t.n0, seq.q_len, seq.k_len};
      const bool masked = !(visible_begin <= at.m0 && at.m0 + rows <= visible_end);
      gradient_tile<Element, Traits::kFeatures, ScoreRows::keys, Dbias::write, ScoresIn::probabilities>(
          p, rule, origin, masked, acc_s, acc_dp, coord_s, lse2, delta);
      Tensor p_frag = convert_fragment<Element>(acc_s);
      Tensor ds_frag = convert_fragment<Element>(acc_dp);
      copy(ds_store, ds_store_thr.retile_S(ds_frag), ds_store_thr.partition_D(sdSt));
      publish_smem_writes();
      // dV in flight while the warpgroups meet; then dQ and dK, and dQ staged while dK runs.
      Gemms::issue_key_grad_from_registers(mma_dkv, p_frag, sdOt, acc_dv, tid);
      dq_out.before_barrier(s.dq_handoff, tid);
      consumers_sync<Traits>();  // every warpgroup's dS^T is in; the last step's dQ is staged
      dq_out.template issue<kHeadDim>(s.dq, p.dq_accum.ld, tid);
      Tensor acc_dq = partition_fragment_C(mma_dq, tile_dq);
      clear(acc_dq);
      gmma_issue(mma_dq, sdS, sKt, acc_dq, tid);
      Gemms::issue_key_grad_from_registers(mma_dkv, ds_frag, sQt, acc_dk, tid);
      warpgroup_wait<1>();  // dV and dQ
      warpgroup_fence_operand(acc_dq);
      const bool swizzled = p.dq_accum.ld == kHeadDim;  // the launch's condition for GradAccum::swizzled
      stage_fragment(acc_dq, coord_dq, s.dq[dq_out.stage(step)], kHeadDim, 0,
                     stage_swizzle(coord_dq, int((seq.q_begin + at.m0) & 7), swizzled));
      publish_smem_writes();
      dq_out.staged(s.dq_handoff);
      warpgroup_wait<0>();  // dK
      Gemms::key_grads_done(p_frag, acc_dv, ds_frag, acc_dk);
      s.q_barriers.release(q_at);  // Q, dO and the statistics read
      q_at.advance();
      dq_out.step_done(accum_row(p.dq_accum, seq.batch, seq.q_begin + at.m0, at.h), rows, step);
    }
    consumers_sync<Traits>();  // the last step's dQ is staged; every wgmma read of K and V is done
    dq_out.template issue<kHeadDim>(s.dq, p.dq_accum.ld, ctid);
    write_key_grads<Traits>(p, s, w, acc_dk, acc_dv, ctid);
    publish_smem_writes();  // the next K and V arrive by TMA over the tiles these threads wrote
    s.kv_barriers.release(kv_at);
    kv_at.advance();
  });
  if (kAdds == DqAdds::any_order && ctid == 0) wait_bulk_reads();  // the stage stays valid until read
}

}  // namespace memattn::cuda::sm90
