// Host side of the decoding forward's instantiations (kernel.hpp): launch and resource report.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm80/decode/kernel.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm80 {

template <class Traits, unsigned kFeatures>
Status launch_forward_decode(const FwdParams& p, cudaStream_t stream) {
  static_assert(kFeatures == kPlain, "the decoding tile runs plain problems");
  return launch(forward_decode_kernel<Traits>, Traits::kThreads, int(sizeof(DecodeSharedStorage<Traits>)), p, stream);
}

template <class Traits, unsigned kFeatures>
Status forward_decode_resources(KernelResources* r) {
  return resources(forward_decode_kernel<Traits>, Traits::kThreads, int(sizeof(DecodeSharedStorage<Traits>)), r);
}

}  // namespace memattn::cuda::sm80
