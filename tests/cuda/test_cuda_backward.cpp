// The CUDA backward against the float64 reference's gradients on every feature case (DESIGN.md
// §3), with the forward's output and LSE as input. Cases the build's backward kernels do not
// cover are skipped with the library's reason. Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memattn/attention.hpp"
#include "support/cases.hpp"
#include "support/check.hpp"
#include "support/dropout_masks.hpp"

namespace memattn::testing {
namespace {

class CudaBackward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CudaBackward, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  CheckOptions options;
  options.skip_unsupported_backward = true;
  check_case(GetParam().spec, options);
}

INSTANTIATE_TEST_SUITE_P(Features, CudaBackward, ::testing::ValuesIn(named_cases(Backend::cuda, {DType::bf16, DType::f16, DType::f32})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// The same cases at head dims of the larger buckets (64, 128 and 256, where the one-pass rows
// run): D = 64, 120 and 248 (Dv 56, 112 and 240 where the case has Dv != D). The cases beyond
// 128 and the 1013-row one (slow on the reference) are left out.
std::vector<NamedCase> wide_head_cases() {
  std::vector<NamedCase> out;
  for (const int d : {64, 120, 248})
    for (NamedCase c : named_cases(Backend::cuda, {DType::bf16, DType::f16})) {
      tools::ProblemSpec& s = c.spec;
      if (s.head_dim > 128 || s.seqlen_q > 1000) continue;
      const bool same = s.head_dim == s.head_dim_v;
      s.head_dim = d;
      s.head_dim_v = same ? d : d - 8;
      c.name = "d" + std::to_string(d) + "_" + c.name;
      out.push_back(c);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(WideHeads, CudaBackward, ::testing::ValuesIn(wide_head_cases()),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// The backward regenerates exactly the forward's mask (dV with dO = identity shows it).
TEST(CudaBackward, DropoutMaskMatchesTheMapping) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) check_dropout_masks(Backend::cuda, /*backward=*/true, dtype);
}

// Bit-identical gradients run after run (the kernels own their output rows: no atomics).
TEST(CudaBackwardDeterminism, TwentyRunsAreBitIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 200;
  s.seqlen_k = 300;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = 64;
  s.dtype = DType::bf16;
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  s.dropout = {0.1, 5, 0};
  s.deterministic = true;
  s.backend = Backend::cuda;
  check_backward_bit_identical(s, 20);
}

// The same with a bias shared by the batch and the heads ([1, 1, Mq, Mk]): dbias is summed over
// them in a fixed order.
TEST(CudaBackwardDeterminism, BroadcastDbiasIsBitIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 130;
  s.seqlen_k = 77;
  s.heads_q = 4;
  s.heads_k = 4;
  s.head_dim = s.head_dim_v = 32;
  s.dtype = DType::f16;
  s.bias = tools::BiasPattern{true, true, false, false};
  s.mask = Mask::causal();
  s.deterministic = true;
  s.backend = Backend::cuda;
  check_backward_bit_identical(s, 20);
}

}  // namespace
}  // namespace memattn::testing
