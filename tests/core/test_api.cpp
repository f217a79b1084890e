// The public entry points (src/core/api.cpp): the backend each call goes to, what the reference
// backend writes into strided outputs, workspace queries, plans, FLOP counts and the version.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "memattn/attention.hpp"
#include "memattn/reference.hpp"
#include "support/cases.hpp"
#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

tools::ProblemSpec small_spec(DType dtype, Backend backend) {
  tools::ProblemSpec s = problem_shape(2, 9, 11, 4, 2, 8, 6);
  s.dtype = dtype;
  s.backend = backend;
  return s;
}

// NaN elements in a buffer's bytes (the poison an output keeps where nothing was written).
std::int64_t nan_count(const tools::Buffer& b) {
  std::int64_t n = 0;
  const std::int64_t elements = std::int64_t(b.bytes.size() / dtype_size(b.view.dtype));
  for (std::int64_t e = 0; e < elements; ++e) {
    const double x = b.view.dtype == DType::f64 ? reinterpret_cast<const double*>(b.bytes.data())[e]
                                                : reinterpret_cast<const float*>(b.bytes.data())[e];
    n += std::isnan(x);
  }
  return n;
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

// The reference backend through forward() and backward(): every output element written at its
// strided place (padded rows and heads), the gaps between them left alone, and dbias summed over
// the bias's broadcast dimensions.
TEST(Api, ReferenceBackendWritesStridedOutputsAndSummedDbias) {
  tools::ProblemSpec s = small_spec(DType::f32, Backend::reference);
  s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
  s.padding = 3;
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  ASSERT_TRUE(backward(w.backward_args()).ok());
  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &ref).ok());
  reference::BackwardResult grads;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &grads).ok());
  const struct {
    tools::Tensor t;
    const std::vector<double>& want;
  } outputs[] = {{tools::Tensor::out, ref.out}, {tools::Tensor::lse, ref.lse}, {tools::Tensor::dq, grads.dq},
                 {tools::Tensor::dk, grads.dk}, {tools::Tensor::dv, grads.dv}};
  for (const auto& o : outputs) {
    SCOPED_TRACE(to_string(o.t));
    const std::vector<double> got = w.to_double(o.t);
    ASSERT_EQ(got.size(), o.want.size());
    for (std::size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], double(float(o.want[e]))) << "element " << e;
    const tools::Buffer& b = w.host(o.t);
    const std::int64_t gaps = std::int64_t(b.bytes.size() / 4) - b.view.numel();
    EXPECT_EQ(nan_count(b), gaps) << "the padding keeps its poison, every element is written";
  }
  const std::vector<double> dbias = w.to_double_reduced(tools::Tensor::dbias);
  ASSERT_EQ(dbias.size(), grads.dbias.size());
  for (std::size_t e = 0; e < dbias.size(); ++e) EXPECT_EQ(dbias[e], double(float(grads.dbias[e]))) << e;
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

// FLOPs count the visible pairs: causal top-left, 9 queries and 11 keys, row i sees i + 1 keys.
TEST(Api, ForwardFlopsCountTheVisiblePairs) {
  tools::ProblemSpec s = small_spec(DType::bf16, Backend::cpu);
  s.mask = Mask::causal();
  tools::Workload w(s);
  double flops = 0;
  ASSERT_TRUE(forward_flops(w.forward_args(), &flops).ok());
  const double pairs = 2.0 * 4 * (9 * 10 / 2);  // batch x heads x (1 + 2 + ... + 9)
  EXPECT_EQ(flops, 2.0 * pairs * (8 + 6));
  s.mask = Mask{};
  tools::Workload full(s);
  ASSERT_TRUE(forward_flops(full.forward_args(), &flops).ok());
  EXPECT_EQ(flops, 2.0 * (2 * 4 * 9 * 11) * (8 + 6));
}

TEST(Api, PlansNameTheBackend) {
  std::string plan;
  tools::Workload ref(small_spec(DType::f32, Backend::reference));
  ASSERT_TRUE(describe_plan(ref.forward_args(), &plan).ok());
  EXPECT_EQ(plan, "reference (float64, naive)");
  ASSERT_TRUE(describe_plan(ref.backward_args(), &plan).ok());
  EXPECT_EQ(plan, "reference (float64, naive)");
  tools::Workload cpu(small_spec(DType::f32, Backend::cpu));
  plan.clear();
  ASSERT_TRUE(describe_plan(cpu.forward_args(), &plan).ok());
  EXPECT_FALSE(plan.empty());
  EXPECT_NE(plan, "reference (float64, naive)");
  ForwardArgs bad = cpu.forward_args();
  bad.k.sizes[3] = 7;
  EXPECT_EQ(describe_plan(bad, &plan).code(), StatusCode::invalid_argument);
}

// Issue 30 deliverable 3: a problem whose host scratch cannot fit is refused with the bytes needed
// and available (out_of_memory), before anything is allocated or written. The views claim 2^36
// elements over a small buffer: validation reads no element, and a call that went ahead would
// fault, so only the refusal passes.
TEST(Api, HostScratchTooLargeIsRefusedWithTheNumbers) {
  static float small[64];
  const std::int64_t M = std::int64_t(1) << 24, H = 64, D = 64;
  const TensorRef big = make_tensor(small, DType::f32, {1, M, H, D}, {0, 0, 0, 1});
  const TensorRef lse = make_tensor(small, DType::f32, {1, H, M}, {0, 0, 1});
  ForwardArgs f;
  f.backend = Backend::reference;
  f.q = f.k = f.v = big;
  f.out = make_tensor(small, DType::f32, {1, M, H, D}, {0, 0, 0, 1});
  f.lse = lse;
  // Outputs with stride 0 would overlap: give them strides that do not, over the same buffer (the
  // call is refused before it writes).
  f.out.strides[0] = M * H * D, f.out.strides[1] = H * D, f.out.strides[2] = D;
  f.lse.strides[0] = H * M, f.lse.strides[1] = M;
  const Status s = forward(f);
  EXPECT_EQ(s.code(), StatusCode::out_of_memory) << s.to_string();
  EXPECT_NE(s.message().find("needs about"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("are available"), std::string::npos) << s.message();
  for (float x : small) EXPECT_EQ(x, 0.0f);
}

TEST(Api, VersionIsTheProjectsVersion) { EXPECT_STREQ(version(), MEMATTN_EXPECTED_VERSION); }

}  // namespace
}  // namespace memattn::testing
