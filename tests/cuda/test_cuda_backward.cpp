// The CUDA backward against the float64 reference's gradients on every feature case (DESIGN.md
// §3), with the forward's output and LSE as input. Cases the build's backward kernels do not
// cover are skipped with the library's reason. Skipped without a GPU.
#include <gtest/gtest.h>

#include "memattn/attention.hpp"
#include "support/cases.hpp"
#include "support/check.hpp"

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
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  ASSERT_TRUE(w.to_device().ok());
  ASSERT_TRUE(forward(w.forward_args()).ok());
  std::vector<std::vector<unsigned char>> first;
  for (int run = 0; run < 20; ++run) {
    w.poison_outputs();
    const Status st = backward(w.backward_args());
    if (st.code() == StatusCode::unsupported) GTEST_SKIP() << st.message();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(w.copy_outputs_to_host().ok());
    std::vector<std::vector<unsigned char>> grads;
    for (tools::Tensor t : {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv, tools::Tensor::dbias})
      grads.push_back(w.host(t).bytes);
    if (run == 0) first = grads;
    else ASSERT_EQ(grads, first) << "run " << run << " differs";
  }
}

}  // namespace
}  // namespace memattn::testing
