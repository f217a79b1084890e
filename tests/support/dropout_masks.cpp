#include "support/dropout_masks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "memattn/dropout.hpp"
#include "support/check.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {

// With V = identity (Dv = Mk), O[i, j] = P[i, j] * Z[i, j] / (1 - p) shows the forward's mask; with
// dO = identity (Dv = Mq), dV[j, i] = P[i, j] * Z[i, j] / (1 - p) shows the backward's. Both must
// equal dropout_keep, element for element, on the given backend.
void check_dropout_masks(Backend backend, bool backward, DType dtype, const KernelOverrides& forward_overrides,
                         const KernelOverrides& backward_overrides, Precision precision) {
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 48;
  s.seqlen_k = 40;
  s.heads_q = 2;
  s.heads_k = 1;
  s.head_dim = 8;
  s.head_dim_v = 48;  // >= Mq and >= Mk
  s.dtype = dtype;
  s.dropout = {0.4, 0xDEADBEEF12345ull, 77};
  s.backend = backend;
  s.forward_overrides = forward_overrides;
  s.backward_overrides = backward_overrides;
  s.precision = precision;
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
  const Status fs = forward(w.forward_args());
  ASSERT_TRUE(fs.ok()) << fs.to_string();
  if (backward) {
    const Status bs = memattn::backward(w.backward_args());
    ASSERT_TRUE(bs.ok()) << bs.to_string();
  }
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  const std::vector<double> out = w.to_double(tools::Tensor::out), dv = w.to_double(tools::Tensor::dv);
  // An element reads as kept when it is not 0, which the NaN poison of an unwritten (or a NaN)
  // element also is: every element read must be finite.
  const auto non_finite = [](const std::vector<double>& x) {
    return std::count_if(x.begin(), x.end(), [](double e) { return !std::isfinite(e); });
  };
  ASSERT_EQ(non_finite(out), 0) << "out: elements not finite";
  if (backward) ASSERT_EQ(non_finite(dv), 0) << "dv: elements not finite";
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
  if (!backward) return;
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

}  // namespace memattn::testing
