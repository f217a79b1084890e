// The fast CPU backward (src/cpu/backward.cpp) against the float64 reference on every feature
// case, in every dtype (after the forward it takes O and LSE from), and its deterministic mode.
#include <gtest/gtest.h>

#include "support/cases.hpp"
#include "support/check.hpp"

namespace memattn::testing {
namespace {

class CpuBackward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CpuBackward, MatchesReference) { check_case(GetParam().spec); }

INSTANTIATE_TEST_SUITE_P(Features, CpuBackward, ::testing::ValuesIn(named_cases(Backend::cpu, {DType::f32, DType::f16, DType::bf16})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// Bit-identical gradients run after run with deterministic = true (fixed thread count).
TEST(CpuBackward, DeterministicIsBitReproducible) {
  tools::ProblemSpec s;
  s.batch = 1;
  s.seqlen_q = s.seqlen_k = 300;
  s.heads_q = 2;
  s.heads_k = 1;
  s.head_dim = s.head_dim_v = 32;
  s.dtype = DType::f32;
  s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
  s.dropout = {0.1, 3, 0};
  s.deterministic = true;
  s.backend = Backend::cpu;
  check_backward_bit_identical(s, 20);
}

}  // namespace
}  // namespace memattn::testing
