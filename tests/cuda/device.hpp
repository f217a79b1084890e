// The current GPU as the CUDA tests need it: its architecture (the Hopper rows run on sm_90 only)
// and its SM count (problems sized to outnumber a persistent grid's CTAs). A runtime error fails
// the calling test.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace memattn::testing {

struct GpuInfo {
  int arch = 0;  // major * 10 + minor
  int sms = 0;
};

inline GpuInfo current_gpu() {
  int device = 0, major = 0, minor = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return {major * 10 + minor, sms};
}

}  // namespace memattn::testing
