// Host side of the Hopper forward: the tensor maps of Q, K and V, the work items' counter cleared,
// the launch on the persistent grid the scheduler sized (one CTA per SM, at most one per work
// item), and the resource report.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm90/fwd/kernel.hpp"
#include "cuda/sm90/tma_map.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
constexpr int kFwdSmemBytes = int(sizeof(FwdSharedStorage<Traits>));

// The maps of Q, K and V as the producer addresses them: (column, row, head, batch). The rows
// end at the sequence's length, so a box past it arrives as zeros (fixed lengths only: select.cpp).
template <class Traits>
Status forward_tensor_maps(const FwdParams& p, TmaFwdParams* tp) {
  constexpr DType kDType = std::is_same_v<typename Traits::Element, cute::bfloat16_t> ? DType::bf16 : DType::f16;
  if (p.seqstart_q != nullptr)
    return {StatusCode::internal_error, "sm90 forward: a variable-length problem reached a TMA row"};
  const TmaTensor q{p.q, kDType, p.head_dim, p.seqlen_q, p.heads_q, p.batch,
                    p.q_row_stride, p.q_head_stride, p.q_batch_stride};
  const TmaTensor k{p.k, kDType, p.head_dim, p.seqlen_k, p.heads_k, p.batch,
                    p.k_row_stride, p.k_head_stride, p.k_batch_stride};
  const TmaTensor v{p.v, kDType, p.head_dim_v, p.seqlen_k, p.heads_k, p.batch,
                    p.v_row_stride, p.v_head_stride, p.v_batch_stride};
  if (Status s = make_tma_map(q, Traits::kBlockM, &tp->q); !s.ok()) return s;
  if (Status s = make_tma_map(k, Traits::kBlockN, &tp->k); !s.ok()) return s;
  return make_tma_map(v, Traits::kBlockN, &tp->v);
}

template <class Traits, unsigned kFeatures>
Status launch_forward(const FwdParams& p, cudaStream_t stream) {
  static_assert(kFeatures == kPlain, "the Hopper forward takes plain problems");
  TmaFwdParams tp{};
  tp.p = p;
  if (Status s = forward_tensor_maps<Traits>(p, &tp); !s.ok()) return s;
  if (p.items_drawn == nullptr)
    return {StatusCode::internal_error, "sm90 forward: no workspace for the work items' counter"};
  if (Status s = cuda_status(cudaMemsetAsync(p.items_drawn, 0, sizeof(*p.items_drawn), stream), "work items' counter");
      !s.ok())
    return s;
  // p.grid_ctas: the resident CTAs (schedule.cpp), one per SM.
  return launch_grid(forward_kernel<Traits>, Traits::kThreads, kFwdSmemBytes<Traits>, p.num_blocks, p.grid_ctas, tp,
                     stream);
}

template <class Traits, unsigned kFeatures>
Status forward_resources(KernelResources* r) {
  return resources(forward_kernel<Traits>, Traits::kThreads, kFwdSmemBytes<Traits>, r);
}

}  // namespace memattn::cuda::sm90
