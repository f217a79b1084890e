// The fp32 forward kernel: plain FFMA (CUDA cores), so every product and sum is an fp32 operation
// as in a naive fp32 implementation (TF32 tensor cores would round operands to 10 mantissa bits;
// 3xTF32 still drops about two bits per product). Any head dim: S is accumulated over 32-wide
// head-dim chunks, and O over 64-wide value chunks, kept in registers up to kVChunks chunks or in
// a global workspace in per-thread fragment order (kVChunks = 0).
//
// A CTA of 16 x 16 threads owns 64 queries; thread (ty, tx) computes the 4 x 4 block of rows
// 4 ty.. and keys (or value columns) 4 tx... The 16 threads of a row are consecutive lanes, so row
// reductions are 4 xor-shuffles. Q and K chunks are stored transposed in shared memory so that
// each step reads two float4; P goes through shared memory to become the left operand of P V.
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

template <int kVChunks_>
struct Fp32FwdTraits {
  using Element = float;
  static constexpr int kBlockM = 64, kBlockN = 64;
  static constexpr int kThreads = 256;
  static constexpr int kRowThreads = 16;  // lanes sharing a row
  static constexpr int kChunk = 32;       // head-dim columns of Q and K per step
  static constexpr int kVChunk = 64;      // value columns per step
  static constexpr int kVChunks = kVChunks_;  // value chunks held in registers; 0: global workspace
  static constexpr int kPad = 4;               // floats of row padding against bank conflicts
  static constexpr int kQtElems = kChunk * (kBlockM + kPad);
  static constexpr int kKtElems = kChunk * (kBlockN + kPad);
  static constexpr int kPElems = kBlockM * (kBlockN + kPad);
  static constexpr int kVElems = kBlockN * (kVChunk + kPad);
  static constexpr int kFragFloats = 16;  // one value chunk per thread
};

// The fp32 forward's shared memory: the Q and K chunks transposed, P, and a V chunk.
template <class Traits>
struct Fp32FwdSharedStorage {
  float qt[Traits::kQtElems];
  float kt[Traits::kKtElems];
  float p[Traits::kPElems];
  float v[Traits::kVElems];
};

// dst[d][row] = src[row][d] for rows < rows, d < cols (zero elsewhere): a chunk of kChunk
// head-dim columns, transposed and widened to fp32. Consecutive threads read consecutive columns.
template <class Traits, class T>
__device__ __forceinline__ void load_transposed(const T* src, std::int64_t row_stride, int rows, int cols,
                                                float* dst, int dst_ld) {
  constexpr int kElems = Traits::kBlockM * Traits::kChunk;
  CUTE_UNROLL
  for (int e = threadIdx.x; e < kElems; e += Traits::kThreads) {
    const int row = e / Traits::kChunk, d = e % Traits::kChunk;
    dst[d * dst_ld + row] = row < rows && d < cols ? float(src[row * row_stride + d]) : 0.0f;
  }
}

// dst[row][c] = src[row][c] for a 64 x kVChunk tile of V (zero outside rows x cols), in fp32.
template <class Traits, class T>
__device__ __forceinline__ void load_rows(const T* src, std::int64_t row_stride, int rows, int cols, float* dst) {
  constexpr int kElems = Traits::kBlockN * Traits::kVChunk, kLd = Traits::kVChunk + Traits::kPad;
  CUTE_UNROLL
  for (int e = threadIdx.x; e < kElems; e += Traits::kThreads) {
    const int row = e / Traits::kVChunk, c = e % Traits::kVChunk;
    dst[row * kLd + c] = row < rows && c < cols ? float(src[row * row_stride + c]) : 0.0f;
  }
}

// O_c = rescale * O_c + P V_c for one 64-wide value chunk: P (this tile's probabilities) and the
// V chunk are in shared memory; a[4 * i + j] is the accumulator of row 4 ty + i, column 4 tx + j.
template <class Traits>
__device__ __forceinline__ void accumulate_chunk(float (&a)[16], bool first, const float (&rescale)[4],
                                                 const float* sP, const float* sV, int tx, int ty) {
  constexpr int kPLd = Traits::kBlockN + Traits::kPad, kVLd = Traits::kVChunk + Traits::kPad;
  CUTE_UNROLL
  for (int i = 0; i < 4; ++i) {
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) a[4 * i + j] = first ? 0.0f : a[4 * i + j] * rescale[i];
  }
#pragma unroll 4
  for (int k = 0; k < Traits::kBlockN; k += 4) {
    float4 pr[4], vr[4];
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) pr[i] = *reinterpret_cast<const float4*>(sP + (4 * ty + i) * kPLd + k);
    CUTE_UNROLL
    for (int kk = 0; kk < 4; ++kk) vr[kk] = *reinterpret_cast<const float4*>(sV + (k + kk) * kVLd + 4 * tx);
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      const float pv[4] = {pr[i].x, pr[i].y, pr[i].z, pr[i].w};
      CUTE_UNROLL
      for (int kk = 0; kk < 4; ++kk) {
        a[4 * i + 0] = fmaf(pv[kk], vr[kk].x, a[4 * i + 0]);
        a[4 * i + 1] = fmaf(pv[kk], vr[kk].y, a[4 * i + 1]);
        a[4 * i + 2] = fmaf(pv[kk], vr[kk].z, a[4 * i + 2]);
        a[4 * i + 3] = fmaf(pv[kk], vr[kk].w, a[4 * i + 3]);
      }
    }
  }
}

// The last tile's chunk: rows < rows and columns < cols of O, times each row's norm.
__device__ __forceinline__ void store_chunk(const float (&a)[16], const float (&norm)[4], float* o, std::int64_t row_stride,
                                            int rows, int cols, int tx, int ty) {
  CUTE_UNROLL
  for (int i = 0; i < 4; ++i) {
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j)
      if (4 * ty + i < rows && 4 * tx + j < cols) o[(4 * ty + i) * row_stride + 4 * tx + j] = a[4 * i + j] * norm[i];
  }
}

template <class Traits, unsigned kFeatures>
__device__ void forward_tile_fp32(const FwdParams& p, const WorkItem& work, float* smem, float* slot) {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kChunk = Traits::kChunk;
  constexpr int kVChunk = Traits::kVChunk, kPad = Traits::kPad;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

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
  const int q_chunks = (p.head_dim + kChunk - 1) / kChunk, v_chunks = (p.head_dim_v + kVChunk - 1) / kVChunk;

  const float* q_ptr = q_at<float>(p, seq.batch, seq.q_begin + m0, work.h);
  const float* k_ptr = k_at<float>(p, seq.batch, seq.k_begin, hk);
  const float* v_ptr = v_at<float>(p, seq.batch, seq.k_begin, hk);
  auto& storage = *reinterpret_cast<Fp32FwdSharedStorage<Traits>*>(smem);
  float* sQt = storage.qt;
  float* sKt = storage.kt;
  float* sP = storage.p;
  float* sV = storage.v;
  constexpr int kQtLd = kBlockM + kPad, kKtLd = kBlockN + kPad, kPLd = kBlockN + kPad;

  // This thread's 4 x 4 block, mode 0 the column and mode 1 the row, so that values (2k, 2k + 1)
  // are neighbouring columns of one row (what apply_dropout expects).
  Tensor cS = make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
  Tensor blk = local_tile(cS, Shape<_4, _4>{}, make_coord(ty, tx));
  Tensor tScS = cute::make_tensor(blk.data(), select<1, 0>(blk.layout()));  // (col, row) -> (row, col)
  Tensor s = cute::make_tensor<float>(Shape<_4, _4>{});
  Tensor s_rc = cute::make_tensor(s.data(), select<1, 0>(s.layout()));  // (row, col)
  float acc[Traits::kVChunks > 0 ? Traits::kVChunks : 1][16];  // value chunks held in registers
  OnlineSoftmax<4, Traits::kRowThreads> softmax;
  softmax.init();
  float rescale[4], norm[4], lse[4];
  const std::int64_t m_end = m0 + rows;
  const float out_scale = (kFeatures & kDropout) && p.dropout ? p.dropout_scale : 1.0f;
  float* o_ptr = o_at<float>(p, seq.batch, seq.q_begin + m0, work.h);

  for (int n = n_last; n >= n_first; --n) {
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    const int keys = int(min(std::int64_t(kBlockN), seq.k_len - n0));
    clear(s);
    for (int c = 0; c < q_chunks; ++c) {
      const int c0 = c * kChunk;
      __syncthreads();  // the previous chunk's reads are done
      load_transposed<Traits>(q_ptr + c0, p.q_row_stride, rows, p.head_dim - c0, sQt, kQtLd);
      load_transposed<Traits>(k_ptr + n0 * p.k_row_stride + c0, p.k_row_stride, keys, p.head_dim - c0, sKt, kKtLd);
      __syncthreads();
      CUTE_UNROLL
      for (int d = 0; d < kChunk; ++d) {
        const float4 q = *reinterpret_cast<const float4*>(sQt + d * kQtLd + 4 * ty);
        const float4 k = *reinterpret_cast<const float4*>(sKt + d * kKtLd + 4 * tx);
        const float qv[4] = {q.x, q.y, q.z, q.w}, kv[4] = {k.x, k.y, k.z, k.w};
        CUTE_UNROLL
        for (int i = 0; i < 4; ++i)
          CUTE_UNROLL
          for (int j = 0; j < 4; ++j) s(j, i) = fmaf(qv[i], kv[j], s(j, i));
      }
    }
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kBlockN > seq.k_len || !rule.tile_visible(m0, m_end, n0, n0 + kBlockN);
    // Natural units and the LSE from the top score (kNaturalLse): the backward recomputes these scores.
    transform_scores<float, bias_code(kFeatures)>(p, rule, origin, masked, s, tScS, {}, natural_units(p));
    softmax.update(s_rc, rescale, kLog2e);
    if constexpr ((kFeatures & kDropout) != 0)
      if (p.dropout) apply_dropout(p, origin, s, tScS);
    const bool first = n == n_last, last = n == n_first;
    if (last) softmax.final_factors_natural(out_scale, norm, lse);
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i)
      *reinterpret_cast<float4*>(sP + (4 * ty + i) * kPLd + 4 * tx) = make_float4(s(0, i), s(1, i), s(2, i), s(3, i));

    // Each value chunk: V_c into shared memory, then O_c = rescale * O_c + P V_c.
    if constexpr (Traits::kVChunks > 0) {
      CUTE_UNROLL  // a compile-time chunk index keeps the accumulators in registers
      for (int c = 0; c < Traits::kVChunks; ++c) {
        if (c >= v_chunks) break;
        __syncthreads();  // P written; the previous V chunk's reads are done
        load_rows<Traits>(v_ptr + n0 * p.v_row_stride + c * kVChunk, p.v_row_stride, keys, p.head_dim_v - c * kVChunk, sV);
        __syncthreads();
        accumulate_chunk<Traits>(acc[c], first, rescale, sP, sV, tx, ty);
        if (last)
          store_chunk(acc[c], norm, o_ptr + c * kVChunk, p.o_row_stride, rows, p.head_dim_v - c * kVChunk, tx, ty);
      }
    } else {
      for (int c = 0; c < v_chunks; ++c) {
        __syncthreads();
        load_rows<Traits>(v_ptr + n0 * p.v_row_stride + c * kVChunk, p.v_row_stride, keys, p.head_dim_v - c * kVChunk, sV);
        float4* chunk = reinterpret_cast<float4*>(slot + std::int64_t(c) * kBlockM * kVChunk);
        float a[16];
        if (!first) {
          CUTE_UNROLL
          for (int v = 0; v < 4; ++v) {
            const float4 x = chunk[v * Traits::kThreads + threadIdx.x];
            a[4 * v] = x.x, a[4 * v + 1] = x.y, a[4 * v + 2] = x.z, a[4 * v + 3] = x.w;
          }
        }
        __syncthreads();
        accumulate_chunk<Traits>(a, first, rescale, sP, sV, tx, ty);
        if (last) {
          store_chunk(a, norm, o_ptr + c * kVChunk, p.o_row_stride, rows, p.head_dim_v - c * kVChunk, tx, ty);
        } else {
          CUTE_UNROLL
          for (int v = 0; v < 4; ++v)
            chunk[v * Traits::kThreads + threadIdx.x] = make_float4(a[4 * v], a[4 * v + 1], a[4 * v + 2], a[4 * v + 3]);
        }
      }
    }
  }
  write_lse<Traits::kRowThreads>(p, seq, work.h, m0, rows, lse, cute::make_tensor(tScS.data(), select<1, 0>(tScS.layout())));
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) forward_fp32_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) char smem[];
  float* slot = p.o_accum ? p.o_accum + std::int64_t(blockIdx.x) * p.o_accum_slot_elems : nullptr;
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    forward_tile_fp32<Traits, kFeatures>(p, decode_work(p, index), reinterpret_cast<float*>(smem), slot);
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
