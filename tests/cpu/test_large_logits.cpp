// The CPU backward recomputes the forward's scores bit for bit in the LSE's natural domain
// (src/cpu/score_tile.hpp): P = 1 exactly on one-hot rows in every dtype (support/large_logits.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/large_logits.hpp"

namespace memattn::testing {
namespace {

class LargeLogits : public ::testing::TestWithParam<LargeLogitCase> {};

TEST_P(LargeLogits, OneHotRowsGiveExactDv) { check_one_hot_dv(GetParam(), Backend::cpu); }

std::vector<LargeLogitCase> cases() {
  std::vector<LargeLogitCase> v;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const std::string n = to_string(dt);
    for (double logit : {1e3, 1e4, 1e5}) v.push_back({dt, logit, 1.0, n + "_logit" + std::to_string(int(std::log10(logit)))});
  }
  // The bf16 case: q and k of magnitude 1e4 (scores ~1e8 with scale 1/D).
  v.push_back({DType::bf16, 1e8, 1e4, "bf16_inputs1e4"});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, LargeLogits, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<LargeLogitCase>& info) { return info.param.name; });

}  // namespace
}  // namespace memattn::testing
