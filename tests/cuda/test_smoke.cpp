// Runs the toolchain smoke kernels and checks them against a float64 product on the host.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "smoke.hpp"
#include "support/seed.hpp"

namespace memattn::smoke {
namespace {

int device_major() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return prop.major;
}

void run(int (*gemm)(const std::uint16_t*, const std::uint16_t*, float*)) {
  std::mt19937_64 rng(testing::next_seed());
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> a(kRows * kDepth), b(kRows * kDepth);
  for (auto& x : a) x = detail::float_to_bf16(normal(rng));
  for (auto& x : b) x = detail::float_to_bf16(normal(rng));
  std::uint16_t *da, *db;
  float* dc;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&da), a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&db), b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dc), kRows * kRows * 4), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xff, kRows * kRows * 4);  // NaN poison
  ASSERT_EQ(gemm(da, db, dc), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> c(kRows * kRows);
  cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  double diff2 = 0, ref2 = 0;
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kRows; ++j) {
      double ref = 0;
      for (int k = 0; k < kDepth; ++k)
        ref += double(detail::bf16_to_float(a[i * kDepth + k])) * detail::bf16_to_float(b[j * kDepth + k]);
      ASSERT_FALSE(std::isnan(c[i * kRows + j])) << "C[" << i << "," << j << "] not written";
      diff2 += (c[i * kRows + j] - ref) * (c[i * kRows + j] - ref);
      ref2 += ref * ref;
    }
  EXPECT_LT(std::sqrt(diff2 / ref2), 1e-6);
}

#if defined(MEMATTN_FAMILY_SM80)
TEST(CudaSmoke, Sm80MmaSyncGemm) {
  if (device_major() < 8) GTEST_SKIP() << "needs a CUDA device of compute capability 8.0 or newer";
  run(gemm_sm80);
}
#endif

#if defined(MEMATTN_FAMILY_SM90)
TEST(CudaSmoke, Sm90WgmmaTmaGemm) {
  if (device_major() != 9) GTEST_SKIP() << "needs a Hopper (sm_90) device";
  run(gemm_sm90);
}
#endif

}  // namespace
}  // namespace memattn::smoke
