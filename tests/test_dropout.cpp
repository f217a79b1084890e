// Dropout: the kept fraction, the documented counter mapping, and identical masks across the
// reference, the forward and the backward of a backend.
#include <gtest/gtest.h>

#include <cmath>

#include "memattn/dropout.hpp"
#include "memattn/reference.hpp"
#include "support/check.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

TEST(Dropout, ThresholdRoundsP) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25), 0x40000000u);
  EXPECT_EQ(dropout_threshold(std::nextafter(1.0, 0.0)), 0xffffffffu);
}

// The kept fraction of 4M elements is within 6 binomial standard deviations of 1 - p.
TEST(Dropout, KeptFractionIsOneMinusP) {
  for (double p : {0.1, 0.5, 0.9}) {
    const std::int64_t heads = 4, rows = 512, cols = 2048;
    std::int64_t kept = 0;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) kept += dropout_keep(123, 9, 1, h, heads, i, j, p);
    const double n = double(heads * rows * cols);
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(double(kept), n * (1 - p), 6 * sigma) << "p = " << p;
  }
}

// Changing any coordinate of the mapping changes the mask: (seed, offset, b, h, i, j) all count.
TEST(Dropout, EveryCoordinateMatters) {
  const auto mask = [](std::uint64_t seed, std::uint64_t offset, std::int64_t b, std::int64_t h, std::int64_t i) {
    std::vector<bool> m;
    for (std::int64_t j = 0; j < 256; ++j) m.push_back(dropout_keep(seed, offset, b, h, 4, i, j, 0.5));
    return m;
  };
  const auto base = mask(1, 0, 0, 0, 0);
  EXPECT_NE(base, mask(2, 0, 0, 0, 0));
  EXPECT_NE(base, mask(1ull << 32 | 1, 0, 0, 0, 0));
  EXPECT_NE(base, mask(1, 1, 0, 0, 0));
  EXPECT_NE(base, mask(1, 0, 1, 0, 0));
  EXPECT_NE(base, mask(1, 0, 0, 1, 0));
  EXPECT_NE(base, mask(1, 0, 0, 0, 1));
  EXPECT_EQ(base, mask(1, 0, 0, 0, 0));
}

// With V = identity (Dv = Mk), O[i, j] = P[i, j] * Z[i, j] / (1 - p) shows the forward's mask; with
// dO = identity (Dv = Mq), dV[j, i] = P[i, j] * Z[i, j] / (1 - p) shows the backward's. Both must
// equal dropout_keep, element for element, on the given backend.
void check_masks(Backend backend) {
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 48;
  s.seqlen_k = 40;
  s.heads_q = 2;
  s.heads_k = 1;
  s.head_dim = 8;
  s.head_dim_v = 48;  // >= Mq and >= Mk
  s.dtype = DType::f32;
  s.dropout = {0.4, 0xDEADBEEF12345ull, 77};
  s.backend = backend;
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  const auto identity = [&](tools::Tensor t, std::int64_t rows, std::int64_t heads) {
    std::vector<double> values(std::size_t(s.batch * rows * heads * s.head_dim_v), 0.0);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t h = 0; h < heads; ++h) values[std::size_t(((b * rows + r) * heads + h) * s.head_dim_v + r)] = 1.0;
    w.set_values(t, values);
  };
  identity(tools::Tensor::v, s.seqlen_k, s.heads_k);
  identity(tools::Tensor::dout, s.seqlen_q, s.heads_q);
  if (backend == Backend::cuda) ASSERT_TRUE(w.to_device().ok());
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  ASSERT_TRUE(backward(w.backward_args()).ok());
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  const std::vector<double> out = w.to_double(tools::Tensor::out), dv = w.to_double(tools::Tensor::dv);
  std::int64_t mismatches = 0, kept = 0;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h)
      for (std::int64_t i = 0; i < s.seqlen_q; ++i)
        for (std::int64_t j = 0; j < s.seqlen_k; ++j) {
          const bool keep = dropout_keep(s.dropout.seed, s.dropout.offset, b, h, s.heads_q, i, j, s.dropout.p);
          const bool fwd_keep = out[std::size_t(((b * s.seqlen_q + i) * s.heads_q + h) * s.head_dim_v + j)] != 0.0;
          mismatches += keep != fwd_keep;
          kept += keep;
        }
  EXPECT_EQ(mismatches, 0) << "forward mask differs from dropout_keep";
  EXPECT_GT(kept, 0);
  // Backward: dV[b, j, 0, i] = sum_h P Z / (1-p) over both heads; zero iff dropped in both heads
  // (or P underflowed, which random normal inputs at this size do not produce).
  std::int64_t bwd_mismatches = 0;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t j = 0; j < s.seqlen_k; ++j)
      for (std::int64_t i = 0; i < s.seqlen_q; ++i) {
        bool any = false;
        for (std::int64_t h = 0; h < s.heads_q; ++h)
          any |= dropout_keep(s.dropout.seed, s.dropout.offset, b, h, s.heads_q, i, j, s.dropout.p);
        const bool bwd_any = dv[std::size_t((b * s.seqlen_k + j) * s.head_dim_v + i)] != 0.0;
        bwd_mismatches += any != bwd_any;
      }
  EXPECT_EQ(bwd_mismatches, 0) << "backward mask differs from dropout_keep";
}

TEST(Dropout, ForwardAndBackwardMasksMatchTheMappingOnCpu) { check_masks(Backend::cpu); }
TEST(Dropout, ForwardAndBackwardMasksMatchTheMappingInTheReference) { check_masks(Backend::reference); }

}  // namespace
}  // namespace memattn::testing
