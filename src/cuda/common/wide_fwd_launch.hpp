// Host side of the wide-head forward (wide_fwd_kernel.hpp): one CTA per work item, or one cluster
// of kHeadSplit CTAs per work item for the rows that split the head dim (sm_90).
#pragma once

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/common/wide_fwd_kernel.hpp"

namespace memattn::cuda {

template <class Traits>
constexpr int kWideFwdSmemBytes = int(sizeof(WideFwdSharedStorage<Traits>));

template <class Traits, unsigned kFeatures>
Status launch_forward_wide(const FwdParams& p, cudaStream_t stream) {
  return launch_split(forward_wide_kernel<Traits, kFeatures>, Traits::kThreads, kWideFwdSmemBytes<Traits>,
                      Traits::kHeadSplit, p.num_blocks, p.grid_ctas, p, stream);
}

template <class Traits, unsigned kFeatures>
Status forward_wide_resources(KernelResources* r) {
  return resources(forward_wide_kernel<Traits, kFeatures>, Traits::kThreads, kWideFwdSmemBytes<Traits>, r);
}

}  // namespace memattn::cuda
