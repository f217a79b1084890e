// The fp32 Hopper forward's consumer warpgroups (tf32x3_traits.hpp): for each work item, split the
// warpgroup's Q rows (into registers; at D = 128 the small parts in place), then walk the key
// tiles last to first as the split warpgroup hands them on: S = Q K^T as 3xTF32 warpgroup MMAs,
// two head-dim k-blocks per sum in a fresh accumulator added with a rounded FADD (the tensor cores
// round their sums toward zero: common/tf32x3.hpp); scale and mask as the fp32 mma.sync rows do
// (natural units, an unfused multiply), so that these scores and the LSE are the ones the 3xTF32
// backward recomputes; the online softmax; P split into its two TF32 parts in registers; O += P V
// over the key tile in fresh accumulators (kPvCols output columns at a time), added to O. Each
// warpgroup owns 64 query rows; the epilogue (epilogue.hpp) writes them.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/key_tiles.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tf32x3.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/fwd/epilogue.hpp"
#include "cuda/sm90/fwd/mainloop.hpp"
#include "cuda/sm90/fwd/tf32x3_split.hpp"
#include "cuda/sm90/fwd/tf32x3_storage.hpp"
#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/gmma.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// The thread's elements of its warpgroup's Q rows, as a register A operand holds them: big parts
// into q_big; small parts into q_small, or back in place.
template <bool kSmallInRegisters, class SmemQ, class RegQ>
__device__ __forceinline__ void split_q_fragment(SmemQ& smem_q, RegQ& q_big, RegQ& q_small) {
  CUTE_UNROLL
  for (int i = 0; i < size(smem_q); ++i) {
    float* at = reinterpret_cast<float*>(raw_pointer_cast(&smem_q(i)));
    const float x = *at;
    const std::uint32_t big = round_to_tf32(x);
    q_big(i) = tfloat32_t::bitcast(big);
    const std::uint32_t small = round_to_tf32(x - __uint_as_float(big));
    if constexpr (kSmallInRegisters) q_small(i) = tfloat32_t::bitcast(small);
    else *at = __uint_as_float(small);
  }
}

// ctid: the thread's index among the consumer threads.
template <class Traits>
__device__ void consume_tf32x3(const FwdParams& p, Tf32x3FwdStorage<Traits>& s, int ctid) {
  using Operand = typename Traits::Operand;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kPvCols = Traits::kPvCols;
  const auto tile_s = make_shape(Int<kBlockM>{}, Int<kBlockN>{});
  const auto tile_o = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  const auto tile_pv = make_shape(Int<kBlockM>{}, Int<kPvCols>{});
  typename Traits::MmaS mma_s;
  typename Traits::MmaSRegQ mma_sq;
  typename Traits::MmaO mma_o;
  typename Traits::MmaPv mma_pv;
  auto thr_s = mma_s.get_thread_slice(ctid);
  auto thr_sq = mma_sq.get_thread_slice(ctid);
  auto thr_pv = mma_pv.get_thread_slice(ctid);
  const Tensor sQ = cute::make_tensor(make_smem_ptr(s.q[0]), typename Traits::SmemLayoutQ{});
  const Tensor tSdQs = thr_s.partition_fragment_A(sQ);  // descriptors of Q's small parts (in place)
  Tensor tSsQ = thr_sq.partition_A(sQ);                 // the elements this thread holds as an A operand
  Tensor tSrQ = thr_sq.partition_fragment_A(sQ);        // Q's big parts
  Tensor tSrQs = thr_sq.partition_fragment_A(sQ);       // Q's small parts (kQSmallInRegisters)
  const Tensor tScS = thr_s.partition_C(make_identity_tensor(tile_s));  // (query, key) of each score
  const int wg = ctid / Traits::kWarpgroupThreads;
  RingPosition<1> q_at;
  RingPosition<Traits::kStages> k_at, v_at;

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
    s.q_barriers.wait(q_at);
    split_q_fragment<Traits::kQSmallInRegisters>(tSsQ, tSrQ, tSrQs);
    if constexpr (!Traits::kQSmallInRegisters) {
      cutlass::arch::fence_view_async_shared();  // the small parts, before the tensor cores read them
      cutlass::arch::NamedBarrier::sync(Traits::kWarpgroupThreads, kWarpgroupBarrier + wg);
    }

    const auto key_tile = [&](int n, auto kind) __attribute__((always_inline)) {
      constexpr bool kMasked = decltype(kind)::value == KeyTile::masked;
      const Tensor sK = cute::make_tensor(make_smem_ptr(s.k[k_at.stage]), typename Traits::SmemLayoutK{});
      const Tensor sKs = cute::make_tensor(make_smem_ptr(s.k_small[k_at.stage]), typename Traits::SmemLayoutK{});
      const Tensor tSrK = thr_s.partition_fragment_B(sK);
      const Tensor tSrKs = thr_s.partition_fragment_B(sKs);
      const Tensor tSqK = thr_sq.partition_fragment_B(sK);
      const Tensor tSqKs = thr_sq.partition_fragment_B(sKs);
      // Sum i of S: head-dim k-blocks [i * kScoreSumKBlocks, ...) into `sum`, the small products
      // of each k-block first (tf32x3.hpp's gemm_tf32x3 order).
      const auto issue_sum = [&](int i, auto& sum) __attribute__((always_inline)) {
        warpgroup_fence_operand(sum);
        warpgroup_arrive();
        mma_s.accumulate_ = GMMA::ScaleOut::Zero;  // the first product of the sum overwrites it
        mma_sq.accumulate_ = GMMA::ScaleOut::Zero;
        CUTE_UNROLL
        for (int g = 0; g < Traits::kScoreSumKBlocks; ++g) {
          const int k = i * Traits::kScoreSumKBlocks + g;
          if constexpr (Traits::kQSmallInRegisters) {
            cute::gemm(mma_sq, tSrQs(_, _, k), tSqK(_, _, k), sum);
          } else {
            cute::gemm(mma_s, tSdQs(_, _, k), tSrK(_, _, k), sum);
            mma_s.accumulate_ = GMMA::ScaleOut::One;
          }
          mma_sq.accumulate_ = GMMA::ScaleOut::One;
          cute::gemm(mma_sq, tSrQ(_, _, k), tSqKs(_, _, k), sum);
          cute::gemm(mma_sq, tSrQ(_, _, k), tSqK(_, _, k), sum);
        }
        warpgroup_commit_batch();
      };
      Tensor acc_s = partition_fragment_C(mma_s, tile_s);
      clear(acc_s);
      // Two sums in flight: sum i + 1 runs on the tensor cores while sum i is added.
      Tensor sum0 = partition_fragment_C(mma_s, tile_s);
      Tensor sum1 = partition_fragment_C(mma_s, tile_s);
      s.k_split.wait(k_at);
      warpgroup_fence_operand(tSrQ);
      warpgroup_fence_operand(tSrQs);
      issue_sum(0, sum0);
      if constexpr (Traits::kScoreSums > 1) issue_sum(1, sum1);
      CUTE_UNROLL
      for (int i = 0; i < Traits::kScoreSums; ++i) {
        auto& sum = i % 2 == 0 ? sum0 : sum1;
        if (i + 1 < Traits::kScoreSums) warpgroup_wait<1>();
        else warpgroup_wait<0>();
        warpgroup_fence_operand(sum);
        CUTE_UNROLL
        for (int e = 0; e < size(acc_s); ++e) acc_s(e) += sum(e);
        if (i + 2 < Traits::kScoreSums) issue_sum(i + 2, sum);
      }
      warpgroup_fence_operand(tSrQ);
      warpgroup_fence_operand(tSrQs);
      s.k_barriers.release(k_at);
      k_at.advance();

      const TileOrigin origin{work.b, work.h, m0, std::int64_t(n) * kBlockN, seq.q_len, seq.k_len};
      transform_scores_rows<float, BiasCode::none>(p, rule, origin, kMasked, acc_s, tScS);
      Tensor acc_s_rc = rowcol(acc_s);
      softmax.update(acc_s_rc, acc_o_rc, kLog2e);

      Tensor p_big = cute::make_tensor<Operand>(acc_s.layout());
      Tensor p_small = cute::make_tensor<Operand>(acc_s.layout());
      split_tf32(acc_s, p_big, p_small);
      const Tensor tOrPb = cute::make_tensor(p_big.data(), gmma_tf32_acc_as_a_operand(acc_s.layout()));
      const Tensor tOrPs = cute::make_tensor(p_small.data(), gmma_tf32_acc_as_a_operand(acc_s.layout()));
      const Tensor sVt = cute::make_tensor(make_smem_ptr(s.v[v_at.stage]), typename Traits::SmemLayoutVt{});
      const Tensor sVts = cute::make_tensor(make_smem_ptr(s.v_small[v_at.stage]), typename Traits::SmemLayoutVt{});
      s.v_split.wait(v_at);
      // This tile's P V, kPvCols output columns at a time, each in a fresh accumulator added to O.
      CUTE_UNROLL
      for (int c = 0; c < Traits::kPvChunks; ++c) {
        const auto chunk = make_shape(Int<kPvCols>{}, Int<kBlockN>{});
        const Tensor tOrV = thr_pv.partition_fragment_B(local_tile(sVt, chunk, make_coord(c, 0)));
        const Tensor tOrVs = thr_pv.partition_fragment_B(local_tile(sVts, chunk, make_coord(c, 0)));
        Tensor acc_pv = partition_fragment_C(mma_pv, tile_pv);
        warpgroup_fence_operand(p_big);
        warpgroup_fence_operand(p_small);
        warpgroup_fence_operand(acc_pv);
        warpgroup_arrive();
        mma_pv.accumulate_ = GMMA::ScaleOut::Zero;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tOrPb); ++k) {
          cute::gemm(mma_pv, tOrPs(_, _, k), tOrV(_, _, k), acc_pv);
          mma_pv.accumulate_ = GMMA::ScaleOut::One;
          cute::gemm(mma_pv, tOrPb(_, _, k), tOrVs(_, _, k), acc_pv);
          cute::gemm(mma_pv, tOrPb(_, _, k), tOrV(_, _, k), acc_pv);
        }
        warpgroup_commit_batch();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_pv);
        warpgroup_fence_operand(p_big);
        warpgroup_fence_operand(p_small);
        // The chunk's columns are values [c size(acc_pv), (c + 1) size(acc_pv)) of O's fragment.
        CUTE_UNROLL
        for (int e = 0; e < size(acc_pv); ++e) acc_o(c * size(acc_pv) + e) += acc_pv(e);
      }
      s.v_barriers.release(v_at);
      v_at.advance();
    };
    // Last to first, as the producer loads them: the masked tiles at the right edge of the window
    // (and past the keys), the unmasked ones, then the masked ones at its left edge.
    int n = t.last;
    CUTE_NO_UNROLL
    for (; n >= t.first && n > t.full_hi; --n) key_tile(n, KeyTileKind<KeyTile::masked>{});
    CUTE_NO_UNROLL
    for (; n >= t.first && n >= t.full_lo; --n) key_tile(n, KeyTileKind<KeyTile::unmasked>{});
    CUTE_NO_UNROLL
    for (; n >= t.first; --n) key_tile(n, KeyTileKind<KeyTile::masked>{});

    write_output<Traits>(p, nullptr, s, q_at.stage, seq, work.h, m0, rows, acc_o, softmax, 1.0f, ctid);
    s.q_barriers.release(q_at);  // after the epilogue's use of its space
    q_at.advance();
  });
}

}  // namespace memattn::cuda::sm90
