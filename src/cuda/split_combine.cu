// Split keys, the combine (split_keys.hpp has the kernel's side): each query row's parts, an
// output normalised over its part's keys and that part's LSE, merge into out and lse:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) out_s (weights taken as
//   exp(lse_s - max) / sum_t exp(lse_t - max)).
// One CTA per (sequence, head, row): its threads weigh the parts, then its warps take every
// kWarps-th part, kPartsAtOnce of them at once, lanes over the head_dim_v columns, and add their
// sums through shared memory. A part without keys (LSE -inf) weighs 0; a row without keys in every
// part gets out 0 and LSE -inf; a NaN LSE makes the row NaN, as a NaN score does in one pass.
#include <cuda_runtime_api.h>

#include <cute/numeric/numeric_types.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/common/dependent_launch.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/common/split_keys.hpp"
#include "cuda/key_splits.hpp"
#include "cuda/split_combine.hpp"

namespace memattn::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kWarpSize = 32;
constexpr int kThreads = kWarps * kWarpSize;
// Columns a warp's lanes hold at once (per lane: kColumns / 32 sums in registers), and the parts
// a warp reads at once: all their loads in flight before the first sum, so that a CTA reads 64
// parts in one trip to memory. One part at a time, a warp waited on each of its 8 in turn: B 1 /
// 8k keys / 32-8 heads / D = 128, 64 parts, the combine took 10.4 us, now 5.4 (H100, ncu, caches
// flushed).
constexpr int kColumns = 128;
constexpr int kPartsAtOnce = 8;
// Registers for four CTAs per SM (64 a thread; uncapped, the run's loads took 116 and two CTAs):
// decoding has few rows, but chunked prefill has a row per query (2048 rows at B 4 x 32 heads x
// 16 queries), and each SM should hold several of them.
constexpr int kMinCtasPerSm = 4;
// Enough CTAs to fill the GPU; each strides over the rest.
constexpr std::int64_t kMaxBlocks = 4096;
static_assert(kMaxKeySplits <= kThreads, "one thread weighs each part");

// The CTA's max (or sum) of one value per thread, through `scratch` (kWarps floats).
template <bool kMax>
__device__ float cta_reduce(float v, float* scratch) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(~0u, v, offset);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  __syncthreads();  // scratch is free
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kWarps; ++w) v = kMax ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// Why a CTA per row: decoding has few rows (B 1, 8 kv heads x 4 query heads: 32) and up to 64
// parts each, and a warp per row read a column's parts one after another: 32 warps on the GPU,
// each waiting on 64 L2 reads per column. With this combine and the 16-row decoding tile, B 1 /
// 8k keys / 32-8 heads / D = 128 went from 56 to 29 us (H100, bf16, bench/decode.py).
template <class Element>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) split_combine_kernel(const __grid_constant__ FwdParams p) {
  __shared__ float weight[kMaxKeySplits];
  __shared__ float sums[kWarps][kColumns];
  __shared__ float scratch[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  wait_for_prerequisite_grid();  // the forward kernel's parts (launched as its dependent below)
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const std::int64_t split_stride = p.partial_batch * p.heads_q * p.partial_rows;
  for (std::int64_t item = blockIdx.x; item < rows; item += gridDim.x) {
    const std::int64_t row = item % p.seqlen_q;
    const int h = int(item / p.seqlen_q % p.heads_q);
    const int b = int(item / p.seqlen_q / p.heads_q);
    const SequenceInfo seq = sequence_info(p, b);
    if (row >= seq.q_len) continue;  // the same for the whole CTA
    const std::int64_t first = partial_offset(p, seq, h, 0) + row;
    const bool mine = int(threadIdx.x) < p.num_splits;
    const float l = mine ? p.partial_lse[first + threadIdx.x * split_stride] : -INFINITY;
    const float top = cta_reduce<true>(l, scratch);
    const bool nan = __syncthreads_or(l != l);
    Element* out = o_at<Element>(p, seq.batch, seq.q_begin + row, h);
    float lse = -INFINITY;
    if (top == -INFINITY && !nan) {  // no key in any part
      for (int c = threadIdx.x; c < p.head_dim_v; c += kThreads) out[c] = Element(0.0f);
    } else {
      const float e = mine ? expf(l - top) : 0.0f;
      const float sum = cta_reduce<false>(e, scratch);
      lse = top + logf(sum);
      // The weights from the sum, not exp(l - lse): lse is rounded at the scores' magnitude (to
      // 1e-3 at scores of 1e4), which exp(l - lse) passed on to the output: fp32, 3xTF32, scores
      // of std 1e4, out's error 1.6e-5 against 1.4e-7 without split keys.
      if (mine) weight[threadIdx.x] = e / sum;
      __syncthreads();
      for (int c0 = 0; c0 < p.head_dim_v; c0 += kColumns) {
        constexpr int kPerLane = kColumns / kWarpSize;
        float acc[kPerLane] = {};
        const auto part_at = [&](int s) { return p.partial_out + (first + s * split_stride) * p.head_dim_v + c0; };
        int s = warp;
        // Whole runs of kPartsAtOnce parts, then the rest one at a time (few parts: each warp has
        // one or two, and unrolled runs of mostly absent parts cost chunked prefill, whose combine
        // has a row per query, 4% at B 4 x 32 heads x 16 queries x 8k keys).
        for (; s + (kPartsAtOnce - 1) * kWarps < p.num_splits; s += kPartsAtOnce * kWarps) {
          float v[kPartsAtOnce][kPerLane];
#pragma unroll
          for (int u = 0; u < kPartsAtOnce; ++u) {
            const float* part = part_at(s + u * kWarps);
#pragma unroll
            for (int k = 0; k < kPerLane; ++k) {
              const int c = lane + k * kWarpSize;
              v[u][k] = c0 + c < p.head_dim_v ? part[c] : 0.0f;
            }
          }
#pragma unroll
          for (int u = 0; u < kPartsAtOnce; ++u) {
            const float w = weight[s + u * kWarps];
#pragma unroll
            for (int k = 0; k < kPerLane; ++k) acc[k] += w * v[u][k];
          }
        }
        for (; s < p.num_splits; s += kWarps) {
          const float w = weight[s];
          const float* part = part_at(s);
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int c = lane + k * kWarpSize;
            if (c0 + c < p.head_dim_v) acc[k] += w * part[c];
          }
        }
#pragma unroll
        for (int k = 0; k < kColumns / kWarpSize; ++k) sums[warp][lane + k * kWarpSize] = acc[k];
        __syncthreads();
        for (int c = threadIdx.x; c < kColumns && c0 + c < p.head_dim_v; c += kThreads) {
          float total = 0.0f;
          for (int w = 0; w < kWarps; ++w) total += sums[w][c];
          out[c0 + c] = Element(total);
        }
        __syncthreads();  // sums and weight are reused
      }
    }
    if (p.lse != nullptr && threadIdx.x == 0)
      p.lse[seq.batch * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_begin + row) * p.lse_row_stride] = lse;
  }
}

// As the forward kernel's dependent: its CTAs wait for the parts instead of for the launch.
template <class Element>
Status launch(const FwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  return launch_grid(split_combine_kernel<Element>, kThreads, 0, std::max<std::int64_t>(1, std::min(rows, kMaxBlocks)),
                     0, p, stream, LaunchAfter::dependent);
}

}  // namespace

Status launch_split_combine(const FwdParams& p, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::bf16: return launch<cute::bfloat16_t>(p, stream);
    case DType::f16: return launch<cute::half_t>(p, stream);
    case DType::f32: return launch<float>(p, stream);
    default: return {StatusCode::internal_error, std::string("split combine: dtype ") + to_string(dtype)};
  }
}

}  // namespace memattn::cuda
