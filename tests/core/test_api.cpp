// The public entry points (src/core/api.cpp): the backend each call goes to, workspace queries.
#include <gtest/gtest.h>

#include "memattn/attention.hpp"
#include "memattn/reference.hpp"
#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

tools::ProblemSpec small_spec(DType dtype, Backend backend) {
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 9;
  s.seqlen_k = 11;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = 8;
  s.head_dim_v = 6;
  s.dtype = dtype;
  s.backend = backend;
  return s;
}

// f64 runs on the reference alone, which `automatic` picks: outputs are the reference's, unrounded.
TEST(Api, Float64RunsOnTheReference) {
  tools::ProblemSpec s = small_spec(DType::f64, Backend::automatic);
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &ref).ok());
  EXPECT_EQ(w.to_double(tools::Tensor::out), ref.out) << "f64 outputs are the reference's, unrounded";
  ASSERT_TRUE(backward(w.backward_args()).ok());
  reference::BackwardResult grads;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &grads).ok());
  EXPECT_EQ(w.to_double(tools::Tensor::dq), grads.dq);
}

// The CPU backends allocate their own scratch: no workspace asked, any size given is enough.
TEST(Api, CpuNeedsNoWorkspace) {
  tools::Workload w(small_spec(DType::bf16, Backend::cpu));
  w.fill_inputs(next_seed());
  ForwardArgs a = w.forward_args();
  alignas(16) char scratch[16];
  a.workspace = scratch;
  a.workspace_bytes = 0;
  std::size_t need = 1;
  EXPECT_TRUE(forward_workspace_size(a, &need).ok());
  EXPECT_EQ(need, 0u);
  EXPECT_TRUE(forward(a).ok());
  need = 1;
  EXPECT_TRUE(backward_workspace_size(w.backward_args(), &need).ok());
  EXPECT_EQ(need, 0u);
  ForwardArgs bad = w.forward_args();
  bad.q.data = nullptr;
  EXPECT_EQ(forward_workspace_size(bad, &need).code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace memattn::testing
