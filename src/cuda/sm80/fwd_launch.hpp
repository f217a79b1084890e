// Host side of one sm80 forward instantiation: shared-memory limit, grid, launch.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "cuda/fwd_params.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/sm80/fwd_kernel.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm80 {

template <class Traits, unsigned kFeatures>
Status launch_forward(const FwdParams& p, cudaStream_t stream) {
  auto kernel = forward_kernel<Traits, kFeatures>;
  constexpr int kSmem = Traits::kSmemBytes;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem))
    return {StatusCode::device_error, std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e)};
  // One CTA per work item; past gridDim.x's limit the CTAs stride over the rest.
  const std::int64_t grid = std::min<std::int64_t>(p.num_blocks, 0x7fffffff);
  if (grid == 0) return Status::Ok();
  kernel<<<unsigned(grid), Traits::kThreads, kSmem, stream>>>(p);
  if (cudaError_t e = cudaGetLastError())
    return {StatusCode::device_error, std::string("forward kernel launch: ") + cudaGetErrorString(e)};
  return Status::Ok();
}

template <class Traits, unsigned kFeatures>
Status forward_resources(KernelResources* r) {
  auto kernel = forward_kernel<Traits, kFeatures>;
  constexpr int kSmem = Traits::kSmemBytes;
  cudaFuncAttributes attr{};
  if (cudaError_t e = cudaFuncGetAttributes(&attr, kernel))
    return {StatusCode::device_error, std::string("cudaFuncGetAttributes: ") + cudaGetErrorString(e)};
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  r->threads = Traits::kThreads;
  r->registers = attr.numRegs;
  r->local_bytes = int(attr.localSizeBytes);
  r->smem_bytes = int(attr.sharedSizeBytes) + kSmem;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r->blocks_per_sm, kernel, Traits::kThreads, kSmem))
    return {StatusCode::device_error, std::string("occupancy: ") + cudaGetErrorString(e)};
  return Status::Ok();
}

}  // namespace memattn::cuda::sm80
