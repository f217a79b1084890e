// What the dispatcher, the planner and the launches ask of the current device.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <utility>

namespace memattn::cuda {

// An attribute of the current device, asked of the driver once per device (0 without one): every
// call plans and launches, and each query is a driver call.
inline int device_attribute(cudaDeviceAttr attribute) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{device, int(attribute)};
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) return 0;
  return known[key] = value;
}

// The current device's compute capability as major * 10 + minor (90 for an H100); 0 without one.
inline int compute_capability() {
  return device_attribute(cudaDevAttrComputeCapabilityMajor) * 10 +
         device_attribute(cudaDevAttrComputeCapabilityMinor);
}

}  // namespace memattn::cuda
