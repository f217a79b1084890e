// Host side of the sm80 forward instantiations: shared-memory limit, grid, launch, and the
// resource report of each kernel.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm80/fwd_fp32_kernel.hpp"
#include "cuda/sm80/fwd_global_kernel.hpp"
#include "cuda/sm80/fwd_kernel.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm80 {

// The register forward's shared memory: Q, K, V, and the bias tile of the kBiasTile rows.
template <class Traits, unsigned kFeatures>
constexpr int forward_smem_bytes() {
  return int(sizeof(ForwardSharedStorage<Traits, kFeatures>));
}

template <class Traits, unsigned kFeatures>
Status launch_forward(const FwdParams& p, cudaStream_t stream) {
  return launch(forward_kernel<Traits, kFeatures>, Traits::kThreads, forward_smem_bytes<Traits, kFeatures>(), p,
                stream);
}

template <class Traits, unsigned kFeatures>
Status forward_resources(KernelResources* r) {
  return resources(forward_kernel<Traits, kFeatures>, Traits::kThreads, forward_smem_bytes<Traits, kFeatures>(), r);
}

template <class Traits, unsigned kFeatures>
Status launch_forward_global(const FwdParams& p, cudaStream_t stream) {
  return launch(forward_global_kernel<Traits, kFeatures>, Traits::kThreads, int(sizeof(GlobalFwdSharedStorage<Traits>)), p,
                stream);
}

template <class Traits, unsigned kFeatures>
Status forward_global_resources(KernelResources* r) {
  return resources(forward_global_kernel<Traits, kFeatures>, Traits::kThreads, int(sizeof(GlobalFwdSharedStorage<Traits>)), r);
}

template <class Traits, unsigned kFeatures>
Status launch_forward_fp32(const FwdParams& p, cudaStream_t stream) {
  return launch(forward_fp32_kernel<Traits, kFeatures>, Traits::kThreads, int(sizeof(Fp32FwdSharedStorage<Traits>)), p,
                stream);
}

template <class Traits, unsigned kFeatures>
Status forward_fp32_resources(KernelResources* r) {
  return resources(forward_fp32_kernel<Traits, kFeatures>, Traits::kThreads, int(sizeof(Fp32FwdSharedStorage<Traits>)), r);
}

}  // namespace memattn::cuda::sm80
