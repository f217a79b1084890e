// The CPU tiles' exponential (src/cpu/vec_math.hpp): relative error against libm over the range
// the softmax uses, exp(0) = 1 exactly, and exactly 0 (never NaN) for masked (-inf) scores.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "cpu/vec_math.hpp"
#include "support/seed.hpp"

namespace memattn::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kMaxRelError = 2e-7;  // the header promises about 1e-7; float's ulp is 1.2e-7

double rel_error(float got, double want) { return std::abs(double(got) - want) / want; }

TEST(VecMath, ExpFastMatchesExp) {
  std::mt19937_64 g(testing::next_seed());
  std::uniform_real_distribution<float> wide(-87.0f, 88.0f), near_zero(-1.0f, 1.0f);
  for (int n = 0; n < 200000; ++n) {
    const float x = n % 2 ? wide(g) : near_zero(g);
    ASSERT_LE(rel_error(exp_fast(x), std::exp(double(x))), kMaxRelError) << "x = " << x;
  }
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
  EXPECT_LE(rel_error(exp_fast(-7.0f), std::exp(-7.0)), kMaxRelError);
}

// Masked scores are -inf: their weight must be exactly 0, and below the normal range too.
TEST(VecMath, MaskedScoresWeighNothing) {
  EXPECT_EQ(exp_fast(-kInf), 0.0f);
  EXPECT_EQ(exp_fast(-87.5f), 0.0f);
  EXPECT_EQ(exp_fast(-1e30f), 0.0f);
  EXPECT_GT(exp_fast(-86.9f), 0.0f);
}

// Issue 30 #14: every input is defined (no NaN or out-of-range value reaches the integer
// conversion, which UBSan reported) and the results are those of std::exp.
TEST(VecMath, NonFiniteAndHugeInputsMatchLibm) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inputs[] = {nan, -nan, kInf, -kInf, 1e30f, -1e30f, 3.4e38f, -3.4e38f, 89.0f, 200.0f};
  for (float x : inputs) {
    const double e = std::exp(double(x));
    const float want = std::isnan(x) ? nan : (e > 3.4028234663852886e38 ? kInf : float(e));
    const float got = exp_fast(x);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "exp_fast(" << x << ") = " << got;
    } else {
      EXPECT_EQ(got, want) << "exp_fast(" << x << ")";
    }
  }
  // The top of the finite range: finite and close to libm (the reduced argument reaches ln 2).
  for (float x = 88.0f; x <= 88.72f; x += 0.01f) {
    ASSERT_TRUE(std::isfinite(exp_fast(x))) << x;
    ASSERT_LE(rel_error(exp_fast(x), std::exp(double(x))), 5e-6) << "x = " << x;
  }
}

}  // namespace
}  // namespace memattn::cpu
