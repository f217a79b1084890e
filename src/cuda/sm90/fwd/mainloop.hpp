// The Hopper forward's consumer warpgroups: for each work item the producer hands the CTA,
// wait for the Q tile, then walk the key tiles last to first as they land: S = Q K^T on wgmma with
// both operands in shared memory, the K buffer released as soon as the GEMM completes; scale and
// mask (masked tiles only), the online softmax in registers (softmax.hpp, a quad of lanes per row
// as in the mma.sync kernels); O += P V with P converted in registers as the A operand, issued
// right after the next tile's S GEMM so that it runs under that tile's softmax, and the V buffer
// released when it completes. On the rows with a bias (FwdBiasTraits) each tile's bias comes from
// its ring, added with the scale before the mask; on the rows with dropout (FwdDropoutTraits) the
// dropped probabilities are zeroed after the softmax. Each warpgroup owns 64 query rows; the
// epilogue (epilogue.hpp) writes them.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/dropout.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/key_tiles.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/fwd/epilogue.hpp"
#include "cuda/sm90/fwd/storage.hpp"
#include "cuda/sm90/fwd/traits.hpp"
#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_load.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// acc = A B^T over every k-block (the first one overwrites acc), issued by the calling warpgroup;
// a and b are partitioned fragments (shared-memory descriptors, or registers for a: fenced by the
// caller). Returns with the MMAs in flight: warpgroup_gemm_done before acc is read.
template <class TiledMma, class A, class B, class Acc>
__device__ __forceinline__ void warpgroup_gemm(TiledMma& mma, const A& a, const B& b, Acc& acc, bool overwrite) {
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  mma.accumulate_ = overwrite ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

template <class Acc>
__device__ __forceinline__ void warpgroup_gemm_done(Acc& acc) {
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
}

// Ping-pong between the consumer warpgroups (ConsumerSchedule::ping_pong): each issues its GEMMs
// only in its turn and hands the turn to the next warpgroup (round robin) once they are issued, so
// that a warpgroup's softmax runs while another's GEMMs hold the tensor cores (instead of all
// contending for them, then all exponentiating). Turn barrier w (a named barrier of warpgroup w's
// threads and its predecessor's) opens when the predecessor has passed the turn to w; the last
// warpgroup passes first, so warpgroup 0 starts. All walk the same work items and key tiles, so
// the turns go round without end. With ConsumerSchedule::independent the turns are no-ops.
template <ConsumerSchedule kSchedule, int kWarpgroups>
struct GemmTurns {
  static constexpr bool kPingPong = kSchedule == ConsumerSchedule::ping_pong;
  static constexpr int kBarrier = kWarpgroupBarrier + kWarpgroups;  // after the epilogue's, one per warpgroup
  static constexpr int kThreads = 2 * 128;                           // the waiting warpgroup and its predecessor
  int warpgroup;
  __device__ __forceinline__ void start() const {
    if (kPingPong && warpgroup == kWarpgroups - 1) pass();
  }
  __device__ __forceinline__ void wait() const {
    if constexpr (kPingPong) cutlass::arch::NamedBarrier::sync(kThreads, kBarrier + warpgroup);
  }
  __device__ __forceinline__ void pass() const {
    if constexpr (kPingPong)
      cutlass::arch::NamedBarrier::arrive(kThreads, kBarrier + (warpgroup + 1) % kWarpgroups);
  }
};

// Named barrier of every consumer thread, after the epilogue's and the turns' (one per warpgroup each).
template <int kWarpgroups>
inline constexpr int kFwdConsumersBarrier = kWarpgroupBarrier + 2 * kWarpgroups;

// Variable lengths: a key tile's box runs on past the sequence's keys into the rows after them
// (the next sequence's, or past seqused_k), whose scores the mask hides; but P V would still
// multiply them by 0, and 0 x V is NaN where V holds NaN or inf. So the consumers zero V's rows
// from `first_row` on once the tile has landed, and publish the zeros to the tensor cores before
// any warpgroup's P V reads them. Only the item's first tile (its last, walked first) can cross.
template <class Traits>
__device__ __forceinline__ void zero_v_rows(typename Traits::Element* v_tile, int first_row, int ctid) {
  zero_tile_rows<Traits::kBlockN, Traits::kHeadDim>(v_tile, first_row, ctid, Traits::kConsumerThreads);
  publish_smem_writes();
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kFwdConsumersBarrier<Traits::kConsumerWarpgroups>);
}

// ctid: the thread's index among the consumer threads; o_map: write_output's. Inlined by force,
// as the item walk's body (work_items.hpp): a call would serialise its wgmma.
template <class Traits>
__device__ __forceinline__ void consume(const FwdParams& p, const CUtensorMap* o_map, FwdSharedStorage<Traits>& s,
                                        int ctid) {
  using Storage = FwdSharedStorage<Traits>;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const auto tile_s = make_shape(Int<kBlockM>{}, Int<kBlockN>{});
  const auto tile_o = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  typename Traits::MmaS mma_s;
  typename Traits::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(ctid);
  auto thr_o = mma_o.get_thread_slice(ctid);
  const Tensor tScS = thr_s.partition_C(make_identity_tensor(tile_s));            // (query, key) of each score
  RingPosition<Storage::kQStages> q_at;
  RingPosition<Traits::kStages> k_at, v_at;
  [[maybe_unused]] RingPosition<Traits::kBiasStages> bias_at;
  const GemmTurns<Traits::kSchedule, Traits::kConsumerWarpgroups> turns{ctid / Traits::kWarpgroupThreads};
  turns.start();

  for_each_consumer_item<Traits>(p, s, ctid, [&](const FwdItemTiles& it) __attribute__((always_inline)) {
    const WorkItem& work = it.work;
    const SequenceInfo& seq = it.seq;
    const std::int64_t m0 = it.m0;
    const int rows = it.rows;
    const KeyTiles& t = it.t;
    Tensor acc_o = partition_fragment_C(mma_o, tile_o);  // fp32, this warpgroup's 64 rows
    clear(acc_o);
    Tensor acc_o_rc = rowcol(acc_o);
    OnlineSoftmax<decltype(size<0>(acc_o_rc))::value> softmax;
    softmax.init();
    const detail::MaskRule rule = mask_rule(p, seq);
    // Whether the first tile (the last key tile, walked first) needs the mask: without one, at
    // S = 512, it is whole, and skipping the mask's compares there took 8% off D = 64 (H200).
    const bool first_masked = !(t.last <= t.full_hi && t.last >= t.full_lo);
    const Tensor sQ = cute::make_tensor(make_smem_ptr(s.q[q_at.stage]), typename Traits::SmemLayoutQ{});
    const Tensor tSrQ = thr_s.partition_fragment_A(sQ);  // descriptors
    s.q_barriers.wait(q_at);
    if (p.seqstart_k != nullptr && seq.k_len < std::int64_t(t.last + 1) * kBlockN) {
      s.v_barriers.wait(v_at);  // again before its P V: a completed phase passes at once
      zero_v_rows<Traits>(s.v[v_at.stage], int(seq.k_len - std::int64_t(t.last) * kBlockN), ctid);
    }

    // The P of the last tile seen, the register A operand of its P V, which is issued under the
    // next tile's S GEMM and completes during the next tile's softmax: the tensor cores run P V
    // while the warpgroup exponentiates. The registers are rewritten only once their P V is done.
    Tensor p_frag = cute::make_tensor<Element>(cute::partition_shape_C(mma_s, tile_s));
    Tensor tOrP = cute::make_tensor(p_frag.data(), gmma_acc_as_a_operand(p_frag.layout()));
    const auto v_operand = [&]() __attribute__((always_inline)) {
      const Tensor sVt = cute::make_tensor(make_smem_ptr(s.v[v_at.stage]), typename Traits::SmemLayoutVt{});
      return thr_o.partition_fragment_B(sVt);
    };
    const auto issue_pv = [&](const auto& tOrV) __attribute__((always_inline)) {
      s.v_barriers.wait(v_at);
      warpgroup_fence_operand(tOrP);
      warpgroup_gemm(mma_o, tOrP, tOrV, acc_o, false);
    };
    const auto pv_done = [&]() __attribute__((always_inline)) {  // after the wait that completes it
      warpgroup_fence_operand(acc_o);
      warpgroup_fence_operand(tOrP);
      s.v_barriers.release(v_at);
      v_at.advance();
    };

    // One key tile, of a kind fixed at compile time (key_tiles.hpp): with
    // unmasked_scale_in_softmax the scores stay unscaled and the softmax's exp2 FFMA applies the
    // scale (only with scale > 0, where the unscaled maximum is the scaled one). S(n) is issued
    // first, then the previous tile's P V (none before the first tile); the wait for S leaves P V
    // in flight. The first tile is peeled at compile time (kFirst): with a run-time branch the
    // paths with and without P V in flight joined before the softmax, and ptxas serialised every
    // wgmma of the kernel (C7513; D = 128 S = 8192 608 -> 505 TFLOP/s).
    const auto key_tile = [&](int n, auto kind, auto first) __attribute__((always_inline)) {
      constexpr bool kFirst = decltype(first)::value;
      constexpr bool kMasked = decltype(kind)::value == KeyTile::masked;
      constexpr bool kScaleInSoftmax = decltype(kind)::value == KeyTile::unmasked_scale_in_softmax;
      Tensor acc_s = partition_fragment_C(mma_s, tile_s);
      const Tensor sK = cute::make_tensor(make_smem_ptr(s.k[k_at.stage]), typename Traits::SmemLayoutK{});
      const Tensor tSrK = thr_s.partition_fragment_B(sK);
      const Tensor tOrV = v_operand();
      s.k_barriers.wait(k_at);
      turns.wait();
      warpgroup_gemm(mma_s, tSrQ, tSrK, acc_s, true);
      if constexpr (kFirst) {
        turns.pass();
        warpgroup_wait<0>();
      } else {
        issue_pv(tOrV);
        turns.pass();
        warpgroup_wait<1>();  // S(n): the older of the two groups
      }
      warpgroup_fence_operand(acc_s);
      s.k_barriers.release(k_at);
      k_at.advance();

      const TileOrigin origin{work.b, work.h, m0, std::int64_t(n) * kBlockN, seq.q_len, seq.k_len};
      const bool masked = kMasked && (!kFirst || first_masked);
      if constexpr (Traits::kBiasTile) {
        s.bias_barriers.wait(bias_at);
        transform_scores_rows<Element, BiasCode::tile>(p, rule, origin, masked, acc_s, tScS,
                                                       SwizzledBias<kBlockM>{s.bias[bias_at.stage], p.bias_row_stride == 0});
        s.bias_barriers.release(bias_at);
        bias_at.advance();
      } else if constexpr (!kScaleInSoftmax) {
        transform_scores_rows<Element, BiasCode::none>(p, rule, origin, masked, acc_s, tScS);
      }
      Tensor acc_s_rc = rowcol(acc_s);
      float rescale[decltype(size<0>(acc_o_rc))::value];
      softmax.update(acc_s_rc, rescale, kScaleInSoftmax ? p.scale_log2 : kLog2e);
      // Before the wait for the previous P V: the Philox rounds run under it.
      if constexpr (Traits::kDropout)
        if (p.dropout) apply_dropout_rows_paired(p, origin, acc_s, tScS);
      if constexpr (!kFirst) {
        warpgroup_wait<0>();
        pv_done();
        decltype(softmax)::rescale_if_moved(acc_o_rc, rescale);
      }
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) p_frag(i) = Element(acc_s(i));
    };
    using First = cute::true_type;
    using Next = cute::false_type;
    // Last to first: the masked tiles at the right edge of the window (and past the keys), the
    // unmasked ones, then the masked ones at its left edge. A negative (or zero) scale, or a bias
    // (added to the scaled scores), takes the unmasked tiles through the third loop, with the
    // scale applied before the softmax.
    // The first tile takes the code of masked tiles whatever its kind, and the mask itself only
    // where it needs it.
    int n = t.last;
    key_tile(n--, KeyTileKind<KeyTile::masked>{}, First{});
    CUTE_NO_UNROLL
    for (; n >= t.first && n > t.full_hi; --n) key_tile(n, KeyTileKind<KeyTile::masked>{}, Next{});
    if constexpr (!Traits::kBiasTile) {
      if (p.scale_log2 > 0.0f) {
        CUTE_NO_UNROLL
        for (; n >= t.first && n >= t.full_lo; --n)
          key_tile(n, KeyTileKind<KeyTile::unmasked_scale_in_softmax>{}, Next{});
      }
    }
    CUTE_NO_UNROLL
    for (; n >= t.first && n >= t.full_lo; --n) key_tile(n, KeyTileKind<KeyTile::unmasked>{}, Next{});
    CUTE_NO_UNROLL
    for (; n >= t.first; --n) key_tile(n, KeyTileKind<KeyTile::masked>{}, Next{});
    // Every S GEMM is done: with its own output tile, the next work item's Q may load now.
    if constexpr (!Storage::kOutputInQ) s.q_barriers.release(q_at);
    turns.wait();
    issue_pv(v_operand());  // the last tile's
    turns.pass();
    warpgroup_wait<0>();
    pv_done();

    const float out_scale = Traits::kDropout && p.dropout ? p.dropout_scale : 1.0f;
    write_output<Traits>(p, o_map, s, q_at.stage, seq, work.h, m0, rows, acc_o, softmax, out_scale, ctid);
    if constexpr (Storage::kOutputInQ) s.q_barriers.release(q_at);  // after the epilogue's use of its space
    q_at.advance();
  });
  finish_output(o_map, ctid);
}

}  // namespace memattn::cuda::sm90
