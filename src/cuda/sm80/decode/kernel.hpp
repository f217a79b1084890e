// The decoding forward: at most 8 query rows per work item (one query row per sequence, or the g
// query heads of a kv head as its rows, pack_gqa.hpp), keys split over CTAs (split_keys.hpp).
//
// Why a kernel of its own: the general register forward's one-warp 16-row tile (fwd_kernel.hpp)
// pads the MMAs' rows three quarters and needs many CTAs per SM to read at speed, so its keys are
// split into many parts that a combine merges (six at B 16 / 32-8 heads on an H200). Here four
// warps share a work item and read its keys at about an SM's share of the bandwidth, so the parts
// only fill the GPU one CTA an SM (kernel_table.py's split_ctas_per_sm), and from about one
// (sequence, kv head) pair an SM no split or combine runs at all:
// - four warps of the CTA share its work item, each taking 16 keys of every 64-key tile, and
//   merge their softmax states through shared memory at the end;
// - the CTA's threads copy each K and V tile whole (cp.async, rows of contiguous 16-byte chunks)
//   into a ring of kStages tiles in shared memory, kStages - 1 ahead, and the warps read their
//   fragments from it (fragments.hpp);
// - both GEMMs transposed, the rows as the MMA's n dimension: 8 rows, not 16.
//
// Every feature of the plain forward: masks and windows (scores masked in the key tiles that
// need it), variable lengths with seqused_k, a KV cache of one page per sequence read as strided
// tensors, its append, fully masked rows, D != Dv within the bucket.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/cache_append.hpp"
#include "cuda/common/cp_async.hpp"
#include "cuda/common/dependent_launch.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/paged_kv.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/split_keys.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/decode/fragments.hpp"

namespace memattn::cuda::sm80 {

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_>
struct DecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpKeys = 16;  // keys of a tile per warp: one m-tile of S^T
  static_assert(kBlockM == 8, "the rows are the MMA's n dimension");
  static_assert(kBlockN == kWarps * kWarpKeys, "each warp takes 16 keys of a tile");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the decoding tile serves head dims 64 and 128");
  static constexpr int kChunks = kHeadDim / decode::kChunk;  // 16-byte chunks a row
  static constexpr int kTileChunks = kBlockN * kChunks;
  static constexpr int kCopies = kTileChunks / kThreads;  // a thread's copies of a K (or V) tile
  static_assert(kCopies * kThreads == kTileChunks && kThreads % kChunks == 0);
  static constexpr int kKSteps = kHeadDim / 16;    // k-steps of S^T
  static constexpr int kDimTiles = kHeadDim / 16;  // m-tiles of O^T
  // Tiles of K and V in the ring: 96 KB at D = 128 (two CTAs an SM), 64 KB at 64 (three).
  static constexpr int kStages = kHeadDim == 64 ? 4 : 3;
};

// The ring of K and V tiles (fragments.hpp's slots) and, once the walk is done, what the warps hand
// to the merge: each one's output rows (unnormalised, fp32, head dims in order), row maxima (log2
// units) and row sums.
template <class Traits>
struct DecodeSharedStorage {
  struct Merge {
    float o[Traits::kWarps][Traits::kBlockM][Traits::kHeadDim];
    float row_max[Traits::kWarps][Traits::kBlockM];
    float row_sum[Traits::kWarps][Traits::kBlockM];
  };
  union {
    uint4 ring[Traits::kStages][2][Traits::kTileChunks];  // [stage][K, V][slot]
    Merge merge;
  };
};

template <class Traits>
__device__ void forward_decode_tile(const FwdParams& p, const WorkItem& work, char* smem) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kChunks = Traits::kChunks;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;

  const SequenceInfo seq = p.cache_seqlens != nullptr ? cache_sequence_info(p, work.b) : sequence_info(p, work.b);
  const int hk = work.h / p.group;
  const std::int64_t kv_batch = p.cache_seqlens != nullptr ? contiguous_cache_row(p, work.b) : seq.batch;
  const OneCacheRow cache_row{p.cache_seqlens != nullptr ? kv_batch : 0};
  // The append (cache_append.hpp): every new row by the first CTA of each (sequence, kv head),
  // before anything can return, as in fwd_kernel.hpp.
  if (p.cache_k_new != nullptr && work.split == 0 && work.m_block == 0 && work.h % p.group == 0)
    write_new_rows<Element, Traits::kThreads>(p, work.b, hk, seq.k_len, 0, seq.k_len, cache_row);
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  int n_first = int(key_begin / kBlockN), n_last = int((key_end - 1) / kBlockN);
  if (key_begin >= key_end || !split_key_tiles(p, work.split, &n_first, &n_last)) {
    if (p.num_splits > 1) write_empty_partial<Traits::kThreads>(p, seq, work.h, work.split, m0, rows);
    else write_empty_rows<Element>(p, seq, work.h, m0, rows, int(threadIdx.x), Traits::kThreads);
    return;
  }
  // Key tiles [n_full_lo, n_full_hi] need no mask: every row sees every key, none past k_len.
  const int n_full_lo = int((rule.first_key(m0 + rows - 1) + kBlockN - 1) / kBlockN);
  const int n_full_hi = int(min(rule.end_key(m0), seq.k_len) / kBlockN) - 1;
  if (p.cache_k_new != nullptr) {
    write_new_rows<Element, Traits::kThreads>(p, work.b, hk, seq.k_len, std::int64_t(n_first) * kBlockN,
                                              (std::int64_t(n_last) + 1) * kBlockN, cache_row);
    __syncthreads();  // the new rows are written before any thread of the CTA reads them
  }

  // Q^T as B operands, kept for the whole walk: row g at head dims 16ks + 2t, 2t + 1 and
  // 16ks + 2t + 8, 2t + 9 (zero past `rows` and head_dim).
  std::uint32_t q_frag[Traits::kKSteps][2];
  {
    const Element* q_row = q_at<Element>(p, seq.batch, seq.q_begin + m0 + min(g, rows - 1), work.h);
    CUTE_UNROLL
    for (int ks = 0; ks < Traits::kKSteps; ++ks)
      CUTE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int d = 16 * ks + 2 * t + 8 * half;
        q_frag[ks][half] = g < rows && d < p.head_dim ? *reinterpret_cast<const std::uint32_t*>(q_row + d) : 0u;
      }
  }

  // The CTA's copies of tile n_first + step into ring stage `stage`: thread i takes chunk
  // i % kChunks of every kThreads / kChunks-th row from row i / kChunks; keys past k_len and head
  // dims past D (Dv) are zero-filled (the mask hides those keys, and their V rows must not be NaN).
  auto& storage = *reinterpret_cast<DecodeSharedStorage<Traits>*>(smem);
  constexpr int kRowStep = Traits::kThreads / kChunks;
  const int copy_chunk = int(threadIdx.x) % kChunks, copy_row = int(threadIdx.x) / kChunks;
  const Element* k_first = k_at<Element>(p, kv_batch, seq.k_begin, hk) + copy_chunk * decode::kChunk;
  const Element* v_first = v_at<Element>(p, kv_batch, seq.k_begin, hk) + copy_chunk * decode::kChunk;
  const int k_bytes = copy_chunk * decode::kChunk < p.head_dim ? 16 : 0;
  const int v_bytes = copy_chunk * decode::kChunk < p.head_dim_v ? 16 : 0;
  const auto copy_tile = [&](int stage, int step) {
    const std::int64_t key0 = std::int64_t(n_first + step) * kBlockN + copy_row;
    CUTE_UNROLL
    for (int i = 0; i < Traits::kCopies; ++i) {
      const std::int64_t key = key0 + i * kRowStep;
      const bool in = key < seq.k_len;
      const std::int64_t at = in ? key : 0;
      const int dst = decode::slot<kChunks>(copy_row + i * kRowStep, copy_chunk);
      cp_async_zfill16(&storage.ring[stage][0][dst], k_first + at * p.k_row_stride, in ? k_bytes : 0);
      cp_async_zfill16(&storage.ring[stage][1][dst], v_first + at * p.v_row_stride, in ? v_bytes : 0);
    }
  };

  // The first key of this warp's 16 in the first tile.
  const std::int64_t warp_key0 = std::int64_t(n_first) * kBlockN + warp * Traits::kWarpKeys;

  // This lane's rows (2t, 2t + 1 of the tile) and their visible keys, for the tiles with a mask.
  std::int64_t first_key[2], end_key[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    first_key[r] = rule.first_key(m0 + 2 * t + r);
    end_key[r] = min(rule.end_key(m0 + 2 * t + r), seq.k_len);
  }

  float acc_o[Traits::kDimTiles][4];
  CUTE_UNROLL
  for (int i = 0; i < Traits::kDimTiles; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.0f;
  // The views OnlineSoftmax takes, (rows, columns): the lane's two rows are each fragment's
  // columns 2t and 2t + 1, and its keys (or head dims) the fragments' rows g and g + 8.
  Tensor acc_o_rc = cute::make_tensor(&acc_o[0][0], make_layout(make_shape(_2{}, make_shape(_2{}, Int<Traits::kDimTiles>{})),
                                                                make_stride(_1{}, make_stride(_2{}, _4{}))));
  OnlineSoftmax<2, 8, 4> softmax;  // a row's keys are spread over the 8 lane groups g (lanes 4 apart)
  softmax.init();

  // The rows this lane addresses for ldmatrix: K's matrices are (keys 0-7, 8-15) x (chunks 2ks,
  // 2ks + 1), V's (chunks 2i, 2i + 1) x (keys 0-7, 8-15), each lane giving row lane % 8 of one.
  const int k_row = warp * Traits::kWarpKeys + lane % 8 + 8 * (lane / 8 % 2), k_chunk = lane / 16;
  const int v_row = warp * Traits::kWarpKeys + lane % 8 + 8 * (lane / 16), v_chunk = lane / 8 % 2;
  const auto compute_step = [&](int stage, int step) __attribute__((always_inline)) {
    const uint4* k_tile = storage.ring[stage][0];
    const uint4* v_tile = storage.ring[stage][1];
    float acc_s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    CUTE_UNROLL
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
      std::uint32_t a[4];
      decode::ldmatrix_x4(&k_tile[decode::slot<kChunks>(k_row, 2 * ks + k_chunk)], a);
      decode::mma16816<Element>(acc_s, a, q_frag[ks][0], q_frag[ks][1]);
    }
    // Scores to log2 units (a negative scale too), masked where the tile needs it.
    const int n = n_first + step;
    CUTE_UNROLL
    for (int e = 0; e < 4; ++e) acc_s[e] *= p.scale_log2;
    if (n < n_full_lo || n > n_full_hi) {
      const std::int64_t key0 = warp_key0 + std::int64_t(step) * kBlockN + g;
      CUTE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const std::int64_t key = key0 + 8 * (e / 2);
        if (key < first_key[e % 2] || key >= end_key[e % 2]) acc_s[e] = -INFINITY;
      }
    }
    Tensor scores = cute::make_tensor(&acc_s[0], make_layout(make_shape(_2{}, _2{}), make_stride(_1{}, _2{})));
    softmax.update(scores, acc_o_rc, 1.0f);
    // P^T as B: keys 2t, 2t + 1 (and + 8) at row g.
    const std::uint32_t p0 = decode::transpose8x8(pack_pair<Element>(acc_s[0], acc_s[1]));
    const std::uint32_t p1 = decode::transpose8x8(pack_pair<Element>(acc_s[2], acc_s[3]));
    CUTE_UNROLL
    for (int i = 0; i < Traits::kDimTiles; ++i) {
      std::uint32_t a[4];
      decode::ldmatrix_x4_trans(&v_tile[decode::slot<kChunks>(v_row, 2 * i + v_chunk)], a);
      decode::mma16816<Element>(acc_o[i], a, p0, p1);
    }
  };

  // The walk: tile i from ring stage i % kStages, copied kStages - 1 tiles ahead. The barrier of
  // step i sees tile i landed (every thread's copies) and every warp done with tile i - 1, whose
  // stage the copies issued next overwrite.
  const int steps = n_last - n_first + 1;
  CUTE_UNROLL
  for (int s = 0; s + 1 < Traits::kStages; ++s) {
    if (s < steps) copy_tile(s, s);
    cp_async_fence();
  }
  CUTE_NO_UNROLL
  for (int i = 0; i < steps; ++i) {
    cp_async_wait<Traits::kStages - 2>();
    __syncthreads();
    if (i + Traits::kStages - 1 < steps) copy_tile((i + Traits::kStages - 1) % Traits::kStages, i + Traits::kStages - 1);
    cp_async_fence();
    compute_step(i % Traits::kStages, i);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring before the merge reuses its space

  // Merge the warps: each hands over its rows' max, full sum and unnormalised output.
  auto& merge = storage.merge;
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float sum = row_sum_all<8, 4>(softmax.row_sum[r]);
    if (g == 0) {
      merge.row_max[warp][2 * t + r] = softmax.row_max[r];
      merge.row_sum[warp][2 * t + r] = sum;
    }
    CUTE_UNROLL
    for (int i = 0; i < Traits::kDimTiles; ++i)
      CUTE_UNROLL
      for (int half = 0; half < 2; ++half) merge.o[warp][2 * t + r][16 * i + g + 8 * half] = acc_o[i][2 * half + r];
  }
  __syncthreads();

  // Each thread writes kPerThread head dims of one row: out = sum_w 2^(max_w - max) o_w / sum.
  constexpr int kThreadsPerRow = Traits::kThreads / kBlockM;
  constexpr int kPerThread = Traits::kHeadDim / kThreadsPerRow;
  const int row = threadIdx.x / kThreadsPerRow, d0 = threadIdx.x % kThreadsPerRow * kPerThread;
  float top = -INFINITY;
  CUTE_UNROLL
  for (int w = 0; w < Traits::kWarps; ++w) top = fmaxf(top, merge.row_max[w][row]);
  const float shift = top == -INFINITY ? 0.0f : top;
  float weight[Traits::kWarps], total = 0.0f;
  CUTE_UNROLL
  for (int w = 0; w < Traits::kWarps; ++w) {
    weight[w] = fast_exp2(merge.row_max[w][row] - shift);
    total += weight[w] * merge.row_sum[w][row];
  }
  const bool empty = top == -INFINITY || !(total > 0.0f);
  const float norm = empty ? 0.0f : 1.0f / total;
  const float lse = empty ? -INFINITY : (top + __log2f(total)) * kLn2;
  float out[kPerThread];
  CUTE_UNROLL
  for (int c = 0; c < kPerThread; ++c) {
    float x = 0.0f;
    CUTE_UNROLL
    for (int w = 0; w < Traits::kWarps; ++w) x += weight[w] * merge.o[w][row][d0 + c];
    out[c] = x * norm;
  }
  if (row >= rows) return;
  const bool first_of_row = threadIdx.x % kThreadsPerRow == 0;
  // Whole runs of kPerThread head dims leave as vectors (Dv is a multiple of 8: the row's alignment).
  const bool whole = d0 + kPerThread <= p.head_dim_v;
  if (p.num_splits > 1) {
    const std::int64_t at = partial_offset(p, seq, work.h, work.split) + m0 + row;
    float* dst = p.partial_out + at * p.head_dim_v + d0;
    if (whole) {
      CUTE_UNROLL
      for (int c = 0; c < kPerThread; c += 4) *reinterpret_cast<float4*>(dst + c) = make_float4(out[c], out[c + 1], out[c + 2], out[c + 3]);
    }
    if (first_of_row) p.partial_lse[at] = lse;
    return;
  }
  if (whole) {
    std::uint32_t packed[kPerThread / 2];
    CUTE_UNROLL
    for (int c = 0; c < kPerThread; c += 2) packed[c / 2] = pack_pair<Element>(out[c], out[c + 1]);
    Element* dst = o_at<Element>(p, seq.batch, seq.q_begin + m0 + row, work.h) + d0;
    if constexpr (kPerThread == 8)
      *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    else
      *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
  }
  if (first_of_row && p.lse != nullptr)
    p.lse[seq.batch * p.lse_batch_stride + work.h * p.lse_head_stride + (seq.q_begin + m0 + row) * p.lse_row_stride] =
        lse;
}

// Two CTAs per SM (the ring's shared memory allows two at D = 128).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 2) forward_decode_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(16) char smem[];
  let_dependents_start();  // the split keys' combine, which waits for this kernel's end
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    forward_decode_tile<Traits>(p, decode_work(p, index), smem);
    __syncthreads();  // shared memory is reused by the next work item
  }
}

}  // namespace memattn::cuda::sm80
