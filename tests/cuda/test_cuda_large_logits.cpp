// The fp32 rows keep scores in natural units and take the LSE from the top score (kNaturalLse in
// src/cuda/common/softmax.hpp), and their backward recomputes P against it from the same scores:
// P = 1 exactly on one-hot rows at any logit scale (support/large_logits.hpp). The 16-bit rows keep
// the base-2 path (docs/decisions.md, large logits: their error and why). Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/large_logits.hpp"

namespace memattn::testing {
namespace {

class CudaLargeLogits : public ::testing::TestWithParam<LargeLogitCase> {};

TEST_P(CudaLargeLogits, Fp32OneHotRowsGiveExactDv) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_one_hot_dv(GetParam(), Backend::cuda);
}

std::vector<LargeLogitCase> cases() {
  // D = 96: the register-tile fp32 forward; D = 300: the fp32 rows with global accumulators; D = 64:
  // on sm_90 the warpgroup-MMA forward, whose LSE the mma.sync backward takes.
  return {{DType::f32, 1e3, 1.0, "logit3"},          {DType::f32, 1e4, 1.0, "logit4"},
          {DType::f32, 1e5, 1.0, "logit5"},          {DType::f32, 1e8, 1e4, "inputs1e4"},
          {DType::f32, 1e5, 1.0, "logit5_d300", 300}, {DType::f32, 1e5, 1.0, "logit5_d64", 64},
          {DType::f32, 1e8, 1e4, "inputs1e4_d64", 64}};
}

INSTANTIATE_TEST_SUITE_P(Fp32, CudaLargeLogits, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<LargeLogitCase>& info) { return info.param.name; });

}  // namespace
}  // namespace memattn::testing
