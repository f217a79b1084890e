// The sm80 forward kernel for head dims beyond what registers hold (any D, Dv up to 65536).
//
// The head dims are walked in chunks of 64. For each key tile: S = sum over chunks of
// Q_c K_c^T, softmax, then for each value chunk the output accumulator chunk is read from a
// global fp32 workspace, rescaled, O_c += P V_c, and written back; on the last key tile the chunk
// is normalised and stored as the output instead. The workspace keeps every chunk in MMA-fragment
// order, float4 by float4 and thread by thread, so each access is a coalesced 16-byte load or
// store with no shuffle. All tiles (Q and K chunks, V chunks) flow through one kStages-deep
// cp.async pipeline of shared-memory stages. The fp32 rows (Element float) run both GEMMs as
// 3xTF32 (tf32x3.hpp); P is split once per key tile, for every value chunk.
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/fwd_traits.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

template <class Element, int kBlockM, int kBlockN, int kWarps, int kStages_, Loads kLoads>
struct GlobalFwdTraits : FwdTraits<Element, 64, kBlockM, kBlockN, kWarps, kLoads> {
  using Base = FwdTraits<Element, 64, kBlockM, kBlockN, kWarps, kLoads>;
  static constexpr int kChunk = 64;  // head-dim columns per step
  static constexpr int kStages = kStages_;
  static_assert(kStages >= 2);
  // A stage holds a Q chunk and a K chunk, or a V chunk (in the K chunk's place).
  static constexpr int kStageElems = Base::kSmemElemsQ + Base::kSmemElemsKV;
  static constexpr int kFragFloats = kBlockM * kChunk / Base::kThreads;  // accumulator chunk per thread
  static_assert(kFragFloats % 4 == 0);
};

// The global-accumulator forward's shared memory: the pipeline's kStages stages, then the output
// chunk's tile (output chunks are staged in their own tile, as the pipeline keeps loading
// meanwhile).
template <class Traits>
struct GlobalFwdSharedStorage {
  using Element = typename Traits::Element;
  Element stages[Traits::kStages * Traits::kStageElems];
  Element out[Traits::kSmemElemsQ];
};

// One accumulator chunk in the workspace: float4 v of thread t at (v * kThreads + t) * 4.
template <class Traits, class Frag>
__device__ __forceinline__ void load_accumulator(const float* chunk, Frag& acc) {
  CUTE_UNROLL
  for (int v = 0; v < Traits::kFragFloats / 4; ++v) {
    const float4 x = reinterpret_cast<const float4*>(chunk)[v * Traits::kThreads + threadIdx.x];
    acc(4 * v) = x.x, acc(4 * v + 1) = x.y, acc(4 * v + 2) = x.z, acc(4 * v + 3) = x.w;
  }
}

template <class Traits, class Frag>
__device__ __forceinline__ void store_accumulator(float* chunk, const Frag& acc) {
  CUTE_UNROLL
  for (int v = 0; v < Traits::kFragFloats / 4; ++v)
    reinterpret_cast<float4*>(chunk)[v * Traits::kThreads + threadIdx.x] =
        make_float4(acc(4 * v), acc(4 * v + 1), acc(4 * v + 2), acc(4 * v + 3));
}

template <class Traits, unsigned kFeatures>
__device__ void forward_tile_global(const FwdParams& p, const WorkItem& work, char* smem, float* slot) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kChunk = Traits::kChunk;
  constexpr int kStages = Traits::kStages;
  const int tid = threadIdx.x;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  if (key_begin >= key_end) {
    write_empty_rows<Traits>(p, seq, work.h, m0, rows);
    return;
  }
  const int hk = work.h / p.group;
  const int n_first = int(key_begin / kBlockN), n_last = int((key_end - 1) / kBlockN);
  const int q_chunks = (p.head_dim + kChunk - 1) / kChunk, v_chunks = (p.head_dim_v + kChunk - 1) / kChunk;
  const int jobs_per_tile = q_chunks + v_chunks;
  const int jobs = (n_last - n_first + 1) * jobs_per_tile;

  const Element* q_ptr = q_at<Element>(p, seq.batch, seq.q_begin + m0, work.h);
  const Element* k_ptr = k_at<Element>(p, seq.batch, seq.k_begin, hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, seq.k_begin, hk);
  const auto tile_a = make_shape(Int<kBlockM>{}, Int<kChunk>{});
  const auto tile_b = make_shape(Int<kBlockN>{}, Int<kChunk>{});
  auto& storage = *reinterpret_cast<GlobalFwdSharedStorage<Traits>*>(smem);
  Element* stages = storage.stages;
  Element* smem_out = storage.out;
  const auto stage_a = [&](int s) {
    return cute::make_tensor(make_smem_ptr(stages + s * Traits::kStageElems), typename Traits::SmemLayoutQ{});
  };
  const auto stage_b = [&](int s) {
    return cute::make_tensor(make_smem_ptr(stages + s * Traits::kStageElems + Traits::kSmemElemsQ),
                             typename Traits::SmemLayoutKV{});
  };
  const auto stage_bt = [&](int s) {
    return cute::make_tensor(make_smem_ptr(stages + s * Traits::kStageElems + Traits::kSmemElemsQ),
                             typename Traits::SmemLayoutVt{});
  };

  typename Traits::LoadCopy load;
  auto load_thr = load.get_thread_slice(tid);
  Tensor tAc = load_thr.partition_S(make_identity_tensor(tile_a));
  Tensor tBc = load_thr.partition_S(make_identity_tensor(tile_b));
  // Job j of the pipeline: chunk r = j % jobs_per_tile of key tile n_last - j / jobs_per_tile;
  // r < q_chunks loads Q and K chunk r, otherwise V chunk r - q_chunks.
  const auto issue = [&](int job) {
    if (job < jobs) {
      const int n = n_last - job / jobs_per_tile, r = job % jobs_per_tile, s = job % kStages;
      const std::int64_t row0 = std::int64_t(n) * kBlockN;
      const int keys = int(min(std::int64_t(kBlockN), seq.k_len - row0));
      if (r < q_chunks) {
        const int c0 = r * kChunk;
        Tensor gA = cute::make_tensor(make_gmem_ptr(q_ptr + c0), tile_a, make_stride(p.q_row_stride, _1{}));
        Tensor gB = cute::make_tensor(make_gmem_ptr(k_ptr + row0 * p.k_row_stride + c0), tile_b,
                                      make_stride(p.k_row_stride, _1{}));
        copy_predicated(load, load_thr.partition_S(gA), load_thr.partition_D(stage_a(s)), tAc, rows, p.head_dim - c0);
        copy_predicated(load, load_thr.partition_S(gB), load_thr.partition_D(stage_b(s)), tBc, keys, p.head_dim - c0);
      } else {
        const int c0 = (r - q_chunks) * kChunk;
        Tensor gB = cute::make_tensor(make_gmem_ptr(v_ptr + row0 * p.v_row_stride + c0), tile_b,
                                      make_stride(p.v_row_stride, _1{}));
        copy_predicated(load, load_thr.partition_S(gB), load_thr.partition_D(stage_b(s)), tBc, keys,
                        p.head_dim_v - c0);
      }
    }
    cp_async_fence();  // an empty group past the end keeps the wait counts uniform
  };
  CUTE_UNROLL
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  auto a_s2r_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
  auto b_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
  auto bt_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
  auto a_s2r = a_s2r_copy.get_thread_slice(tid);
  auto b_s2r = b_s2r_copy.get_thread_slice(tid);
  auto bt_s2r = bt_s2r_copy.get_thread_slice(tid);
  Tensor rA = operand_fragment<Traits>(thr_mma.partition_fragment_A(stage_a(0)));
  Tensor rB = operand_fragment<Traits>(thr_mma.partition_fragment_B(stage_b(0)));
  Tensor rBt = operand_fragment<Traits>(thr_mma.partition_fragment_B(stage_bt(0)));
  Tensor rA_view = a_s2r.retile_D(rA);
  Tensor rB_view = b_s2r.retile_D(rB);
  Tensor rBt_view = bt_s2r.retile_D(rBt);

  Tensor tScS = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{})));
  Tensor acc_o = partition_fragment_C(mma, tile_a);  // one output chunk
  Tensor acc_o_rc = rowcol(acc_o);
  constexpr int kRows = decltype(size<0>(acc_o_rc))::value;
  OnlineSoftmax<kRows> softmax;
  softmax.init();
  float rescale[kRows], norm[kRows], lse[kRows];
  const std::int64_t m_end = m0 + rows;
  const float out_scale = (kFeatures & kDropout) && p.dropout ? p.dropout_scale : 1.0f;
  Element* o_ptr = o_at<Element>(p, seq.batch, seq.q_begin + m0, work.h);

  int job = 0;
  for (int n = n_last; n >= n_first; --n) {
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    Tensor acc_s = partition_fragment_C(mma, make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
    clear(acc_s);
    for (int c = 0; c < q_chunks; ++c, ++job) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // job's stage landed; everyone is done with the stage about to be refilled
      issue(job + kStages - 1);
      const int s = job % kStages;
      Tensor sA = a_s2r.partition_S(stage_a(s));
      Tensor sB = b_s2r.partition_S(stage_b(s));
      const auto load_qk = [&](int kk) {
        copy(a_s2r_copy, sA(_, _, kk), rA_view(_, _, kk));
        copy(b_s2r_copy, sB(_, _, kk), rB_view(_, _, kk));
      };
      gemm_loaded<Traits>(mma, rA, rB, load_qk, acc_s);
    }
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kBlockN > seq.k_len || !rule.tile_visible(m0, m_end, n0, n0 + kBlockN);
    constexpr bool kNatural = kNaturalLse<Element>;
    transform_scores<Element, bias_code(kFeatures)>(p, rule, origin, masked, acc_s, tScS, {},
                                                    kNatural ? natural_units(p) : log2_units(p));
    Tensor acc_s_rc = rowcol(acc_s);
    softmax.update(acc_s_rc, rescale, kNatural ? kLog2e : 1.0f);
    if constexpr ((kFeatures & kDropout) != 0)
      if (p.dropout) apply_dropout(p, origin, acc_s, tScS);
    Tensor p_frag = convert_fragment<Element>(acc_s);  // fp32: kept as is
    Tensor tOrP = cute::make_tensor(p_frag.data(), p_as_a_operand<Traits>(p_frag.layout()));
    [[maybe_unused]] const auto p_split = [&] {
      if constexpr (Traits::kTf32x3) return SplitP(tOrP);
      else return 0;
    }();
    const bool first = n == n_last, last = n == n_first;
    if (last) {
      if constexpr (kNatural) softmax.final_factors_natural(out_scale, norm, lse);
      else softmax.final_factors(out_scale, norm, lse);
    }

    for (int c = 0; c < v_chunks; ++c, ++job) {
      float* acc_chunk = slot + std::int64_t(c) * kBlockM * kChunk;
      if (first) {
        clear(acc_o);
      } else {
        load_accumulator<Traits>(acc_chunk, acc_o);
        softmax.scale_rows(acc_o_rc, rescale);
      }
      cp_async_wait<kStages - 2>();
      __syncthreads();
      issue(job + kStages - 1);
      if constexpr (Traits::kTf32x3) {
        gemm_tf32x3_columns(mma, p_split, thr_mma.partition_B(stage_bt(job % kStages)), acc_o);
      } else {
        Tensor sBt = bt_s2r.partition_S(stage_bt(job % kStages));
        CUTE_UNROLL
        for (int kk = 0; kk < size<2>(tOrP); ++kk) {
          copy(bt_s2r_copy, sBt(_, _, kk), rBt_view(_, _, kk));
          gemm(mma, tOrP(_, _, kk), rBt(_, _, kk), acc_o);
        }
      }
      if (!last) {
        store_accumulator<Traits>(acc_chunk, acc_o);
      } else {
        softmax.scale_rows(acc_o_rc, norm);
        const int c0 = c * kChunk;
        store_tile<Traits, typename Traits::SmemLayoutQ>(
            mma, convert_fragment<Element>(acc_o), smem_out,
            cute::make_tensor(make_gmem_ptr(o_ptr + c0), tile_a, make_stride(p.o_row_stride, _1{})), rows,
            p.head_dim_v - c0);
      }
    }
  }
  cp_async_wait<0>();
  write_lse(p, seq, work.h, m0, rows, lse, rowcol(thr_mma.partition_C(make_identity_tensor(tile_a))));
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) forward_global_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) char smem[];
  // This CTA's slice of the workspace, reused by each work item it takes.
  float* slot = p.o_accum + std::int64_t(blockIdx.x) * p.o_accum_slot_elems;
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    forward_tile_global<Traits, kFeatures>(p, decode_work(p, index), smem, slot);
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
