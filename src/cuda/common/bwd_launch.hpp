// Host side shared by every backward row: delta, dbias zeroing, zero gradients for unused keys
// (the prologue), dbias summed over its broadcast dimensions (the epilogue), the gradients'
// conversion from fp32 workspaces (their kernels and launches: cuda/bwd_elementwise.cu), and the
// frame of the rows that add dQ to an fp32 workspace with atomics, all on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/launch.hpp"

namespace memattn::cuda {

inline Status clear_accum(const GradAccum& g, const char* what, cudaStream_t stream) {
  const std::size_t bytes = std::size_t(g.batch * g.rows * g.heads * g.ld) * sizeof(float);
  return cuda_status(cudaMemsetAsync(g.data, 0, bytes, stream), what);
}

// A gradient (out with its strides, `cols` columns) = scale * its fp32 workspace.
template <class Element>
void finish_gradient(const GradAccum& g, void* out, std::int64_t batch_stride, std::int64_t row_stride,
                     std::int64_t head_stride, int cols, float scale, cudaStream_t stream);

// Who gives the keys past seqused_k (variable lengths) their zero gradients: the prologue, or the
// last step of rows that write every gradient element from a workspace (the SIMT rows).
enum class UnusedKeys { zeroed_by_prologue, written_from_workspace };

// Before the gradient kernels: delta (and `zero`, a workspace with delta's rows, cleared by the
// same kernel; null: none), then dbias (or its workspace) zeroed and (UnusedKeys::zeroed_by_prologue)
// zero gradients for keys past seqused_k.
template <class Element>
Status backward_prologue(const BwdParams& p, UnusedKeys unused_keys, cudaStream_t stream,
                         const GradAccum* zero = nullptr);

// After them: dbias summed over its broadcast dimensions.
template <class Element>
Status backward_epilogue(const BwdParams& p, cudaStream_t stream);

// The one-pass rows' split tiles (tail_split.hpp): their parts' arrival counts zeroed before the launch.
inline Status clear_split_counts(const BwdParams& p, cudaStream_t stream) {
  if (p.kv_split_parts <= 1) return Status::Ok();
  const std::size_t bytes = std::size_t(p.num_kv_blocks - p.kv_split_first) * sizeof(int);
  return cuda_status(cudaMemsetAsync(p.kv_split_arrivals, 0, bytes, stream), "split tiles' counts");
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
