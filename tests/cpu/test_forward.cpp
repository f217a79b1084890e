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

}  // namespace
}  // namespace memattn::testing
