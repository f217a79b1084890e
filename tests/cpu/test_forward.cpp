// The fast CPU forward (src/cpu/forward.cpp) against the float64 reference on every feature case,
// in every dtype: outputs and LSE.
#include <gtest/gtest.h>

#include "support/cases.hpp"
#include "support/check.hpp"

namespace memattn::testing {
namespace {

class CpuForward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CpuForward, MatchesReference) { check_case(GetParam().spec, {/*backward=*/false}); }

INSTANTIATE_TEST_SUITE_P(Features, CpuForward, ::testing::ValuesIn(named_cases(Backend::cpu, {DType::f32, DType::f16, DType::bf16})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// Keys past a sequence's used ones hold NaN: the fast CPU forward sees none of them
// (support/check.hpp), in every dtype.
TEST(CpuForward, UnusedKeysHoldingNaNAreNotSeen) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    tools::ProblemSpec s;
    s.varlen_q = {20, 15};
    s.varlen_k = {70, 60};
    s.seqused_k = {45, 10};
    s.heads_q = 4;
    s.heads_k = 2;
    s.head_dim = s.head_dim_v = 32;
    s.dtype = dtype;
    s.backend = Backend::cpu;
    check_unused_keys_unseen(s);
  }
}

}  // namespace
}  // namespace memattn::testing
