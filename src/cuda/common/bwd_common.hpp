// Pieces every backward uses: where each row of the tensors, the row statistics and the fp32
// workspaces lies, the work items of key tiles, and the elementwise step that turns a tile of raw
// scores and raw dP into P and dS. (delta's and the workspaces' own kernels: cuda/bwd_elementwise.cu.)
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda {

using namespace cute;

// Row (b, row, h) of a gradient's fp32 workspace; the next row of the same head is g.ld floats
// further.
__device__ __forceinline__ float* accum_row(const GradAccum& g, std::int64_t b, std::int64_t row, int h) {
  return g.data + ((b * g.heads + h) * g.rows + row) * g.ld;
}

// Row (b, row, h)'s LSE (the forward's output) and delta (the backward's rowsum(dO * O)).
__device__ __forceinline__ const float* lse_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_row_stride;
}
__device__ __forceinline__ float* delta_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return p.delta + (b * p.heads_q + h) * p.delta_rows + row;
}

// The same for dO (read) and the gradients dQ, dK, dV (written).
template <class Element>
__device__ __forceinline__ const Element* do_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return element_ptr<Element>(p.dout, b * p.do_batch_stride + row * p.do_row_stride + h * p.do_head_stride);
}
template <class Element>
__device__ __forceinline__ Element* dq_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return static_cast<Element*>(p.dq) + b * p.dq_batch_stride + row * p.dq_row_stride + h * p.dq_head_stride;
}
template <class Element>
__device__ __forceinline__ Element* dk_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return static_cast<Element*>(p.dk) + b * p.dk_batch_stride + row * p.dk_row_stride + h * p.dk_head_stride;
}
template <class Element>
__device__ __forceinline__ Element* dv_at(const BwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return static_cast<Element*>(p.dv) + b * p.dv_batch_stride + row * p.dv_row_stride + h * p.dv_head_stride;
}

// Four neighbouring elements to 16-bit or fp32 memory (8 or 16 bytes, aligned by the caller).
template <class Element>
__device__ __forceinline__ void store4(Element* dst, float4 v) {
  if constexpr (sizeof(Element) == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack_pair<Element>(v.x, v.y), pack_pair<Element>(v.z, v.w));
  } else {
    *reinterpret_cast<float4*>(dst) = v;
  }
}

// The work of a CTA that owns a key tile: key block n_block of kv head hk of sequence b.
struct KvWorkItem {
  int n_block, hk, b;
};

__device__ __forceinline__ KvWorkItem decode_kv_work(const BwdParams& p, std::int64_t index) {
  const TileRank t = rank_work(index, p.num_n_blocks, std::int64_t(p.batch) * p.heads_k, p.kv_work_groups);
  KvWorkItem w;
  w.n_block = t.rank;
  w.hk = int(t.pair % p.heads_k);
  w.b = int(t.pair / p.heads_k);
  return w;
}

// A row's LSE as the gradient kernels use it: base 2 (natural for kNaturalLse rows), and +inf for
// rows that see no key (LSE -inf), so that their P is 0.
__device__ __forceinline__ float lse_base2(float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; }
template <class Element>
__device__ __forceinline__ float staged_lse(float lse) {
  if constexpr (kNaturalLse<Element>) return lse == -INFINITY ? INFINITY : lse;
  return lse_base2(lse);
}

// Per-query statistics of one query tile, staged in shared memory: LSE (staged_lse; +inf for rows
// past the tile's end too) and delta.
template <class Element, int kRows>
__device__ __forceinline__ void load_row_stats(const BwdParams& p, const SequenceInfo& seq, int h, std::int64_t m0,
                                               int rows, float* lse2, float* delta) {
  for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
    float l = INFINITY, d = 0.0f;
    if (r < rows) {
      const std::int64_t row = seq.q_begin + m0 + r;
      l = *lse_at(p, seq.batch, row, h);
      l = staged_lse<Element>(l);
      d = *delta_at(p, seq.batch, row, h);
    }
    lse2[r] = l;
    delta[r] = d;
  }
}

// What gradient_tile's s holds on entry: the raw scores, or (rows without bias) P already, from
// exp_scores_part.
enum class ScoresIn { raw, probabilities };

// P = 2^(s * scale_log2 - lse2) for part `part` of kParts of a score fragment with query rows:
// the one-pass kernel calls it between the dP GEMM's k-slices, so that the exponentials (MUFU)
// issue while the tensor cores run instead of after them (then gradient_tile with
// ScoresIn::probabilities). Rows without bias only: a bias is added before the exponential.
template <int kParts, ScoreRows kScoreRows = ScoreRows::queries, class S, class Coords>
__device__ __forceinline__ void exp_scores_part(S& s, const Coords& coord, const float* lse2, float scale_log2,
                                                int part) {
  constexpr int kSize = int(decltype(size(s))::value);
  constexpr int kPer = (kSize + kParts - 1) / kParts;  // the last parts short or empty where kParts does not divide
  constexpr int kQueryMode = kScoreRows == ScoreRows::keys ? 1 : 0;
  CUTE_UNROLL
  for (int e = part * kPer; e < (part + 1) * kPer && e < kSize; ++e)
    s(e) = fast_exp2(fmaf(s(e), scale_log2, -lse2[get<kQueryMode>(coord(e))]));
}

// Whether gradient_tile writes dS to dbias: only in the kernel that visits every (query, key)
// element of a (sequence, head) once (the dQ kernels, the one-pass backward).
enum class Dbias { skip, write };

// With s the raw scores Q K^T (or P, kIn) and dp the raw dO V^T of one tile (either way round,
// kScoreRows): s <- P * Z / (1 - p) (what dV needs) and dp <- dS = P * (Z / (1 - p) * dO V^T - delta).
// lse2 and delta are the tile's staged row statistics (indexed by query - m0). When dbias is
// wanted (Dbias::write), dS goes to dbias, or to its fp32 workspace when dbias has broadcast
// dimensions (BwdParams).
// shared_bias: the tile's bias in shared memory (kBiasTile rows), else read from global memory.
// kBiasTile rows write dbias after the element loop, which carries no dbias code: the global
// stores in it, never taken on those rows, had cost a branch per score and doubled the loop's
// size (ncu: 1.55x the plain row's instructions, 1.2 "no instruction" stall cycles per
// instruction). With dbias_staged, dS (16-bit) replaces the bias in the shared
// tile, each element written by the thread that read its bias (no barrier needed), and the
// caller stores the tile (store_dbias_tile); with a dbias workspace (broadcast dimensions) each
// pair of neighbouring keys is added (or stored, deterministic) there from the registers. A
// 32-bit dbias without a workspace goes to the rows with the global path (the dispatcher).
template <class Element, unsigned kFeatures, ScoreRows kScoreRows, Dbias kDbias, ScoresIn kIn = ScoresIn::raw,
          class S, class DP, class Coords>
__device__ __forceinline__ void gradient_tile(const BwdParams& p, const detail::MaskRule& rule, const TileOrigin& t,
                                              bool masked, S& s, DP& dp, const Coords& coord, const float* lse2,
                                              const float* delta, SharedBias shared_bias = {},
                                              bool dbias_staged = false) {
  constexpr bool kKeyRows = kScoreRows == ScoreRows::keys;
  constexpr bool kWriteDbias = kDbias == Dbias::write;
  // Without bias the scale goes into the exp2 FFMA below (one instruction per score instead of
  // two) and the mask zeroes P and dS afterwards: a hidden score of -inf times a scale <= 0 would
  // not give P = 0. With bias the scores become scale * s + bias (one FFMA), hidden ones -inf,
  // and log2(e) goes into the exp2 FFMA.
  constexpr bool kScaleInExp = (kFeatures & kBias) == 0;
  static_assert(kIn == ScoresIn::raw || kScaleInExp, "P computed ahead: rows without bias");
  if constexpr (!kScaleInExp)
    transform_scores<Element, bias_code(kFeatures), kScoreRows>(p, rule, t, masked, s, coord, shared_bias,
                                                                natural_units(p));
  [[maybe_unused]] const float exp_scale = kScaleInExp ? p.scale_log2 : kLog2e;
  const bool dropout = (kFeatures & kDropout) != 0 && p.dropout;
  const std::uint64_t bh = std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h);
  [[maybe_unused]] std::uint64_t keep_bits = 0;
  if constexpr ((kFeatures & kDropout) != 0 && (kFeatures & kDropoutPaired) != 0)
    if (dropout) keep_bits = dropout_keep_bits<kScoreRows>(p, t, s.layout(), coord);
  // Only rows with bias code can be given a bias (the dispatcher's rule), so only they carry the
  // dbias stores: in the others the per-element bounds tests would run for nothing.
  constexpr bool kDbiasCode = kWriteDbias && (kFeatures & kBias) != 0;
  constexpr bool kStagedDbias = kDbiasCode && bias_code(kFeatures) == BiasCode::tile;
  constexpr bool kGlobalDbias = kDbiasCode && !kStagedDbias;
  // m16n8 fragments with query rows (not the SIMT kernels' rank-2 ones): neighbouring keys in pairs.
  constexpr bool kPairs = !kKeyRows && decltype(rank(s.layout()))::value == 3;
  static_assert(!kStagedDbias || kPairs, "bias-tile rows write dbias from m16n8 fragments with query rows");
  char* dbias = nullptr;
  float* accum = nullptr;
  if (kGlobalDbias && p.dbias) {
    if (p.dbias_accum)
      accum = p.dbias_accum + std::int64_t(t.b) * p.dbias_accum_strides[0] + std::int64_t(t.h) * p.dbias_accum_strides[1];
    else
      dbias = static_cast<char*>(p.dbias) +
              (std::int64_t(t.b) * p.dbias_batch_stride + std::int64_t(t.h) * p.dbias_head_stride) *
                  (p.bias_is_f32 ? 4 : 2);
  }
  CUTE_UNROLL
  for (int e = 0; e < size(s); ++e) {
    std::int64_t i, j;
    query_key<kScoreRows>(t, coord, e, &i, &j);
    const int r = int(i - t.m0);
    float prob;
    if constexpr (kIn == ScoresIn::probabilities) {
      prob = s(e);
    } else if constexpr (kNaturalLse<Element>) {
      // The forward's natural score, rounded as it rounds it, so that s - LSE is exact for a
      // dominant key (P = 1). __fmul_rn keeps the product from being fused into the subtraction,
      // which would see the product's rounding as a difference: a 3xTF32 dV error of 7e-4 at
      // scores of 1e4 (FMAs' 2e-5).
      const float natural = kScaleInExp ? __fmul_rn(s(e), p.scale) : s(e);
      prob = fast_exp2((natural - lse2[r]) * kLog2e);
    } else {
      prob = fast_exp2(fmaf(s(e), exp_scale, -lse2[r]));
    }
    bool keep = true;
    if constexpr ((kFeatures & kDropoutPaired) != 0) keep = !dropout || ((keep_bits >> e) & 1) != 0;
    else keep = !dropout || dropout_keeps(p, bh, i, j);
    const float z = keep ? (dropout ? p.dropout_scale : 1.0f) : 0.0f;
    const float ds = prob * (z * dp(e) - delta[r]);
    s(e) = prob * z;
    dp(e) = ds;
    if constexpr (kGlobalDbias) {
      if (i >= t.q_len || j >= t.k_len) continue;
      if (accum != nullptr) {
        float* a = accum + i * p.dbias_accum_strides[2] + j * p.dbias_accum_strides[3];
        if (p.dbias_atomic) atomicAdd(a, ds);
        else *a = ds;
      } else if (dbias != nullptr) {
        const std::int64_t off = i * p.dbias_row_stride + j * p.dbias_col_stride;
        if (p.bias_is_f32) reinterpret_cast<float*>(dbias)[off] = ds;
        else reinterpret_cast<Element*>(dbias)[off] = Element(ds);
      }
    }
  }
  if constexpr (kScaleInExp)
    if (masked) zero_hidden<kScoreRows>(rule, t, s, dp, coord);
  if constexpr (kStagedDbias) {
    if (dbias_staged) {  // values (2k, 2k + 1) are neighbouring keys: one 32-bit store per pair
      CUTE_UNROLL
      for (int e = 0; e < size(dp); e += 2) {
        int r, c;
        tile_row_col<kScoreRows>(coord, e, &r, &c);
        *reinterpret_cast<std::uint32_t*>(shared_bias.tile + r * shared_bias.pitch + c * 2) =
            pack_pair<Element>(dp(e), dp(e + 1));
      }
    } else if (p.dbias_accum != nullptr) {
      float* accum = p.dbias_accum + std::int64_t(t.b) * p.dbias_accum_strides[0] +
                     std::int64_t(t.h) * p.dbias_accum_strides[1];
      CUTE_UNROLL
      for (int e = 0; e < size(dp); e += 2) {
        std::int64_t i, j;
        query_key<kScoreRows>(t, coord, e, &i, &j);
        if (i >= t.q_len) continue;
        float* a = accum + i * p.dbias_accum_strides[2] + j * p.dbias_accum_strides[3];
        CUTE_UNROLL
        for (int x = 0; x < 2; ++x) {
          if (j + x >= t.k_len) break;
          if (p.dbias_atomic) atomicAdd(a + x * p.dbias_accum_strides[3], dp(e + x));
          else a[x * p.dbias_accum_strides[3]] = dp(e + x);
        }
      }
    }
  }
}

// dbias of query rows m0.. and keys n0.. of sequence b, head h (p.dbias_tile) from its 16-bit values
// in a BiasTileShape<kRows, kCols> tile: 16 bytes per store, the last chunk of a row element by
// element when k_len cuts it. As in load_bias_tile_of, a thread stores one column chunk of every
// kRowStep-th row, its bounds and first address worked out once.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void store_dbias_tile(const BwdParams& p, int b, int h, std::int64_t m0, std::int64_t n0,
                                                 std::int64_t q_len, std::int64_t k_len, const char* tile) {
  using Shape = BiasTileShape<kRows, kCols>;
  constexpr int kElemsPerChunk = 8, kChunksPerRow = kCols / kElemsPerChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow;
  static_assert(kCols % kElemsPerChunk == 0 && kThreads % kChunksPerRow == 0);  // a column chunk per thread
  const int r0 = int(threadIdx.x) / kChunksPerRow, k = int(threadIdx.x) % kChunksPerRow;
  const std::int64_t j = n0 + k * kElemsPerChunk;
  if (j >= k_len) return;
  const int cols = int(min(std::int64_t(kElemsPerChunk), k_len - j));
  const int rows = int(min(std::int64_t(kRows), q_len - m0));
  char* dst = static_cast<char*>(p.dbias) +
              ((std::int64_t(b) * p.dbias_batch_stride + std::int64_t(h) * p.dbias_head_stride) +
               (m0 + r0) * p.dbias_row_stride + j) * 2;
  const std::int64_t step = std::int64_t(kRowStep) * p.dbias_row_stride * 2;
  const char* src = tile + r0 * Shape::kPitch + k * 16;
#pragma unroll 1
  for (int r = r0; r < rows; r += kRowStep) {
    if (cols == kElemsPerChunk) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int x = 0; x < cols; ++x)
        reinterpret_cast<std::uint16_t*>(dst)[x] = reinterpret_cast<const std::uint16_t*>(src)[x];
    }
    dst += step;
    src += kRowStep * Shape::kPitch;
  }
}

}  // namespace memattn::cuda
