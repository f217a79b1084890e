// Pieces of the sm80 backward: delta = rowsum(dO * O), zero gradients for keys past seqused_k,
// and the elementwise step that turns a tile of raw scores and raw dP into P and dS.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/bwd_params.hpp"
#include "cuda/sm80/fwd_common.hpp"
#include "cuda/sm80/score_mods.hpp"
#include "cuda/sm80/softmax.hpp"
#include "cuda/tile_scheduler.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

// Row (b, row, h) of a gradient's fp32 workspace; the next row of the same head is
// g.heads * g.ld floats further.
__device__ __forceinline__ float* accum_row(const GradAccum& g, std::int64_t b, std::int64_t row, int h) {
  return g.data + ((b * g.rows + row) * g.heads + h) * g.ld;
}

// delta[b][h][row] = sum over the value dim of dO * O, one warp per (tensor batch, row, head).
template <class Element>
__global__ void __launch_bounds__(256) delta_kernel(const __grid_constant__ BwdParams p) {
  const int lane = threadIdx.x % 32;
  const std::int64_t batches = p.seqstart_q ? 1 : p.batch;
  const std::int64_t total = batches * p.delta_rows * p.heads_q;
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t w = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < total; w += warps) {
    const int h = int(w % p.heads_q);
    const std::int64_t row = (w / p.heads_q) % p.delta_rows, b = w / (p.heads_q * p.delta_rows);
    const Element* o = static_cast<const Element*>(p.out) + b * p.o_batch_stride + row * p.o_row_stride + h * p.o_head_stride;
    const Element* d =
        static_cast<const Element*>(p.dout) + b * p.do_batch_stride + row * p.do_row_stride + h * p.do_head_stride;
    float sum = 0.0f;
    for (int e = lane; e < p.head_dim_v; e += 32) sum += float(o[e]) * float(d[e]);
    sum = row_sum_all<32>(sum);
    if (lane == 0) p.delta[(b * p.heads_q + h) * p.delta_rows + row] = sum;
  }
}

// Keys of a sequence past seqused_k get zero gradients (one CTA per sequence).
template <class Element>
__global__ void __launch_bounds__(256) zero_unused_keys_kernel(const __grid_constant__ BwdParams p) {
  const int b = blockIdx.x;
  const std::int64_t begin = p.seqstart_k[b] + p.seqused_k[b], end = p.seqstart_k[b + 1];
  const std::int64_t width = std::int64_t(p.head_dim) + p.head_dim_v;
  const std::int64_t n = (end - begin) * p.heads_k * width;
  for (std::int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const std::int64_t c = e % width, rest = e / width;
    const std::int64_t h = rest % p.heads_k, row = begin + rest / p.heads_k;
    if (c < p.head_dim)
      static_cast<Element*>(p.dk)[row * p.dk_row_stride + h * p.dk_head_stride + c] = Element(0.0f);
    else
      static_cast<Element*>(p.dv)[row * p.dv_row_stride + h * p.dv_head_stride + c - p.head_dim] = Element(0.0f);
  }
}

// Per-query statistics of one query tile, staged in shared memory: LSE in base 2 (+inf for rows
// that see no key, so that their P is 0) and delta.
template <int kRows>
__device__ __forceinline__ void load_row_stats(const BwdParams& p, const SequenceInfo& seq, int h, std::int64_t m0,
                                               int rows, float* lse2, float* delta) {
  for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
    float l = INFINITY, d = 0.0f;
    if (r < rows) {
      const std::int64_t row = seq.q_begin + m0 + r;
      l = p.lse[seq.batch * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_row_stride];
      l = l == -INFINITY ? INFINITY : l * kLog2e;
      d = p.delta[(seq.batch * p.heads_q + h) * p.delta_rows + row];
    }
    lse2[r] = l;
    delta[r] = d;
  }
}

// The dropout decisions of one m16n8 accumulator fragment as bits (bit e: element e is kept),
// with each Philox call shared by the lanes that need its words (kDropoutPaired). Elements whose
// coordinates lie past the tile's sequence get arbitrary bits (they are masked anyway).
// - Query rows (kKeyRows false, the dQ kernel): lanes t and t ^ 1 hold the same rows r, r + 8 and
//   the two halves of a 4-key group: each computes one row's words and passes two to the other.
// - Key rows (kKeyRows true, the dK/dV kernels): lanes t, t + 4, t + 8, t + 12 (same t % 4) hold
//   the 4 keys of one group for the same two queries, in rows k and k + 8: the four counters
//   (key group of k or k + 8, query q0 or q0 + 1) are computed one per lane, and each lane collects
//   its word (k % 4) of all four with three shuffles.
template <bool kKeyRows, class FragLayout, class Coords>
__device__ __forceinline__ std::uint64_t dropout_keep_bits(const BwdParams& p, const TileOrigin& t,
                                                           FragLayout frag, const Coords& coord) {
  Tensor c_rc = rowcol(coord);
  static_assert(decltype(size(coord))::value <= 64 && decltype(size<0>(c_rc))::value % 2 == 0);
  const auto index = rowcol_layout(frag);  // (row, col) -> element e of the register fragment
  const detail::DropoutKey key{p.seed_lo, p.seed_hi, p.dropout_offset, p.dropout_threshold};
  const std::uint32_t bh = std::uint32_t(std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h));
  const std::uint32_t i0 = std::uint32_t(t.m0), j0 = std::uint32_t(std::uint64_t(t.n0) >> 2);  // t.n0 % 4 == 0
  std::uint64_t bits = 0;
  const auto set = [&](int r, int c, std::uint32_t word) {
    if (word >= key.threshold) bits |= std::uint64_t(1) << index(r, c);
  };
  CUTE_UNROLL
  for (int m = 0; m < size<0>(c_rc); m += 2) {  // rowcol rows m and m + 1: fragment rows r and r + 8
    CUTE_UNROLL
    for (int c = 0; c < size<1>(c_rc); c += 2) {
      const int row = get<0>(c_rc(m, c)), col = get<1>(c_rc(m, c));  // tile coordinates, col even
      if constexpr (!kKeyRows) {
        const bool upper = (col & 2) != 0;
        const std::uint32_t i = i0 + std::uint32_t(upper ? get<0>(c_rc(m + 1, c)) : row);
        const detail::Philox4 w =
            detail::philox4x32_10(detail::Philox4{j0 + std::uint32_t(col >> 2), i, bh, key.c3}, key.k0, key.k1);
        const std::uint32_t own0 = upper ? w.z : w.x, own1 = upper ? w.w : w.y;
        const std::uint32_t got0 = __shfl_xor_sync(0xffffffffu, upper ? w.x : w.z, 1);
        const std::uint32_t got1 = __shfl_xor_sync(0xffffffffu, upper ? w.y : w.w, 1);
        set(m, c, upper ? got0 : own0);
        set(m, c + 1, upper ? got1 : own1);
        set(m + 1, c, upper ? own0 : got0);
        set(m + 1, c + 1, upper ? own1 : got1);
      } else {
        // Rows are keys: row (k) and row + 8; columns queries col, col + 1. Counter q of the four:
        // key group of row (q < 2) or row + 8, query col + (q & 1).
        const int lane = int(threadIdx.x % 32), s = row & 3;
        const int q = s;  // this lane computes counter s
        const std::uint32_t jg = j0 + std::uint32_t((row + (q < 2 ? 0 : 8)) >> 2);
        const detail::Philox4 w = detail::philox4x32_10(
            detail::Philox4{jg, i0 + std::uint32_t(col + (q & 1)), bh, key.c3}, key.k0, key.k1);
        const auto word = [&](int k) { return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w; };
        std::uint32_t mine[4];  // word s of counters 0..3
        CUTE_UNROLL
        for (int d = 0; d < 4; ++d) {
          // Round d: this lane reads counter (s + d) & 3 from the lane that computed it, which
          // sends word (its s - d) & 3, the one this lane needs.
          const int src = (lane & ~12) | (((s + d) & 3) << 2);
          const std::uint32_t got = d == 0 ? word(s) : __shfl_sync(0xffffffffu, word((s - d) & 3), src);
          const int counter = (s + d) & 3;
          CUTE_UNROLL
          for (int k = 0; k < 4; ++k)
            if (k == counter) mine[k] = got;
        }
        set(m, c, mine[0]);
        set(m, c + 1, mine[1]);
        set(m + 1, c, mine[2]);
        set(m + 1, c + 1, mine[3]);
      }
    }
  }
  return bits;
}

// With s the raw scores Q K^T and dp the raw dO V^T of one tile (either way round, see
// query_key): s <- P * Z / (1 - p) (what dV needs) and dp <- dS = P * (Z / (1 - p) * dO V^T - delta).
// lse2 and delta are the tile's staged row statistics (indexed by query - m0). When dbias is
// wanted (kWriteDbias, the dQ kernel: every element of a (sequence, head) is visited once), dS
// goes to dbias, or to its fp32 workspace when dbias has broadcast dimensions (BwdParams).
template <class Element, unsigned kFeatures, bool kKeyRows, bool kWriteDbias, class S, class DP, class Coords>
__device__ __forceinline__ void gradient_tile(const BwdParams& p, const detail::MaskRule& rule, const TileOrigin& t,
                                              bool masked, S& s, DP& dp, const Coords& coord, const float* lse2,
                                              const float* delta) {
  transform_scores<Element, (kFeatures & kBias) != 0, kKeyRows>(p, rule, t, masked, s, coord);
  const bool dropout = (kFeatures & kDropout) != 0 && p.dropout;
  const std::uint64_t bh = std::uint64_t(t.b) * std::uint64_t(p.heads_q) + std::uint64_t(t.h);
  [[maybe_unused]] std::uint64_t keep_bits = 0;
  if constexpr ((kFeatures & kDropout) != 0 && (kFeatures & kDropoutPaired) != 0)
    if (dropout) keep_bits = dropout_keep_bits<kKeyRows>(p, t, s.layout(), coord);
  char* dbias = nullptr;
  float* accum = nullptr;
  if (kWriteDbias && p.dbias) {
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
    query_key<kKeyRows>(t, coord, e, &i, &j);
    const int r = int(i - t.m0);
    const float prob = fast_exp2(s(e) - lse2[r]);
    bool keep = true;
    if constexpr ((kFeatures & kDropoutPaired) != 0) keep = !dropout || ((keep_bits >> e) & 1) != 0;
    else keep = !dropout || dropout_keeps(p, bh, i, j);
    const float z = keep ? (dropout ? p.dropout_scale : 1.0f) : 0.0f;
    const float ds = prob * (z * dp(e) - delta[r]);
    s(e) = prob * z;
    dp(e) = ds;
    if constexpr (kWriteDbias) {
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
}

}  // namespace memattn::cuda::sm80
