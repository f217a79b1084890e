// Host side shared by every backward row: delta, dbias zeroing, zero gradients for unused keys
// (the prologue), dbias summed over its broadcast dimensions (the epilogue), and the frame of the
// rows that add dQ to an fp32 workspace with atomics, all on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/launch.hpp"

namespace memattn::cuda {

// dbias = 0 over its sizes (BwdParams::dbias_zero, when its memory has gaps): a CTA per row, the
// row's (b, h, i) worked out once.
template <class Element>
__global__ void __launch_bounds__(256) zero_dbias_kernel(const __grid_constant__ BwdParams p) {
  const std::int64_t* n = p.dbias_sizes;
  for (std::int64_t row = blockIdx.x; row < n[0] * n[1] * n[2]; row += gridDim.x) {
    const std::int64_t i = row % n[2], h = (row / n[2]) % n[1], b = row / (n[2] * n[1]);
    const std::int64_t off = b * p.dbias_batch_stride + h * p.dbias_head_stride + i * p.dbias_row_stride;
    for (std::int64_t j = threadIdx.x; j < n[3]; j += blockDim.x) {
      if (p.bias_is_f32) static_cast<float*>(p.dbias)[off + j * p.dbias_col_stride] = 0.0f;
      else static_cast<Element*>(p.dbias)[off + j * p.dbias_col_stride] = Element(0.0f);
    }
  }
}

// dbias from its fp32 workspace: each dbias element is the sum of the workspace elements that
// map to it (one with atomics, where the workspace has dbias's reduced shape; the broadcast
// copies in a fixed order otherwise).
template <class Element>
__global__ void __launch_bounds__(256) reduce_dbias_kernel(const __grid_constant__ BwdParams p) {
  const std::int64_t* reduced = p.dbias_reduced_sizes;
  const std::int64_t* w = p.dbias_accum_sizes;
  std::int64_t copies[4], stride[4];
  for (int d = 0; d < 4; ++d) copies[d] = w[d] / reduced[d];
  stride[3] = 1;
  for (int d = 2; d >= 0; --d) stride[d] = stride[d + 1] * w[d + 1];
  const std::int64_t total = reduced[0] * reduced[1] * reduced[2] * reduced[3];
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = e % reduced[3], i = (e / reduced[3]) % reduced[2];
    const std::int64_t h = (e / (reduced[3] * reduced[2])) % reduced[1], b = e / (reduced[3] * reduced[2] * reduced[1]);
    float sum = 0.0f;
    for (std::int64_t cb = 0; cb < copies[0]; ++cb)
      for (std::int64_t ch = 0; ch < copies[1]; ++ch)
        for (std::int64_t ci = 0; ci < copies[2]; ++ci) {
          const float* row = p.dbias_accum + (b + cb) * stride[0] + (h + ch) * stride[1] + (i + ci) * stride[2] + j;
          for (std::int64_t cj = 0; cj < copies[3]; ++cj) sum += row[cj];
        }
    const std::int64_t off = b * p.dbias_batch_stride + h * p.dbias_head_stride + i * p.dbias_row_stride + j * p.dbias_col_stride;
    if (p.bias_is_f32) static_cast<float*>(p.dbias)[off] = sum;
    else static_cast<Element*>(p.dbias)[off] = Element(sum);
  }
}

inline unsigned elementwise_grid(std::int64_t items, int per_block) {
  return unsigned(std::min<std::int64_t>((items + per_block - 1) / per_block, 65536));
}

// The grid of the row-streaming kernels (bwd_common.hpp): runs of `rows_per_cta` rows along x, the
// (b, h) pairs along y (the kernels stride over those past 65535).
inline dim3 head_rows_grid(std::int64_t batch_heads, std::int64_t rows, int rows_per_cta) {
  return dim3(unsigned((rows + rows_per_cta - 1) / rows_per_cta), unsigned(std::min<std::int64_t>(batch_heads, 65535)));
}

inline Status clear_accum(const GradAccum& g, const char* what, cudaStream_t stream) {
  const std::size_t bytes = std::size_t(g.batch * g.rows * g.heads * g.ld) * sizeof(float);
  return cuda_status(cudaMemsetAsync(g.data, 0, bytes, stream), what);
}

// A gradient (out with its strides, `cols` columns) = scale * its fp32 workspace.
// pick(std::integral_constant<int, kGroup>) for the lanes per row that lanes_per_row chose: the
// elementwise kernel instantiated for them.
template <class Pick>
auto kernel_for_lanes(int lanes, const Pick& pick) {
  return lanes == 8    ? pick(std::integral_constant<int, 8>{})
         : lanes == 16 ? pick(std::integral_constant<int, 16>{})
                       : pick(std::integral_constant<int, 32>{});
}

// Whether every row of a tensor (its base and strides) starts on a multiple of `bytes`.
inline bool rows_aligned(const void* base, std::int64_t element_bytes, std::initializer_list<std::int64_t> strides,
                         std::int64_t bytes) {
  bool aligned = reinterpret_cast<std::uintptr_t>(base) % std::uintptr_t(bytes) == 0;
  for (std::int64_t stride : strides) aligned = aligned && stride * element_bytes % bytes == 0;
  return aligned;
}

template <class Element>
void finish_gradient(const GradAccum& g, void* out, std::int64_t batch_stride, std::int64_t row_stride,
                     std::int64_t head_stride, int cols, float scale, cudaStream_t stream) {
  if (g.batch * g.rows * g.heads * cols == 0) return;
  const int lanes = lanes_per_row<8>(cols);
  const bool vec = cols % 4 == 0 && rows_aligned(out, sizeof(Element), {batch_stride, row_stride, head_stride},
                                                 4 * sizeof(Element));
  const auto kernel = kernel_for_lanes(lanes, [&](auto group) {
    constexpr int kGroup = decltype(group)::value;
    return vec ? finish_gradient_kernel<Element, kGroup, true> : finish_gradient_kernel<Element, kGroup, false>;
  });
  kernel<<<head_rows_grid(g.batch * g.heads, g.rows, kRowPasses * kElementwiseThreads / lanes), kElementwiseThreads, 0,
           stream>>>(g, static_cast<Element*>(out), batch_stride, row_stride, head_stride, cols, scale);
}

// Who gives the keys past seqused_k (variable lengths) their zero gradients: the prologue, or the
// last step of rows that write every gradient element from a workspace (the SIMT rows).
enum class UnusedKeys { zeroed_by_prologue, written_from_workspace };

// Before the gradient kernels: delta (and `zero`, a workspace with delta's rows, cleared by the
// same kernel; null: none), then dbias (or its workspace) zeroed and (UnusedKeys::zeroed_by_prologue)
// zero gradients for keys past seqused_k.
template <class Element>
Status backward_prologue(const BwdParams& p, UnusedKeys unused_keys, cudaStream_t stream,
                         const GradAccum* zero = nullptr) {
  const std::int64_t batch_heads = (p.seqstart_q ? 1 : p.batch) * p.heads_q;
  const std::int64_t delta_rows = batch_heads * p.delta_rows;
  GradAccum cleared{};
  if (zero != nullptr) {
    if (zero->rows == p.delta_rows && zero->heads == p.heads_q && zero->batch * zero->rows * zero->heads == delta_rows)
      cleared = *zero;
    else if (Status s = clear_accum(*zero, "gradient workspace", stream); !s.ok()) return s;
  }
  if (delta_rows > 0) {
    // Elements a load: 16 bytes, 4, or 1, as O's and dO's rows allow.
    const auto rows_allow = [&](int n) {
      const std::int64_t bytes = n * sizeof(Element);
      return p.head_dim_v % n == 0 &&
             rows_aligned(p.out, sizeof(Element), {p.o_batch_stride, p.o_row_stride, p.o_head_stride}, bytes) &&
             rows_aligned(p.dout, sizeof(Element), {p.do_batch_stride, p.do_row_stride, p.do_head_stride}, bytes);
    };
    constexpr int kWide = 16 / sizeof(Element);
    const int chunk = rows_allow(kWide) ? kWide : rows_allow(4) ? 4 : 1;
    const int lanes = lanes_per_row<kWide>(p.head_dim_v);
    const auto kernel = kernel_for_lanes(lanes, [&](auto group) {
      constexpr int kGroup = decltype(group)::value;
      return chunk == kWide ? delta_kernel<Element, kGroup, kWide>
             : chunk == 4   ? delta_kernel<Element, kGroup, 4>
                            : delta_kernel<Element, kGroup, 1>;
    });
    kernel<<<head_rows_grid(batch_heads, p.delta_rows, kRowPasses * kElementwiseThreads / lanes), kElementwiseThreads, 0,
             stream>>>(p, cleared);
  }
  if (p.dbias_accum) {
    const std::int64_t* w = p.dbias_accum_sizes;
    if (Status s = cuda_status(cudaMemsetAsync(p.dbias_accum, 0, std::size_t(w[0] * w[1] * w[2] * w[3]) * sizeof(float), stream),
                               "dbias workspace");
        !s.ok())
      return s;
  } else if (p.dbias_zero && p.dbias_dense_bytes > 0) {
    if (Status s = cuda_status(cudaMemsetAsync(p.dbias, 0, std::size_t(p.dbias_dense_bytes), stream), "dbias zeroing");
        !s.ok())
      return s;
  } else if (p.dbias_zero) {
    const std::int64_t rows = p.dbias_sizes[0] * p.dbias_sizes[1] * p.dbias_sizes[2];
    if (rows > 0 && p.dbias_sizes[3] > 0) zero_dbias_kernel<Element><<<elementwise_grid(rows, 1), 256, 0, stream>>>(p);
  }
  if (unused_keys == UnusedKeys::zeroed_by_prologue && p.seqused_k)
    zero_unused_keys_kernel<Element><<<unsigned(p.batch), 256, 0, stream>>>(p);
  return cuda_status(cudaGetLastError(), "backward preprocessing");
}

// The one-pass rows' split tiles (tail_split.hpp): their parts' arrival counts zeroed before the launch.
inline Status clear_split_counts(const BwdParams& p, cudaStream_t stream) {
  if (p.kv_split_parts <= 1) return Status::Ok();
  const std::size_t bytes = std::size_t(p.num_kv_blocks - p.kv_split_first) * sizeof(int);
  return cuda_status(cudaMemsetAsync(p.kv_split_arrivals, 0, bytes, stream), "split tiles' counts");
}

// After them: dbias summed over its broadcast dimensions.
template <class Element>
Status backward_epilogue(const BwdParams& p, cudaStream_t stream) {
  if (!p.dbias_accum) return Status::Ok();
  const std::int64_t* r = p.dbias_reduced_sizes;
  const std::int64_t n = r[0] * r[1] * r[2] * r[3];
  if (n > 0) reduce_dbias_kernel<Element><<<elementwise_grid(n, 256), 256, 0, stream>>>(p);
  return cuda_status(cudaGetLastError(), "dbias reduction");
}

// The rows whose one kernel adds dQ to an fp32 workspace with atomics: the workspace zeroed (by
// the delta kernel), launch_kernel(), then dQ written from the workspace.
template <class Element, class LaunchKernel>
Status launch_backward_dq_atomics(const BwdParams& p, cudaStream_t stream, LaunchKernel&& launch_kernel) {
  if (Status s = backward_prologue<Element>(p, UnusedKeys::zeroed_by_prologue, stream, &p.dq_accum); !s.ok()) return s;
  if (Status s = launch_kernel(); !s.ok()) return s;
  finish_gradient<Element>(p.dq_accum, p.dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, p.head_dim,
                           p.scale, stream);
  if (Status s = cuda_status(cudaGetLastError(), "dQ conversion"); !s.ok()) return s;
  return backward_epilogue<Element>(p, stream);
}

}  // namespace memattn::cuda
