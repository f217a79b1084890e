// The current GPU as the CUDA tests need it: its architecture (the Hopper rows run on sm_90 only)
// and its SM count (problems sized to outnumber a persistent grid's CTAs), and the build's rows of
// a kind. A runtime error fails the calling test.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memattn/kernels.hpp"

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

// The names of the build's kernel-table rows that start with `prefix` and contain `part`
// ("bwd_sm90_", "_tma_": the warp-specialised Hopper backward).
inline std::vector<std::string> rows_named(const std::string& prefix, const std::string& part) {
  std::vector<std::string> out;
  for (const KernelInfo& k : list_kernels())
    if (k.name.compare(0, prefix.size(), prefix) == 0 && k.name.find(part) != std::string::npos) out.push_back(k.name);
  return out;
}

// Whether a row's name ends with its features' tag ("_bias", "_drop": rows_named's rows that take
// those problems).
inline bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace memattn::testing
