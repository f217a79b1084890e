// Split keys, the combine (split_keys.hpp has the kernel's side): each query row's parts, an
// output normalised over its part's keys and that part's LSE, merge into out and lse:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) out_s.
// One warp per (sequence, head, row), its lanes over the head_dim_v columns. A part without keys
// (LSE -inf) weighs 0; a row without keys in every part gets out 0 and LSE -inf; a NaN LSE makes
// the row NaN, as a NaN score does in one pass.
#include <cuda_runtime_api.h>

#include <cute/numeric/numeric_types.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/split_keys.hpp"
#include "cuda/split_combine.hpp"

namespace memattn::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kWarpSize = 32;
// Enough warps to fill the GPU; each strides over the rest.
constexpr std::int64_t kMaxBlocks = 4096;

template <class Element>
__global__ void __launch_bounds__(kWarps * kWarpSize) split_combine_kernel(const __grid_constant__ FwdParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const std::int64_t split_stride = p.partial_batch * p.heads_q * p.partial_rows;
  const std::int64_t step = std::int64_t(gridDim.x) * kWarps;
  for (std::int64_t item = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize; item < rows; item += step) {
    const std::int64_t row = item % p.seqlen_q;
    const int h = int(item / p.seqlen_q % p.heads_q);
    const int b = int(item / p.seqlen_q / p.heads_q);
    const SequenceInfo seq = sequence_info(p, b);
    if (row >= seq.q_len) continue;
    const std::int64_t first = partial_offset(p, seq, h, 0) + row;
    float top = -INFINITY;
    bool nan = false;
    for (int s = lane; s < p.num_splits; s += kWarpSize) {
      const float l = p.partial_lse[first + s * split_stride];
      top = fmaxf(top, l);
      nan |= l != l;
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) top = fmaxf(top, __shfl_xor_sync(~0u, top, offset));
    nan = __any_sync(~0u, nan);
    Element* out = o_at<Element>(p, seq.batch, seq.q_begin + row, h);
    float lse = -INFINITY;
    if (top == -INFINITY && !nan) {  // no key in any part
      for (int c = lane; c < p.head_dim_v; c += kWarpSize) out[c] = Element(0.0f);
    } else {
      float total = 0.0f;
      for (int s = 0; s < p.num_splits; ++s) total += expf(p.partial_lse[first + s * split_stride] - top);
      lse = top + logf(total);
      for (int c = lane; c < p.head_dim_v; c += kWarpSize) {
        float acc = 0.0f;
        for (int s = 0; s < p.num_splits; ++s) {
          const std::int64_t part = first + s * split_stride;
          acc += expf(p.partial_lse[part] - lse) * p.partial_out[part * p.head_dim_v + c];
        }
        out[c] = Element(acc);
      }
    }
    if (p.lse != nullptr && lane == 0)
      p.lse[seq.batch * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_begin + row) * p.lse_row_stride] = lse;
  }
}

template <class Element>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const unsigned blocks = unsigned(std::max<std::int64_t>(1, std::min((rows + kWarps - 1) / kWarps, kMaxBlocks)));
  split_combine_kernel<Element><<<blocks, kWarps * kWarpSize, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

Status launch_split_combine(const FwdParams& p, DType dtype, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  switch (dtype) {
    case DType::bf16: err = launch<cute::bfloat16_t>(p, stream); break;
    case DType::f16: err = launch<cute::half_t>(p, stream); break;
    default: return {StatusCode::internal_error, std::string("split combine: dtype ") + to_string(dtype)};
  }
  if (err != cudaSuccess) return {StatusCode::device_error, std::string("split combine kernel: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace memattn::cuda
