// What the dispatcher and the launches ask of the current device.
#pragma once

#include <cuda_runtime_api.h>

namespace memattn::cuda {

// The current device's compute capability as major * 10 + minor (90 for an H100); 0 without one.
inline int compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major * 10 + minor;
}

}  // namespace memattn::cuda
