// The float64 reference (src/cpu/reference.cpp) against closed forms and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "memattn/reference.hpp"
#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

tools::ProblemSpec small_f32(std::int64_t mq, std::int64_t mk, std::int64_t d, std::int64_t dv) {
  tools::ProblemSpec s;
  s.batch = 1;
  s.seqlen_q = mq;
  s.seqlen_k = mk;
  s.heads_q = s.heads_k = 1;
  s.head_dim = d;
  s.head_dim_v = dv;
  s.dtype = DType::f32;
  s.backend = Backend::reference;
  return s;
}

float* data(tools::Workload& w, tools::Tensor t) { return reinterpret_cast<float*>(w.host(t).bytes.data()); }

// Q = 0 makes every score equal: P is uniform and O is the mean of V; LSE = log(Mk).
TEST(Reference, UniformScoresAverageValues) {
  tools::Workload w(small_f32(3, 5, 4, 3));
  w.fill_inputs(next_seed());
  for (std::int64_t e = 0; e < 3 * 4; ++e) data(w, tools::Tensor::q)[e] = 0.0f;
  reference::ForwardResult r;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &r).ok());
  const float* v = data(w, tools::Tensor::v);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(r.lse[i], std::log(5.0), 1e-14);
    for (int e = 0; e < 3; ++e) {
      double mean = 0;
      for (int j = 0; j < 5; ++j) mean += v[j * 3 + e] / 5.0;
      EXPECT_NEAR(r.out[i * 3 + e], mean, 1e-12);
    }
  }
}

// One key far above the others: P is one-hot and O is that key's value.
TEST(Reference, OneHotScoresSelectOneValue) {
  tools::ProblemSpec s = small_f32(4, 6, 2, 3);
  s.scale = 1.0;
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  float* q = data(w, tools::Tensor::q);
  float* k = data(w, tools::Tensor::k);
  for (int i = 0; i < 4; ++i) q[i * 2] = 1.0f, q[i * 2 + 1] = 0.0f;
  for (int j = 0; j < 6; ++j) k[j * 2] = j == 2 ? 500.0f : 0.0f, k[j * 2 + 1] = 0.0f;
  reference::ForwardResult r;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &r).ok());
  const float* v = data(w, tools::Tensor::v);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(r.lse[i], 500.0, 1e-12);
    for (int e = 0; e < 3; ++e) EXPECT_NEAR(r.out[i * 3 + e], v[2 * 3 + e], 1e-12);
  }
}

// A single key: O = V[0] and LSE is that key's score, whatever the query.
TEST(Reference, SingleKey) {
  tools::Workload w(small_f32(5, 1, 3, 2));
  w.fill_inputs(next_seed());
  reference::ForwardResult r;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &r).ok());
  const float *q = data(w, tools::Tensor::q), *k = data(w, tools::Tensor::k), *v = data(w, tools::Tensor::v);
  for (int i = 0; i < 5; ++i) {
    double score = 0;
    for (int d = 0; d < 3; ++d) score += double(q[i * 3 + d]) * k[d];
    EXPECT_NEAR(r.lse[i], score / std::sqrt(3.0), 1e-12);
    for (int e = 0; e < 2; ++e) EXPECT_DOUBLE_EQ(r.out[i * 2 + e], v[e]);
  }
}

// Every key masked: O = 0, LSE = -inf, zero gradients, no NaN.
TEST(Reference, FullyMaskedRowsGiveZeroAndMinusInf) {
  tools::ProblemSpec s = small_f32(6, 2, 3, 3);
  s.mask = Mask::causal(Alignment::bottom_right);  // rows 0..3 see no key
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  reference::ForwardResult r;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &r).ok());
  reference::BackwardResult g;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &g).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.lse[i], -INFINITY);
    for (int e = 0; e < 3; ++e) {
      EXPECT_EQ(r.out[i * 3 + e], 0.0);
      EXPECT_EQ(g.dq[i * 3 + e], 0.0);
    }
  }
  for (int i = 4; i < 6; ++i) EXPECT_TRUE(std::isfinite(r.lse[i]));
}

// Loss L = sum(O * dO): its gradients by central differences against the reference backward,
// on a problem with GQA, a broadcast bias, a window mask and dropout (a fixed mask, so L is smooth).
TEST(Reference, GradientsMatchFiniteDifferences) {
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 5;
  s.seqlen_k = 6;
  s.heads_q = 2;
  s.heads_k = 1;
  s.head_dim = 3;
  s.head_dim_v = 2;
  s.dtype = DType::f32;
  s.backend = Backend::reference;
  s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
  s.mask = Mask::window(3, 1, Alignment::bottom_right);
  s.dropout = {0.3, 42, 1};
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  // Inputs on a 2^-8 grid, so that x +- h (h = 2^-12) is exact in float.
  for (tools::Tensor t : {tools::Tensor::q, tools::Tensor::k, tools::Tensor::v, tools::Tensor::bias, tools::Tensor::dout}) {
    float* x = data(w, t);
    for (std::size_t e = 0; e < w.host(t).bytes.size() / 4; ++e) x[e] = std::round(x[e] * 256.0f) / 256.0f;
  }
  const auto loss = [&] {
    reference::ForwardResult r;
    EXPECT_TRUE(reference::forward(w.host_forward_args(), &r).ok());
    const std::vector<double> dout = w.to_double(tools::Tensor::dout);
    double l = 0;
    for (std::size_t e = 0; e < r.out.size(); ++e) l += r.out[e] * dout[e];
    return l;
  };
  reference::BackwardResult g;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &g).ok());
  const double h = 1.0 / 4096;
  const struct {
    tools::Tensor t;
    const std::vector<double>& grad;
  } checks[] = {{tools::Tensor::q, g.dq}, {tools::Tensor::k, g.dk}, {tools::Tensor::v, g.dv}, {tools::Tensor::bias, g.dbias}};
  for (const auto& c : checks) {
    float* x = data(w, c.t);
    ASSERT_EQ(w.host(c.t).bytes.size() / 4, c.grad.size()) << to_string(c.t);
    double diff2 = 0, ref2 = 0;
    for (std::size_t e = 0; e < c.grad.size(); ++e) {
      const float saved = x[e];
      x[e] = saved + float(h);
      const double up = loss();
      x[e] = saved - float(h);
      const double down = loss();
      x[e] = saved;
      const double fd = (up - down) / (2 * h);
      diff2 += (fd - c.grad[e]) * (fd - c.grad[e]);
      ref2 += fd * fd;
    }
    EXPECT_GT(ref2, 0.0) << to_string(c.t);
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-6) << "gradient of " << to_string(c.t);
  }
}

}  // namespace
}  // namespace memattn::testing
