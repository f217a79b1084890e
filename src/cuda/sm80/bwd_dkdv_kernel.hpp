// The sm80 backward's dK/dV kernel (register accumulators, head dims up to 256).
//
// One CTA owns a tile of keys of one (sequence, kv head) and walks, for every query head of the
// kv head's group, the query tiles that can see those keys. It computes the scores transposed,
// S^T = K Q^T and dP^T = V dO^T, so that the results are already the A operands of
// dV += (P Z)^T dO and dK += dS^T Q (with Q and dO read transposed by ldmatrix.trans): the
// forward's building blocks with the roles of queries and keys swapped. The traits are the
// forward's with kBlockM = keys per CTA and kBlockN = queries per step. A CTA owns its dK and dV
// rows and sums the group's heads itself: no atomics, deterministic.
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/fwd_traits.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

// Shared memory of the dK/dV kernel: the CTA's K and V tiles (the traits' kBlockM rows), a step's
// Q and dO tiles (kBlockN rows) and its queries' LSE (base 2) and delta, ...
template <class Traits>
struct DkdvTiles {
  using Element = typename Traits::Element;
  Element k[Traits::kSmemElemsQ];
  Element v[Traits::kSmemElemsQ];
  Element q[Traits::kSmemElemsKV];
  Element dout[Traits::kSmemElemsKV];
  float lse2[Traits::kBlockN];
  float delta[Traits::kBlockN];
};

// ... then, in the kBiasTile rows, the bias of the (query tile, key tile), queries as rows.
template <class Traits, unsigned kFeatures, bool = tiles_bias(kFeatures)>
struct DkdvSharedStorage : DkdvTiles<Traits> {
  static constexpr bool kTileBias = false;
  using BiasTile = BiasTileShape<Traits::kBlockN, Traits::kBlockM>;
};
template <class Traits, unsigned kFeatures>
struct DkdvSharedStorage<Traits, kFeatures, true> : DkdvTiles<Traits> {
  static constexpr bool kTileBias = true;
  using BiasTile = BiasTileShape<Traits::kBlockN, Traits::kBlockM>;
  char bias[BiasTile::kBytes];
};

template <class Traits, unsigned kFeatures>
__device__ void dkdv_tile(const BwdParams& p, const KvWorkItem& work, char* smem) {
  using Element = typename Traits::Element;
  constexpr int kKeys = Traits::kBlockM, kQueries = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const int tid = threadIdx.x;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t n0 = std::int64_t(work.n_block) * kKeys;
  if (n0 >= seq.k_len) return;
  const int keys = int(min(std::int64_t(kKeys), seq.k_len - n0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t query_begin = 0, query_end = 0;
  rule.query_range(n0, n0 + keys, seq.q_len, &query_begin, &query_end);

  const auto tile_kv = make_shape(Int<kKeys>{}, Int<kHeadDim>{});
  const auto tile_q = make_shape(Int<kQueries>{}, Int<kHeadDim>{});
  const std::int64_t k_row = seq.k_begin + n0;
  const Element* k_ptr = k_at<Element>(p, seq.batch, k_row, work.hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, k_row, work.hk);

  using Storage = DkdvSharedStorage<Traits, kFeatures>;
  auto& storage = *reinterpret_cast<Storage*>(smem);
  Element* smem_k = storage.k;
  Element* smem_v = storage.v;
  Element* smem_q = storage.q;
  Element* smem_do = storage.dout;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;
  char* smem_bias = bias_tile_of(storage);
  const bool tile_bias = Storage::kTileBias && p.bias != nullptr;
  Tensor sK = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutQ{});
  Tensor sV = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutQ{});
  Tensor sQ = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutKV{});
  Tensor sQt = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutVt{});
  Tensor sdO = cute::make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutKV{});
  Tensor sdOt = cute::make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutVt{});

  typename Traits::LoadCopy load;
  auto load_thr = load.get_thread_slice(tid);
  Tensor tKc = load_thr.partition_S(make_identity_tensor(tile_kv));
  Tensor tQc = load_thr.partition_S(make_identity_tensor(tile_q));
  copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(k_ptr), tile_kv, make_stride(p.k_row_stride, _1{}))),
                  load_thr.partition_D(sK), tKc, keys, p.head_dim);
  copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(v_ptr), tile_kv, make_stride(p.v_row_stride, _1{}))),
                  load_thr.partition_D(sV), tKc, keys, p.head_dim_v);
  cp_async_fence();

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rK = thr_mma.partition_fragment_A(sK);
  Tensor rV = thr_mma.partition_fragment_A(sV);
  Tensor rQ = thr_mma.partition_fragment_B(sQ);
  Tensor rdO = thr_mma.partition_fragment_B(sdO);
  Tensor rQt = thr_mma.partition_fragment_B(sQt);
  Tensor rdOt = thr_mma.partition_fragment_B(sdOt);
  auto a_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
  auto b_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
  auto bt_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
  auto a_thr = a_copy.get_thread_slice(tid);
  auto b_thr = b_copy.get_thread_slice(tid);
  auto bt_thr = bt_copy.get_thread_slice(tid);
  Tensor sK_s2r = a_thr.partition_S(sK);
  Tensor rK_view = a_thr.retile_D(rK);
  Tensor sV_s2r = a_thr.partition_S(sV);
  Tensor rV_view = a_thr.retile_D(rV);
  Tensor sQ_s2r = b_thr.partition_S(sQ);
  Tensor rQ_view = b_thr.retile_D(rQ);
  Tensor sdO_s2r = b_thr.partition_S(sdO);
  Tensor rdO_view = b_thr.retile_D(rdO);
  Tensor sQt_s2r = bt_thr.partition_S(sQt);
  Tensor rQt_view = bt_thr.retile_D(rQt);
  Tensor sdOt_s2r = bt_thr.partition_S(sdOt);
  Tensor rdOt_view = bt_thr.retile_D(rdOt);

  // Coordinates (key, query) of the transposed score tiles.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kKeys>{}, Int<kQueries>{})));
  Tensor acc_dk = partition_fragment_C(mma, tile_kv);
  Tensor acc_dv = partition_fragment_C(mma, tile_kv);
  clear(acc_dk);
  clear(acc_dv);

  for (int g = 0; g < p.group; ++g) {
    const int h = work.hk * p.group + g;
    const std::int64_t q_row0 = seq.q_begin;
    for (std::int64_t m0 = query_begin; m0 < query_end; m0 += kQueries) {
      const int rows = int(min(std::int64_t(kQueries), seq.q_len - m0));
      const Element* q_ptr = q_at<Element>(p, seq.batch, q_row0 + m0, h);
      const Element* do_ptr = do_at<Element>(p, seq.batch, q_row0 + m0, h);
      __syncthreads();  // the previous query tile's reads are done
      copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(q_ptr), tile_q, make_stride(p.q_row_stride, _1{}))),
                      load_thr.partition_D(sQ), tQc, rows, p.head_dim);
      copy_predicated(load,
                      load_thr.partition_S(cute::make_tensor(make_gmem_ptr(do_ptr), tile_q, make_stride(p.do_row_stride, _1{}))),
                      load_thr.partition_D(sdO), tQc, rows, p.head_dim_v);
      if (tile_bias)
        load_bias_tile_unrolled<kQueries, kKeys, Traits::kThreads>(p, work.b, h, m0, n0, seq.q_len, seq.k_len,
                                                                   smem_bias);
      cp_async_fence();
      load_row_stats<Element, kQueries>(p, seq, h, m0, rows, lse2, delta);
      cp_async_wait<0>();
      __syncthreads();

      Tensor acc_st = partition_fragment_C(mma, make_shape(Int<kKeys>{}, Int<kQueries>{}));
      Tensor acc_dpt = partition_fragment_C(mma, make_shape(Int<kKeys>{}, Int<kQueries>{}));
      clear(acc_st);
      clear(acc_dpt);
      CUTE_UNROLL
      for (int kk = 0; kk < size<2>(rK); ++kk) {
        copy(a_copy, sK_s2r(_, _, kk), rK_view(_, _, kk));
        copy(b_copy, sQ_s2r(_, _, kk), rQ_view(_, _, kk));
        gemm(mma, rK(_, _, kk), rQ(_, _, kk), acc_st);
        copy(a_copy, sV_s2r(_, _, kk), rV_view(_, _, kk));
        copy(b_copy, sdO_s2r(_, _, kk), rdO_view(_, _, kk));
        gemm(mma, rV(_, _, kk), rdO(_, _, kk), acc_dpt);
      }
      const TileOrigin origin{work.b, h, m0, n0, seq.q_len, seq.k_len};
      const bool masked = n0 + kKeys > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kKeys);
      const SharedBias shared_bias{tile_bias ? smem_bias : nullptr, Storage::BiasTile::kPitch};
      gradient_tile<Element, kFeatures, ScoreRows::keys, Dbias::skip>(p, rule, origin, masked, acc_st, acc_dpt, tScS,
                                                                      lse2, delta, shared_bias);

      // dV += (P Z)^T dO and dK += dS^T Q, the transposed tiles reused from registers.
      Tensor p_frag = convert_fragment<Element>(acc_st);
      Tensor ds_frag = convert_fragment<Element>(acc_dpt);
      Tensor rPt = cute::make_tensor(p_frag.data(), acc_as_a_operand(p_frag.layout()));
      Tensor rdSt = cute::make_tensor(ds_frag.data(), acc_as_a_operand(ds_frag.layout()));
      CUTE_UNROLL
      for (int kk = 0; kk < size<2>(rPt); ++kk) {
        copy(bt_copy, sdOt_s2r(_, _, kk), rdOt_view(_, _, kk));
        gemm(mma, rPt(_, _, kk), rdOt(_, _, kk), acc_dv);
        copy(bt_copy, sQt_s2r(_, _, kk), rQt_view(_, _, kk));
        gemm(mma, rdSt(_, _, kk), rQt(_, _, kk), acc_dk);
      }
    }
  }
  cp_async_wait<0>();  // K and V (when no query tile was walked)

  CUTE_UNROLL
  for (int e = 0; e < size(acc_dk); ++e) acc_dk(e) *= p.scale;
  Element* dk_ptr = dk_at<Element>(p, seq.batch, k_row, work.hk);
  Element* dv_ptr = dv_at<Element>(p, seq.batch, k_row, work.hk);
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma, convert_fragment<Element>(acc_dk), smem_k,
      cute::make_tensor(make_gmem_ptr(dk_ptr), tile_kv, make_stride(p.dk_row_stride, _1{})), keys, p.head_dim);
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma, convert_fragment<Element>(acc_dv), smem_v,
      cute::make_tensor(make_gmem_ptr(dv_ptr), tile_kv, make_stride(p.dv_row_stride, _1{})), keys, p.head_dim_v);
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dkdv_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  for (std::int64_t index = blockIdx.x; index < p.num_kv_blocks; index += gridDim.x) {
    dkdv_tile<Traits, kFeatures>(p, decode_kv_work(p, index), smem);
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
