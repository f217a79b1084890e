// The CUDA forward against the float64 reference on every feature case (DESIGN.md §3), plus the
// sizes that stress indexing: batch x heads above 65535, and a sequence past 65536 keys with a
// dense bias whose offsets pass 2^31 (a 2^31-element bias, 4.3 GB). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "memattn/attention.hpp"
#include "support/cases.hpp"
#include "support/check.hpp"
#include "support/dropout_masks.hpp"

namespace memattn::testing {
namespace {

class CudaForward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CudaForward, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_case(GetParam().spec, {/*backward=*/false});
}

INSTANTIATE_TEST_SUITE_P(Features, CudaForward, ::testing::ValuesIn(named_cases(Backend::cuda, {DType::bf16, DType::f16, DType::f32})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

TEST(CudaForward, DropoutMaskMatchesTheMapping) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) check_dropout_masks(Backend::cuda, /*backward=*/false, dtype);
}

TEST(CudaForwardSizes, BatchTimesHeadsAbove65535) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 1100;
  s.heads_q = s.heads_k = 64;  // 70400 (sequence, head) pairs
  s.seqlen_q = s.seqlen_k = 9;
  s.head_dim = s.head_dim_v = 32;
  s.dtype = DType::bf16;
  s.backend = Backend::cuda;
  check_case(s, {false});
}

// Scores with a spread of ~23 (log2 units) per row: tiles after the first raise a row's maximum
// by more than softmax.hpp's kMaxRiseLog2 again and again, so the maximum moves mid-row (and the
// output is rescaled) instead of settling, in the register rows (D = 32), the wide rows (D = 512)
// and the pair (D = 1000, sm_90); causal bottom-right too, whose first tiles are partly masked.
TEST(CudaForwardSoftmax, MaximumMovesMidRow) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::int64_t d : {32, 512, 1000}) {
    for (const bool causal : {false, true}) {
      tools::ProblemSpec s;
      s.batch = 1;
      s.heads_q = s.heads_k = 2;
      s.seqlen_q = 70;
      s.seqlen_k = 333;  // five key tiles of 64 and a partial one
      s.head_dim = s.head_dim_v = d;
      s.scale = 16.0 / std::sqrt(double(d));  // scores spread ~16 natural units, ~23 in log2
      if (causal) s.mask = Mask::causal(Alignment::bottom_right);
      s.dtype = DType::bf16;
      s.backend = Backend::cuda;
      SCOPED_TRACE("D = " + std::to_string(d) + (causal ? ", causal" : ""));
      check_case(s, {false});
    }
  }
}

TEST(CudaForwardSizes, LongSequenceWithDenseBiasNeedsInt64Offsets) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 1;
  s.heads_q = s.heads_k = 1;
  s.seqlen_q = 32769;  // with bottom-right alignment the last rows read bias offsets past 2^31
  s.seqlen_k = 65540;  // and more than 65536 keys
  s.head_dim = s.head_dim_v = 64;
  s.dtype = DType::bf16;
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  s.mask = Mask::window(40, 3, Alignment::bottom_right);  // keeps the float64 reference cheap
  s.with_dbias = false;
  s.backend = Backend::cuda;
  check_case(s, {false});
}

}  // namespace
}  // namespace memattn::testing
