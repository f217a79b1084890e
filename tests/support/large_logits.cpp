// The one-hot large-logit check (large_logits.hpp).
#include "support/large_logits.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "memattn/reference.hpp"
#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

// Unit roundoff of each dtype (round to nearest: half the spacing of the numbers at 1).
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
  }
  return 0;
}

// Scores this far below a row's maximum have exp(-gap) below float's smallest subnormal 2^-149:
// every float exponential gives them exactly 0, so the row's sum is exactly 1.
const double kOneHotGap = 149 * std::log(2.0);

}  // namespace

void check_one_hot_dv(const LargeLogitCase& c, Backend backend) {
  tools::ProblemSpec s;
  s.batch = 1;
  s.seqlen_q = 150;  // more rows than keys: several rows share a dominant key; ragged tiles
  s.seqlen_k = 70;
  s.heads_q = 2;
  s.heads_k = 1;  // a group of two query heads: dV sums over both
  // The scale below then is no power of two, so scale * Q K^T is a float product with a rounding
  // (a power-of-two scale would hide a difference of scaling between the passes).
  s.head_dim = s.head_dim_v = c.head_dim;
  s.dtype = c.dtype;
  s.backend = backend;
  const double m2 = c.input_magnitude * c.input_magnitude;
  s.scale = c.logit / (double(s.head_dim) * m2);
  SCOPED_TRACE(s.describe());
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());

  tools::Workload w(s);
  w.fill_inputs(seed);
  std::vector<double> k = w.to_double(tools::Tensor::k);
  for (double& x : k) x *= c.input_magnitude;
  w.set_values(tools::Tensor::k, k);
  k = w.to_double(tools::Tensor::k);  // as rounded to the dtype
  // q[i, h] = k[a(i, h)], a spread over the keys differently for the two heads.
  const std::int64_t Mq = s.seqlen_q, Mk = s.seqlen_k, H = s.heads_q, D = s.head_dim;
  auto dominant = [&](std::int64_t i, std::int64_t h) { return (i * (h + 1) * 7 + h * 3) % Mk; };
  std::vector<double> q(std::size_t(Mq * H * D));
  for (std::int64_t i = 0; i < Mq; ++i)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d) q[std::size_t((i * H + h) * D + d)] = k[std::size_t(dominant(i, h) * D + d)];
  w.set_values(tools::Tensor::q, q);

  // The construction holds: in float64, each row's score against its dominant key exceeds every
  // other by kOneHotGap.
  double max_score = 0;
  for (std::int64_t i = 0; i < Mq; ++i)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t a = dominant(i, h);
      double top = 0, second = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < Mk; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += q[std::size_t((i * H + h) * D + d)] * k[std::size_t(j * D + d)];
        const double score = *s.scale * dot;
        if (j == a) top = score;
        else second = std::max(second, score);
      }
      ASSERT_GE(top - second, kOneHotGap) << "row " << i << " head " << h << ": no single dominant key";
      max_score = std::max(max_score, std::abs(top));
    }
  SCOPED_TRACE("largest dominant score (about the largest |LSE|) " + std::to_string(max_score));

  if (backend == Backend::cuda) ASSERT_TRUE(w.to_device().ok());
  w.poison_outputs();
  const Status fs = forward(w.forward_args());
  ASSERT_TRUE(fs.ok()) << fs.to_string();
  const Status bs = backward(w.backward_args());
  ASSERT_TRUE(bs.ok()) << bs.to_string();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  reference::BackwardResult ref;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &ref).ok());

  // Per element of dV: |dv - ref| <= gamma(n) sum |dO| (1 + u) + u |ref| + exp(-kOneHotGap) sum' |dO|,
  // where n is the number of rows whose dominant key it is, gamma(n) = n u32 / (1 - n u32) bounds
  // float32 summation of n terms (P = 1 makes each term dO exactly), u rounds the sum to the dtype,
  // and sum' over every row bounds what the exact result gets from the keys that are not dominant
  // (P below 2^-149, 0 in float).
  const double u32 = unit_roundoff(DType::f32), u = unit_roundoff(s.dtype);
  const std::vector<double> dout = w.to_double(tools::Tensor::dout), dv = w.to_double(tools::Tensor::dv);
  std::vector<double> abs_sum(std::size_t(Mk * D), 0.0), abs_all(std::size_t(D), 0.0);
  std::vector<std::int64_t> rows(std::size_t(Mk), 0);
  for (std::int64_t i = 0; i < Mq; ++i)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t a = dominant(i, h);
      ++rows[std::size_t(a)];
      for (std::int64_t d = 0; d < D; ++d) {
        abs_sum[std::size_t(a * D + d)] += std::abs(dout[std::size_t((i * H + h) * D + d)]);
        abs_all[std::size_t(d)] += std::abs(dout[std::size_t((i * H + h) * D + d)]);
      }
    }
  int reported = 0;
  for (std::int64_t j = 0; j < Mk; ++j) {
    const double n = double(rows[std::size_t(j)]);
    const double gamma = n * u32 / (1 - n * u32);
    for (std::int64_t d = 0; d < D; ++d) {
      const std::size_t e = std::size_t(j * D + d);
      const double bound =
          gamma * abs_sum[e] * (1 + u) + u * std::abs(ref.dv[e]) + std::exp(-kOneHotGap) * abs_all[std::size_t(d)];
      const double err = std::abs(dv[e] - ref.dv[e]);
      if (!(err <= bound) && reported++ < 5)
        ADD_FAILURE() << "dv[key " << j << ", " << d << "] = " << dv[e] << ", reference " << ref.dv[e] << ": error "
                      << err << " over the bound " << bound << " (" << n << " rows; P is not exactly 1)";
    }
  }
  EXPECT_EQ(reported, 0) << reported << " elements of dV over their bound";
}

}  // namespace memattn::testing
