// The sm80 backward's dQ kernel (register accumulators, head dims up to 256).
//
// One CTA owns kBlockM query rows of one (sequence, query head) and walks the key tiles they can
// see: S = Q K^T and dP = dO V^T (ldmatrix + mma.sync), P = exp(S - LSE) and dS = P (dP - delta)
// elementwise, then dQ += dS K with dS reused from the accumulator registers and K read
// transposed with ldmatrix.trans. Each dQ row is owned by one CTA, so no atomics are needed and
// the result is deterministic. This kernel also writes dbias (each element of a (sequence, head)
// is visited once here).
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

// Shared memory of the dQ kernel: the CTA's Q and dO tiles and their LSE (base 2) and delta, a
// step's K and V tiles, ...
template <class Traits>
struct DqTiles {
  using Element = typename Traits::Element;
  Element q[Traits::kSmemElemsQ];
  Element dout[Traits::kSmemElemsQ];
  Element k[Traits::kSmemElemsKV];
  Element v[Traits::kSmemElemsKV];
  float lse2[Traits::kBlockM];
  float delta[Traits::kBlockM];
};

// ... then, in the kBiasTile rows, the bias of the (query tile, key tile).
template <class Traits, unsigned kFeatures, bool = tiles_bias(kFeatures)>
struct DqSharedStorage : DqTiles<Traits> {
  static constexpr bool kTileBias = false;
  using BiasTile = BiasTileShape<Traits::kBlockM, Traits::kBlockN>;
};
template <class Traits, unsigned kFeatures>
struct DqSharedStorage<Traits, kFeatures, true> : DqTiles<Traits> {
  static constexpr bool kTileBias = true;
  using BiasTile = BiasTileShape<Traits::kBlockM, Traits::kBlockN>;
  char bias[BiasTile::kBytes];
};

template <class Traits, unsigned kFeatures>
__device__ void dq_tile(const BwdParams& p, const WorkItem& work, char* smem) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const int tid = threadIdx.x;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  const int hk = work.h / p.group;
  const int n_first = int(key_begin / kBlockN), n_last = key_begin < key_end ? int((key_end - 1) / kBlockN) : -1;

  const auto tile_q = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  const auto tile_kv = make_shape(Int<kBlockN>{}, Int<kHeadDim>{});
  const std::int64_t q_row = seq.q_begin + m0;
  const Element* q_ptr = q_at<Element>(p, seq.batch, q_row, work.h);
  const Element* do_ptr = do_at<Element>(p, seq.batch, q_row, work.h);
  const Element* k_ptr = k_at<Element>(p, seq.batch, seq.k_begin, hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, seq.k_begin, hk);

  using Storage = DqSharedStorage<Traits, kFeatures>;
  auto& storage = *reinterpret_cast<Storage*>(smem);
  Element* smem_q = storage.q;
  Element* smem_do = storage.dout;
  Element* smem_k = storage.k;
  Element* smem_v = storage.v;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;
  char* smem_bias = bias_tile_of(storage);
  const bool tile_bias = Storage::kTileBias && p.bias != nullptr;
  const bool stage_dbias = tile_bias && p.dbias_tile;
  Tensor sQ = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sdO = cute::make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQ{});
  Tensor sK = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
  Tensor sKt = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutVt{});
  Tensor sV = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});

  typename Traits::LoadCopy load;
  auto load_thr = load.get_thread_slice(tid);
  Tensor tQc = load_thr.partition_S(make_identity_tensor(tile_q));
  Tensor tKVc = load_thr.partition_S(make_identity_tensor(tile_kv));
  copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(q_ptr), tile_q, make_stride(p.q_row_stride, _1{}))),
                  load_thr.partition_D(sQ), tQc, rows, p.head_dim);
  copy_predicated(load,
                  load_thr.partition_S(cute::make_tensor(make_gmem_ptr(do_ptr), tile_q, make_stride(p.do_row_stride, _1{}))),
                  load_thr.partition_D(sdO), tQc, rows, p.head_dim_v);
  cp_async_fence();
  load_row_stats<Element, kBlockM>(p, seq, work.h, m0, rows, lse2, delta);

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rQ = thr_mma.partition_fragment_A(sQ);
  Tensor rdO = thr_mma.partition_fragment_A(sdO);
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rV = thr_mma.partition_fragment_B(sV);
  Tensor rKt = thr_mma.partition_fragment_B(sKt);
  auto a_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
  auto b_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
  auto bt_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
  auto a_thr = a_copy.get_thread_slice(tid);
  auto b_thr = b_copy.get_thread_slice(tid);
  auto bt_thr = bt_copy.get_thread_slice(tid);
  Tensor sQ_s2r = a_thr.partition_S(sQ);
  Tensor rQ_view = a_thr.retile_D(rQ);
  Tensor sdO_s2r = a_thr.partition_S(sdO);
  Tensor rdO_view = a_thr.retile_D(rdO);
  Tensor sK_s2r = b_thr.partition_S(sK);
  Tensor rK_view = b_thr.retile_D(rK);
  Tensor sV_s2r = b_thr.partition_S(sV);
  Tensor rV_view = b_thr.retile_D(rV);
  Tensor sKt_s2r = bt_thr.partition_S(sKt);
  Tensor rKt_view = bt_thr.retile_D(rKt);

  Tensor tScS = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{})));
  Tensor acc_dq = partition_fragment_C(mma, tile_q);
  clear(acc_dq);
  const std::int64_t m_end = m0 + rows;

  for (int n = n_first; n <= n_last; ++n) {
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    const int keys = int(min(std::int64_t(kBlockN), seq.k_len - n0));
    __syncthreads();  // the previous tile's K and V reads are done
    copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(k_ptr + n0 * p.k_row_stride), tile_kv,
                                                                  make_stride(p.k_row_stride, _1{}))),
                    load_thr.partition_D(sK), tKVc, keys, p.head_dim);
    copy_predicated(load, load_thr.partition_S(cute::make_tensor(make_gmem_ptr(v_ptr + n0 * p.v_row_stride), tile_kv,
                                                                  make_stride(p.v_row_stride, _1{}))),
                    load_thr.partition_D(sV), tKVc, keys, p.head_dim_v);
    if (tile_bias)
      load_bias_tile_unrolled<kBlockM, kBlockN, Traits::kThreads>(p, work.b, work.h, m0, n0, seq.q_len, seq.k_len,
                                                                  smem_bias);
    cp_async_fence();
    cp_async_wait<0>();
    __syncthreads();

    Tensor acc_s = partition_fragment_C(mma, make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
    Tensor acc_dp = partition_fragment_C(mma, make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
    clear(acc_s);
    clear(acc_dp);
    CUTE_UNROLL
    for (int kk = 0; kk < size<2>(rQ); ++kk) {
      copy(a_copy, sQ_s2r(_, _, kk), rQ_view(_, _, kk));
      copy(b_copy, sK_s2r(_, _, kk), rK_view(_, _, kk));
      gemm(mma, rQ(_, _, kk), rK(_, _, kk), acc_s);
      copy(a_copy, sdO_s2r(_, _, kk), rdO_view(_, _, kk));
      copy(b_copy, sV_s2r(_, _, kk), rV_view(_, _, kk));
      gemm(mma, rdO(_, _, kk), rV(_, _, kk), acc_dp);
    }
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kBlockN > seq.k_len || !rule.tile_visible(m0, m_end, n0, n0 + kBlockN);
    const SharedBias shared_bias{tile_bias ? smem_bias : nullptr, Storage::BiasTile::kPitch};
    gradient_tile<Element, kFeatures, ScoreRows::queries, Dbias::write>(p, rule, origin, masked, acc_s, acc_dp, tScS,
                                                                         lse2, delta, shared_bias, stage_dbias);

    // dQ += dS K.
    Tensor ds_frag = convert_fragment<Element>(acc_dp);
    if (stage_dbias) {
      // gradient_tile left dS in the bias tile; it leaves with 16-byte stores (the next tile's
      // first barrier keeps the next bias load from overwriting it early).
      __syncthreads();
      store_dbias_tile<kBlockM, kBlockN, Traits::kThreads>(p, work.b, work.h, m0, n0, seq.q_len, seq.k_len,
                                                          smem_bias);
    }
    Tensor rdS = cute::make_tensor(ds_frag.data(), acc_as_a_operand(ds_frag.layout()));
    CUTE_UNROLL
    for (int kk = 0; kk < size<2>(rdS); ++kk) {
      copy(bt_copy, sKt_s2r(_, _, kk), rKt_view(_, _, kk));
      gemm(mma, rdS(_, _, kk), rKt(_, _, kk), acc_dq);
    }
  }
  cp_async_wait<0>();  // Q and dO (when no key tile was walked)

  CUTE_UNROLL
  for (int e = 0; e < size(acc_dq); ++e) acc_dq(e) *= p.scale;
  Element* dq_ptr = dq_at<Element>(p, seq.batch, q_row, work.h);
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma, convert_fragment<Element>(acc_dq), smem_q,
      cute::make_tensor(make_gmem_ptr(dq_ptr), tile_q, make_stride(p.dq_row_stride, _1{})), rows, p.head_dim);
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dq_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    dq_tile<Traits, kFeatures>(p, decode_work(p, index), smem);
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
