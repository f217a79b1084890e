// The backward for what the tensor-core rows do not cover: fp32 inputs and head dims above 128,
// any dtype (the inputs are widened to fp32 in shared memory; every product and sum is an fp32
// FFMA, which is also what gives fp32 its fp32-level accuracy). dQ, dK and dV are accumulated in
// a global fp32 workspace (BwdParams::grad_accum), one row per (tensor batch, row, head), padded
// to whole 64-column chunks so that each thread moves float4s; finish_gradient_kernel then writes
// the gradients in their dtype and strides.
//
// Two kernels, as for the tensor-core rows, so that no gradient element has two writers (no
// atomics, deterministic): dkdv_simt_kernel owns a tile of 64 keys of one (sequence, kv head) and
// walks every query tile of the group's heads that sees them; dq_simt_kernel owns 64 queries of
// one (sequence, head) and walks the visible key tiles (and writes dbias, each element once).
// A CTA is 16 x 16 threads; thread (ty, tx) owns the 4 x 4 block of tile rows 4 ty.. and columns
// 4 tx.., as in the fp32 forward, whose shared-memory helpers it uses.
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/fwd_fp32_kernel.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

template <class Element_>
struct SimtBwdTraits : Fp32FwdTraits<0> {
  using Element = Element_;  // of the tensors; the math is fp32
  static constexpr int kTileLd = kBlockN + kPad;
  static constexpr int kTileElems = kBlockM * kTileLd;
};

// Shared memory of both kernels: two transposed 32-column chunks, P^T (the dK/dV kernel's), dS^T
// (or dS, the dQ kernel's), one 64-column chunk of rows, and the query tile's LSE (base 2) and
// delta.
template <class Traits>
struct SimtBwdSharedStorage {
  float at[Traits::kQtElems];
  float bt[Traits::kKtElems];
  float pt[Traits::kTileElems];
  float ds[Traits::kTileElems];
  float rows[Traits::kTileElems];
  float lse2[Traits::kBlockM];
  float delta[Traits::kBlockM];
};

// sum over 32-column chunks of a[r] . b[c] for the 64 x 64 tile of rows a (rows_a valid) and
// rows b (rows_b valid), `cols` columns each: s(j, i) for tile row 4 ty + i and column 4 tx + j.
template <class Traits, class Tile>
__device__ __forceinline__ void dot_tile(const typename Traits::Element* a, std::int64_t a_stride, int rows_a,
                                         const typename Traits::Element* b, std::int64_t b_stride, int rows_b, int cols,
                                         float* sAt, float* sBt, Tile& s, int tx, int ty) {
  constexpr int kChunk = Traits::kChunk, kLd = Traits::kBlockM + Traits::kPad;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    __syncthreads();  // the previous chunk's reads are done
    load_transposed<Traits>(a + c0, a_stride, rows_a, cols - c0, sAt, kLd);
    load_transposed<Traits>(b + c0, b_stride, rows_b, cols - c0, sBt, kLd);
    __syncthreads();
    CUTE_UNROLL
    for (int d = 0; d < kChunk; ++d) {
      const float4 x = *reinterpret_cast<const float4*>(sAt + d * kLd + 4 * ty);
      const float4 y = *reinterpret_cast<const float4*>(sBt + d * kLd + 4 * tx);
      const float xv[4] = {x.x, x.y, x.z, x.w}, yv[4] = {y.x, y.y, y.z, y.w};
      CUTE_UNROLL
      for (int i = 0; i < 4; ++i)
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) s(j, i) = fmaf(xv[i], yv[j], s(j, i));
    }
  }
}

// accum[r][:] += sum_k w[r][k] rows[k][:] for the tile's 64 rows r (rows_out valid), with w a
// 64 x 64 tile in shared memory and rows (rows_in valid) read from global memory in 64-column
// chunks; accum is the fp32 workspace (row stride accum_ld, padded to whole chunks).
template <class Traits>
__device__ __forceinline__ void accumulate_rows(float* accum, std::int64_t accum_ld, int rows_out, const float* sW,
                                                const typename Traits::Element* rows, std::int64_t row_stride,
                                                int rows_in, int cols, float* sRows, int tx, int ty) {
  constexpr int kVChunk = Traits::kVChunk;
  constexpr float kOne[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (int c0 = 0; c0 < cols; c0 += kVChunk) {
    __syncthreads();  // sW written; the previous chunk's reads are done
    load_rows<Traits>(rows + c0, row_stride, rows_in, cols - c0, sRows);
    __syncthreads();
    float a[16];
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      const float4 x = 4 * ty + i < rows_out
                           ? *reinterpret_cast<const float4*>(accum + (4 * ty + i) * accum_ld + c0 + 4 * tx)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      a[4 * i] = x.x, a[4 * i + 1] = x.y, a[4 * i + 2] = x.z, a[4 * i + 3] = x.w;
    }
    accumulate_chunk<Traits>(a, false, kOne, sW, sRows, tx, ty);
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i)
      if (4 * ty + i < rows_out)
        *reinterpret_cast<float4*>(accum + (4 * ty + i) * accum_ld + c0 + 4 * tx) =
            make_float4(a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]);
  }
}

template <class Tile>
__device__ __forceinline__ void store_tile_rows(float* sT, const Tile& s, int tx, int ty, int ld) {
  CUTE_UNROLL
  for (int i = 0; i < 4; ++i)
    *reinterpret_cast<float4*>(sT + (4 * ty + i) * ld + 4 * tx) = make_float4(s(0, i), s(1, i), s(2, i), s(3, i));
}

template <class Traits, unsigned kFeatures>
__device__ void dkdv_simt_tile(const BwdParams& p, const KvWorkItem& work, float* smem) {
  using Element = typename Traits::Element;
  constexpr int kTile = Traits::kBlockM, kLd = Traits::kTileLd;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t n0 = std::int64_t(work.n_block) * kTile;
  if (n0 >= seq.k_len) return;
  const int keys = int(min(std::int64_t(kTile), seq.k_len - n0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t query_begin = 0, query_end = 0;
  rule.query_range(n0, n0 + keys, seq.q_len, &query_begin, &query_end);

  const std::int64_t k_row = seq.k_begin + n0;
  const Element* k_ptr = k_at<Element>(p, seq.batch, k_row, work.hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, k_row, work.hk);
  float* dk_accum = accum_row(p.dk_accum, seq.batch, k_row, work.hk);
  float* dv_accum = accum_row(p.dv_accum, seq.batch, k_row, work.hk);
  const std::int64_t dk_ld = p.dk_accum.ld, dv_ld = p.dv_accum.ld;

  auto& storage = *reinterpret_cast<SimtBwdSharedStorage<Traits>*>(smem);
  float* sAt = storage.at;
  float* sBt = storage.bt;
  float* sPt = storage.pt;
  float* sdSt = storage.ds;
  float* sRows = storage.rows;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;

  // Element (j, i): key 4 ty + i, query 4 tx + j of the transposed tiles.
  Tensor cS = make_identity_tensor(make_shape(Int<kTile>{}, Int<kTile>{}));
  Tensor blk = local_tile(cS, Shape<_4, _4>{}, make_coord(ty, tx));
  Tensor tScS = cute::make_tensor(blk.data(), select<1, 0>(blk.layout()));
  Tensor st = cute::make_tensor<float>(Shape<_4, _4>{});
  Tensor dpt = cute::make_tensor<float>(Shape<_4, _4>{});

  for (int g = 0; g < p.group; ++g) {
    const int h = work.hk * p.group + g;
    for (std::int64_t m0 = query_begin; m0 < query_end; m0 += kTile) {
      const int rows = int(min(std::int64_t(kTile), seq.q_len - m0));
      const std::int64_t q_row = seq.q_begin + m0;
      const Element* q_ptr = q_at<Element>(p, seq.batch, q_row, h);
      const Element* do_ptr = do_at<Element>(p, seq.batch, q_row, h);
      __syncthreads();  // the previous tile's statistics are read
      load_row_stats<Element, kTile>(p, seq, h, m0, rows, lse2, delta);
      clear(st);
      clear(dpt);
      dot_tile<Traits>(k_ptr, p.k_row_stride, keys, q_ptr, p.q_row_stride, rows, p.head_dim, sAt, sBt, st, tx, ty);
      dot_tile<Traits>(v_ptr, p.v_row_stride, keys, do_ptr, p.do_row_stride, rows, p.head_dim_v, sAt, sBt, dpt, tx,
                       ty);
      const TileOrigin origin{work.b, h, m0, n0, seq.q_len, seq.k_len};
      const bool masked = n0 + kTile > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kTile);
      gradient_tile<Element, kFeatures, ScoreRows::keys, Dbias::skip>(p, rule, origin, masked, st, dpt, tScS, lse2,
                                                                      delta);
      store_tile_rows(sPt, st, tx, ty, kLd);
      store_tile_rows(sdSt, dpt, tx, ty, kLd);
      // dV += (P Z)^T dO and dK += dS^T Q (the scale is applied when dK is written).
      accumulate_rows<Traits>(dv_accum, dv_ld, keys, sPt, do_ptr, p.do_row_stride, rows, p.head_dim_v, sRows, tx, ty);
      accumulate_rows<Traits>(dk_accum, dk_ld, keys, sdSt, q_ptr, p.q_row_stride, rows, p.head_dim, sRows, tx, ty);
    }
  }
}

template <class Traits, unsigned kFeatures>
__device__ void dq_simt_tile(const BwdParams& p, const WorkItem& work, float* smem) {
  using Element = typename Traits::Element;
  constexpr int kTile = Traits::kBlockM, kLd = Traits::kTileLd;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kTile;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kTile), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  if (key_begin >= key_end) return;  // dQ stays zero
  const int hk = work.h / p.group;

  const std::int64_t q_row = seq.q_begin + m0;
  const Element* q_ptr = q_at<Element>(p, seq.batch, q_row, work.h);
  const Element* do_ptr = do_at<Element>(p, seq.batch, q_row, work.h);
  const Element* k_ptr = k_at<Element>(p, seq.batch, seq.k_begin, hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, seq.k_begin, hk);
  float* dq_accum = accum_row(p.dq_accum, seq.batch, q_row, work.h);
  const std::int64_t dq_ld = p.dq_accum.ld;

  auto& storage = *reinterpret_cast<SimtBwdSharedStorage<Traits>*>(smem);
  float* sAt = storage.at;
  float* sBt = storage.bt;
  float* sdS = storage.ds;
  float* sRows = storage.rows;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;
  load_row_stats<Element, kTile>(p, seq, work.h, m0, rows, lse2, delta);  // read after dot_tile's barriers

  // Element (j, i): query 4 ty + i, key 4 tx + j.
  Tensor cS = make_identity_tensor(make_shape(Int<kTile>{}, Int<kTile>{}));
  Tensor blk = local_tile(cS, Shape<_4, _4>{}, make_coord(ty, tx));
  Tensor tScS = cute::make_tensor(blk.data(), select<1, 0>(blk.layout()));
  Tensor s = cute::make_tensor<float>(Shape<_4, _4>{});
  Tensor dp = cute::make_tensor<float>(Shape<_4, _4>{});

  const int n_first = int(key_begin / kTile), n_last = int((key_end - 1) / kTile);
  for (int n = n_first; n <= n_last; ++n) {
    const std::int64_t n0 = std::int64_t(n) * kTile;
    const int keys = int(min(std::int64_t(kTile), seq.k_len - n0));
    clear(s);
    clear(dp);
    dot_tile<Traits>(q_ptr, p.q_row_stride, rows, k_ptr + n0 * p.k_row_stride, p.k_row_stride, keys, p.head_dim, sAt,
                     sBt, s, tx, ty);
    dot_tile<Traits>(do_ptr, p.do_row_stride, rows, v_ptr + n0 * p.v_row_stride, p.v_row_stride, keys, p.head_dim_v,
                     sAt, sBt, dp, tx, ty);
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kTile > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kTile);
    gradient_tile<Element, kFeatures, ScoreRows::queries, Dbias::write>(p, rule, origin, masked, s, dp, tScS, lse2,
                                                                         delta);
    store_tile_rows(sdS, dp, tx, ty, kLd);
    accumulate_rows<Traits>(dq_accum, dq_ld, rows, sdS, k_ptr + n0 * p.k_row_stride, p.k_row_stride, keys, p.head_dim,
                            sRows, tx, ty);
  }
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dkdv_simt_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  for (std::int64_t index = blockIdx.x; index < p.num_kv_blocks; index += gridDim.x) {
    dkdv_simt_tile<Traits, kFeatures>(p, decode_kv_work(p, index), reinterpret_cast<float*>(smem));
    __syncthreads();
  }
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dq_simt_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    dq_simt_tile<Traits, kFeatures>(p, decode_work(p, index), reinterpret_cast<float*>(smem));
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
