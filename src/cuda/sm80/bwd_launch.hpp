// Host side of the sm80 backward: delta, dbias zeroing, zero gradients for unused keys, the dK/dV
// and dQ kernels (tensor-core register rows, or the SIMT global-accumulator rows), then the dbias
// reduction over broadcast dimensions, all on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/bwd_launch.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm80/bwd_dkdv_kernel.hpp"
#include "cuda/sm80/bwd_dq_kernel.hpp"
#include "cuda/sm80/bwd_global_kernel.hpp"
#include "cuda/sm80/bwd_simt_kernel.hpp"

namespace memattn::cuda::sm80 {

// The dynamic shared memory of each row's kernels.
template <class DkdvTraits, unsigned kFeatures>
constexpr int kDkdvSmemBytes = int(sizeof(DkdvSharedStorage<DkdvTraits, kFeatures>));
template <class DqTraits, unsigned kFeatures>
constexpr int kDqSmemBytes = int(sizeof(DqSharedStorage<DqTraits, kFeatures>));
template <class Traits>
constexpr int kSimtSmemBytes = int(sizeof(SimtBwdSharedStorage<Traits>));
template <class Traits>
constexpr int kGaccSmemBytes = int(sizeof(GlobalBwdSharedStorage<Traits>));

template <class DqTraits, class DkdvTraits, unsigned kFeatures>
Status launch_backward(const BwdParams& p, cudaStream_t stream) {
  using Element = typename DqTraits::Element;
  if (Status s = backward_prologue<Element>(p, UnusedKeys::zeroed_by_prologue, stream); !s.ok()) return s;
  if (Status s = launch_grid(dkdv_kernel<DkdvTraits, kFeatures>, DkdvTraits::kThreads, kDkdvSmemBytes<DkdvTraits, kFeatures>,
                             p.num_kv_blocks, 0, p, stream);
      !s.ok())
    return s;
  if (Status s = launch_grid(dq_kernel<DqTraits, kFeatures>, DqTraits::kThreads, kDqSmemBytes<DqTraits, kFeatures>,
                             p.num_blocks, 0, p, stream);
      !s.ok())
    return s;
  return backward_epilogue<Element>(p, stream);
}

// The global-accumulator (SIMT) rows: the gradient workspaces zeroed, both kernels, then the
// gradients written from the workspaces (every element, so keys past seqused_k get zeros too).
template <class Traits, unsigned kFeatures>
Status launch_backward_global(const BwdParams& p, cudaStream_t stream) {
  using Element = typename Traits::Element;
  if (Status s = backward_prologue<Element>(p, UnusedKeys::written_from_workspace, stream); !s.ok()) return s;
  for (const GradAccum* g : {&p.dq_accum, &p.dk_accum, &p.dv_accum})
    if (Status s = clear_accum(*g, "gradient workspace", stream); !s.ok()) return s;
  if (Status s = launch_grid(dkdv_simt_kernel<Traits, kFeatures>, Traits::kThreads, kSimtSmemBytes<Traits>, p.num_kv_blocks,
                             0, p, stream);
      !s.ok())
    return s;
  if (Status s = launch_grid(dq_simt_kernel<Traits, kFeatures>, Traits::kThreads, kSimtSmemBytes<Traits>, p.num_blocks, 0,
                             p, stream);
      !s.ok())
    return s;
  finish_gradient<Element>(p.dq_accum, p.dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, p.head_dim,
                           p.scale, stream);
  finish_gradient<Element>(p.dk_accum, p.dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, p.head_dim,
                           p.scale, stream);
  finish_gradient<Element>(p.dv_accum, p.dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, p.head_dim_v,
                           1.0f, stream);
  if (Status s = cuda_status(cudaGetLastError(), "gradient conversion"); !s.ok()) return s;
  return backward_epilogue<Element>(p, stream);
}

// The tensor-core global-accumulator rows: both kernels on grids capped at the CTAs that fit at
// once, each CTA with its workspace slot.
template <class Traits, unsigned kFeatures>
Status launch_backward_gacc(const BwdParams& p, cudaStream_t stream) {
  using Element = typename Traits::Element;
  if (Status s = backward_prologue<Element>(p, UnusedKeys::zeroed_by_prologue, stream); !s.ok()) return s;
  if (Status s = launch_grid(dkdv_global_kernel<Traits, kFeatures>, Traits::kThreads, kGaccSmemBytes<Traits>,
                             p.num_kv_blocks, p.kv_grid_ctas, p, stream);
      !s.ok())
    return s;
  if (Status s = launch_grid(dq_global_kernel<Traits, kFeatures>, Traits::kThreads, kGaccSmemBytes<Traits>, p.num_blocks,
                             p.grid_ctas, p, stream);
      !s.ok())
    return s;
  return backward_epilogue<Element>(p, stream);
}

template <class Traits, unsigned kFeatures>
Status backward_gacc_resources(KernelResources* r) {
  return resources(dkdv_global_kernel<Traits, kFeatures>, Traits::kThreads, kGaccSmemBytes<Traits>, r);
}

template <class Traits, unsigned kFeatures>
Status backward_global_resources(KernelResources* r) {
  return resources(dkdv_simt_kernel<Traits, kFeatures>, Traits::kThreads, kSimtSmemBytes<Traits>, r);
}

template <class DqTraits, class DkdvTraits, unsigned kFeatures>
Status backward_resources(KernelResources* r) {
  // The dK/dV kernel carries most of the work; report it.
  return resources(dkdv_kernel<DkdvTraits, kFeatures>, DkdvTraits::kThreads, kDkdvSmemBytes<DkdvTraits, kFeatures>, r);
}

}  // namespace memattn::cuda::sm80
