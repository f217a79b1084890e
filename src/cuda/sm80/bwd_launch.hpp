// Host side of the sm80 backward: delta, dbias zeroing, zero gradients for unused keys, then the
// dK/dV and dQ kernels, all on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/bwd_params.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/sm80/bwd_dkdv_kernel.hpp"
#include "cuda/sm80/bwd_dq_kernel.hpp"
#include "cuda/sm80/fwd_launch.hpp"

namespace memattn::cuda::sm80 {

// dbias = 0 over its sizes (the dQ kernel then writes the tiles the mask leaves visible).
template <class Element>
__global__ void __launch_bounds__(256) zero_dbias_kernel(const __grid_constant__ BwdParams p) {
  const std::int64_t* n = p.dbias_sizes;
  const std::int64_t total = n[0] * n[1] * n[2] * n[3];
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = e % n[3], i = (e / n[3]) % n[2], h = (e / (n[3] * n[2])) % n[1], b = e / (n[3] * n[2] * n[1]);
    const std::int64_t off = b * p.dbias_batch_stride + h * p.dbias_head_stride + i * p.dbias_row_stride + j * p.dbias_col_stride;
    if (p.bias_is_f32) static_cast<float*>(p.dbias)[off] = 0.0f;
    else static_cast<Element*>(p.dbias)[off] = Element(0.0f);
  }
}

inline unsigned elementwise_grid(std::int64_t items, int per_block) {
  return unsigned(std::min<std::int64_t>((items + per_block - 1) / per_block, 65536));
}

template <class DqTraits, class DkdvTraits, unsigned kFeatures>
Status launch_backward(const BwdParams& p, cudaStream_t stream) {
  using Element = typename DqTraits::Element;
  const std::int64_t delta_rows = (p.seqstart_q ? 1 : p.batch) * p.delta_rows * p.heads_q;
  if (delta_rows > 0) delta_kernel<Element><<<elementwise_grid(delta_rows, 8), 256, 0, stream>>>(p);
  if (p.dbias) {
    const std::int64_t n = p.dbias_sizes[0] * p.dbias_sizes[1] * p.dbias_sizes[2] * p.dbias_sizes[3];
    if (n > 0) zero_dbias_kernel<Element><<<elementwise_grid(n, 256), 256, 0, stream>>>(p);
  }
  if (p.seqused_k) zero_unused_keys_kernel<Element><<<unsigned(p.batch), 256, 0, stream>>>(p);
  if (Status s = cuda_status(cudaGetLastError(), "backward preprocessing"); !s.ok()) return s;
  if (Status s = launch_grid(dkdv_kernel<DkdvTraits, kFeatures>, DkdvTraits::kThreads, DkdvSmem<DkdvTraits>::kBytes,
                             p.num_kv_blocks, 0, p, stream);
      !s.ok())
    return s;
  return launch_grid(dq_kernel<DqTraits, kFeatures>, DqTraits::kThreads, DqSmem<DqTraits>::kBytes, p.num_blocks, 0, p,
                     stream);
}

template <class DqTraits, class DkdvTraits, unsigned kFeatures>
Status backward_resources(KernelResources* r) {
  // The dK/dV kernel carries most of the work; report it.
  return resources(dkdv_kernel<DkdvTraits, kFeatures>, DkdvTraits::kThreads, DkdvSmem<DkdvTraits>::kBytes, r);
}

}  // namespace memattn::cuda::sm80
