// The sm80 forward kernel with the output accumulator in registers (head dims up to 256).
//
// One CTA owns kBlockM query rows of one (sequence, head). It walks the key tiles the mask leaves
// visible, last to first: S = Q K^T (ldmatrix + mma.sync), scores scaled to base 2, bias added,
// boundary tiles masked, online softmax, dropout, then O += P V with P reused from the
// accumulator registers as the A operand. K and V have one shared-memory buffer each; the load of
// V(n) overlaps Q K(n)^T and the load of K(n-1) overlaps softmax and P V(n).
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/fwd_params.hpp"
#include "cuda/sm80/epilogue.hpp"
#include "cuda/sm80/fwd_common.hpp"
#include "cuda/sm80/fragments.hpp"
#include "cuda/sm80/fwd_traits.hpp"
#include "cuda/sm80/score_mods.hpp"
#include "cuda/sm80/softmax.hpp"
#include "cuda/tile_scheduler.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

template <class Traits, unsigned kFeatures>
__device__ void forward_tile(const FwdParams& p, const WorkItem& work, char* smem) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const int tid = threadIdx.x;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  const detail::MaskRule rule =
      detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  if (key_begin >= key_end) {
    write_empty_rows<Traits>(p, seq, work.h, m0, rows);
    return;
  }
  const int hk = work.h / p.group;
  const int n_first = int(key_begin / kBlockN), n_last = int((key_end - 1) / kBlockN);

  // Global tiles. K and V start at the sequence's first key; a tile n is offset by n * kBlockN rows.
  const Element* q_ptr = element_ptr<Element>(
      p.q, seq.batch * p.q_batch_stride + (seq.q_begin + m0) * p.q_row_stride + work.h * p.q_head_stride);
  const Element* k_ptr =
      element_ptr<Element>(p.k, seq.batch * p.k_batch_stride + seq.k_begin * p.k_row_stride + hk * p.k_head_stride);
  const Element* v_ptr =
      element_ptr<Element>(p.v, seq.batch * p.v_batch_stride + seq.k_begin * p.v_row_stride + hk * p.v_head_stride);
  const auto tile_q = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  const auto tile_kv = make_shape(Int<kBlockN>{}, Int<kHeadDim>{});
  Tensor gQ = cute::make_tensor(make_gmem_ptr(q_ptr), tile_q, make_stride(p.q_row_stride, _1{}));
  const auto k_tile = [&](int n) {
    return cute::make_tensor(make_gmem_ptr(k_ptr + std::int64_t(n) * kBlockN * p.k_row_stride), tile_kv,
                       make_stride(p.k_row_stride, _1{}));
  };
  const auto v_tile = [&](int n) {
    return cute::make_tensor(make_gmem_ptr(v_ptr + std::int64_t(n) * kBlockN * p.v_row_stride), tile_kv,
                       make_stride(p.v_row_stride, _1{}));
  };
  const auto keys_in = [&](int n) { return int(min(std::int64_t(kBlockN), seq.k_len - std::int64_t(n) * kBlockN)); };

  // Shared memory.
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Element* smem_k = smem_q + Traits::kSmemElemsQ;
  Element* smem_v = smem_k + Traits::kSmemElemsKV;
  Tensor sQ = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sK = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
  Tensor sV = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});
  Tensor sVt = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutVt{});

  // Global -> shared copies, predicated on rows and head-dim columns.
  typename Traits::LoadCopy load;
  auto load_thr = load.get_thread_slice(tid);
  Tensor tQg = load_thr.partition_S(gQ);
  Tensor tQs = load_thr.partition_D(sQ);
  Tensor tQc = load_thr.partition_S(make_identity_tensor(tile_q));
  Tensor tKs = load_thr.partition_D(sK);
  Tensor tVs = load_thr.partition_D(sV);
  Tensor tKVc = load_thr.partition_S(make_identity_tensor(tile_kv));

  copy_predicated(load, tQg, tQs, tQc, rows, p.head_dim);
  copy_predicated(load, load_thr.partition_S(k_tile(n_last)), tKs, tKVc, keys_in(n_last), p.head_dim);
  cp_async_fence();

  // MMA partitions and shared -> register copies.
  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);   // (MMA, MMA_M, MMA_K)
  Tensor tSrK = thr_mma.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K)
  Tensor tOrVt = thr_mma.partition_fragment_B(sVt);  // (MMA, MMA_D, MMA_N)
  Tensor acc_o = partition_fragment_C(mma, tile_q);  // (MMA, MMA_M, MMA_D), fp32
  clear(acc_o);
  auto q_s2r_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
  auto k_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
  auto v_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
  auto q_s2r = q_s2r_copy.get_thread_slice(tid);
  auto k_s2r = k_s2r_copy.get_thread_slice(tid);
  auto v_s2r = v_s2r_copy.get_thread_slice(tid);
  Tensor tSsQ = q_s2r.partition_S(sQ);
  Tensor tSrQ_view = q_s2r.retile_D(tSrQ);
  Tensor tSsK = k_s2r.partition_S(sK);
  Tensor tSrK_view = k_s2r.retile_D(tSrK);
  Tensor tOsVt = v_s2r.partition_S(sVt);
  Tensor tOrVt_view = v_s2r.retile_D(tOrVt);

  // Tile coordinates of every score element, for mask, bias and dropout.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{})));
  Tensor acc_o_rc = rowcol(acc_o);
  OnlineSoftmax<decltype(size<0>(acc_o_rc))::value> softmax;
  softmax.init();
  const std::int64_t m_end = m0 + rows;

  for (int n = n_last; n >= n_first; --n) {
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    Tensor acc_s = partition_fragment_C(mma, make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
    clear(acc_s);
    cp_async_wait<0>();
    __syncthreads();  // K(n) landed; everyone is done with V(n + 1)
    copy_predicated(load, load_thr.partition_S(v_tile(n)), tVs, tKVc, keys_in(n), p.head_dim_v);
    cp_async_fence();

    CUTE_UNROLL
    for (int kk = 0; kk < size<2>(tSrQ); ++kk) {
      copy(q_s2r_copy, tSsQ(_, _, kk), tSrQ_view(_, _, kk));
      copy(k_s2r_copy, tSsK(_, _, kk), tSrK_view(_, _, kk));
      gemm(mma, tSrQ(_, _, kk), tSrK(_, _, kk), acc_s);
    }
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kBlockN > seq.k_len || !rule.tile_visible(m0, m_end, n0, n0 + kBlockN);
    transform_scores<Element, (kFeatures & kBias) != 0>(p, rule, origin, masked, acc_s, tScS);

    cp_async_wait<0>();
    __syncthreads();  // V(n) landed; everyone is done with K(n)
    if (n > n_first) {
      copy_predicated(load, load_thr.partition_S(k_tile(n - 1)), tKs, tKVc, keys_in(n - 1), p.head_dim);
      cp_async_fence();
    }

    Tensor acc_s_rc = rowcol(acc_s);
    softmax.update(acc_s_rc, acc_o_rc);
    if constexpr ((kFeatures & kDropout) != 0)
      if (p.dropout) apply_dropout(p, origin, acc_s, tScS);
    Tensor p_frag = convert_fragment<Element>(acc_s);
    Tensor tOrP = cute::make_tensor(p_frag.data(), acc_as_a_operand(p_frag.layout()));
    CUTE_UNROLL
    for (int kk = 0; kk < size<2>(tOrP); ++kk) {
      copy(v_s2r_copy, tOsVt(_, _, kk), tOrVt_view(_, _, kk));
      gemm(mma, tOrP(_, _, kk), tOrVt(_, _, kk), acc_o);
    }
  }

  // Epilogue: normalise, LSE, then O through shared memory (Q's space) to global memory.
  float lse[decltype(size<0>(acc_o_rc))::value];
  softmax.finalize(acc_o_rc, (kFeatures & kDropout) && p.dropout ? p.dropout_scale : 1.0f, lse);
  write_lse(p, seq, work.h, m0, rows, lse, rowcol(thr_mma.partition_C(make_identity_tensor(tile_q))));
  Element* o_ptr = static_cast<Element*>(p.out) + seq.batch * p.o_batch_stride + (seq.q_begin + m0) * p.o_row_stride +
                   work.h * p.o_head_stride;
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma, convert_fragment<Element>(acc_o), smem_q,
      cute::make_tensor(make_gmem_ptr(o_ptr), tile_q, make_stride(p.o_row_stride, _1{})), rows, p.head_dim_v);
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) forward_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) char smem[];
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    forward_tile<Traits, kFeatures>(p, decode_work(p, index), smem);
    __syncthreads();  // shared memory is reused by the next work item
  }
}

}  // namespace memattn::cuda::sm80
