// Host-side launch helpers every kernel family uses: CUDA errors as Status, the dynamic
// shared-memory opt-in, one-dimensional grids (CTAs stride over work items past gridDim.x's
// limit), cluster and programmatic dependent launches, and the resource report of a kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/fwd_params.hpp"
#include "cuda/device_info.hpp"
#include "cuda/kernel_table.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return {StatusCode::device_error, std::string(what) + ": " + cudaGetErrorString(e)};
}

// The opt-in to `smem` bytes of dynamic shared memory; none for a kernel without any (the split
// keys' combine, launched at every decoding step).
template <class Kernel>
Status allow_dynamic_smem(Kernel kernel, int smem) {
  if (smem == 0) return Status::Ok();
  return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                     "cudaFuncSetAttribute");
}

// How a kernel follows the one before it on the stream: after its end, or as its programmatic
// dependent (sm_90; dependent_launch.hpp: the kernel waits for that one's end itself, so that its
// launch overlaps that kernel's last CTAs). Plain where the GPU predates sm_90.
enum class LaunchAfter { end, dependent };

// `ctas` CTAs launched with one launch attribute (a cluster shape, a programmatic dependence).
template <class Kernel, class Params>
Status launch_with(cudaLaunchAttribute attribute, Kernel kernel, std::int64_t ctas, int threads, int smem,
                   const Params& p, cudaStream_t stream, const char* what) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(ctas));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = std::size_t(smem);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cuda_status(cudaLaunchKernelEx(&config, kernel, p), what);
}

// One CTA per work item, up to `cap` CTAs (0: no cap); past gridDim.x's limit the CTAs stride
// over the rest.
template <class Kernel, class Params>
Status launch_grid(Kernel kernel, int threads, int smem, std::int64_t work_items, std::int64_t cap, const Params& p,
                   cudaStream_t stream, LaunchAfter after = LaunchAfter::end) {
  if (Status s = allow_dynamic_smem(kernel, smem); !s.ok()) return s;
  std::int64_t grid = cap > 0 ? std::min<std::int64_t>(cap, work_items) : work_items;
  grid = std::min<std::int64_t>(grid, kMaxGridCtas);
  if (grid == 0) return Status::Ok();
  if (after == LaunchAfter::end || compute_capability() < 90) {
    kernel<<<unsigned(grid), threads, smem, stream>>>(p);
    return cuda_status(cudaGetLastError(), "kernel launch");
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return launch_with(attribute, kernel, grid, threads, smem, p, stream, "dependent kernel launch");
}

template <class Kernel>
Status launch(Kernel kernel, int threads, int smem, const FwdParams& p, cudaStream_t stream) {
  return launch_grid(kernel, threads, smem, p.num_blocks, p.grid_ctas, p, stream);
}

template <class Kernel>
Status resources(Kernel kernel, int threads, int smem, KernelResources* r) {
  cudaFuncAttributes attr{};
  if (Status s = cuda_status(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes"); !s.ok()) return s;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  r->threads = threads;
  r->registers = attr.numRegs;
  r->local_bytes = int(attr.localSizeBytes);
  r->smem_bytes = int(attr.sharedSizeBytes) + smem;
  return cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r->blocks_per_sm, kernel, threads, smem),
                     "occupancy");
}

// Clusters of `cluster` CTAs (sm_90), one cluster per work item; past gridDim.x's limit the
// clusters stride over the rest.
template <class Kernel, class Params>
Status launch_clusters(Kernel kernel, int threads, int smem, int cluster, std::int64_t work_items, const Params& p,
                       cudaStream_t stream) {
  if (Status s = allow_dynamic_smem(kernel, smem); !s.ok()) return s;
  const std::int64_t clusters = std::min<std::int64_t>(work_items, kMaxGridCtas / cluster);
  if (clusters == 0) return Status::Ok();
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = unsigned(cluster);
  attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
  return launch_with(attribute, kernel, clusters * cluster, threads, smem, p, stream, "cluster launch");
}

// One CTA per work item (launch_grid, up to `cap` CTAs), or with `split` > 1 one cluster of `split`
// CTAs per work item (the rows that split the head dim; `cap` does not apply).
template <class Kernel, class Params>
Status launch_split(Kernel kernel, int threads, int smem, int split, std::int64_t work_items, std::int64_t cap,
                    const Params& p, cudaStream_t stream) {
  if (split > 1) return launch_clusters(kernel, threads, smem, split, work_items, p, stream);
  return launch_grid(kernel, threads, smem, work_items, cap, p, stream);
}

}  // namespace memattn::cuda
