// Variable lengths on the CUDA backend with the caller's length bounds (Varlen::bounded): the
// values stay on the device, so a call issues its work without waiting for the stream; the
// kernels clamp every value, so malformed arrays cannot make them read or write out of bounds
// (the device harness runs this file under compute-sanitizer). The results of valid bounded
// calls are checked against the reference by the feature cases (varlen_bounded_*, support/cases.cpp).
// Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "core/problem.hpp"
#include "memattn/attention.hpp"
#include "stream_gate.hpp"
#include "support/check.hpp"
#include "support/seed.hpp"
#include "workload/verify.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

tools::ProblemSpec bounded_spec() {
  tools::ProblemSpec s;
  s.varlen_q = {5, 0, 70, 33};
  s.varlen_k = {8, 12, 0, 64};
  s.seqused_k = {8, 3, 0, 50};
  s.varlen_outside = 3;
  s.varlen_bound_slack = 0;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = 64;
  s.dtype = DType::bf16;
  s.mask = Mask::causal(Alignment::bottom_right);
  s.backend = Backend::cuda;
  return s;
}

class CudaVarlenBounds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaVarlenBounds, CallsDoNotWaitForTheStream) {
  tools::Workload w(bounded_spec());
  w.fill_inputs(next_seed());
  w.poison_outputs();
  ASSERT_TRUE(w.to_device().ok());
  ForwardArgs f = w.forward_args();
  BackwardArgs b = w.backward_args();
  f.stream = b.stream = stream_;
  detail::Problem p;
  ASSERT_TRUE(detail::build_problem(f, &p).ok());
  EXPECT_FALSE(p.lengths_known);
  EXPECT_EQ(p.seqlen_q, 70);
  EXPECT_EQ(p.seqlen_k, 50);

  // Once outside the gate: the first launch of a kernel loads its module (CUDA's lazy loading),
  // which can wait for the device; that is set-up, not the call's own.
  Status fs = forward(f), bs = backward(b);
  ASSERT_TRUE(fs.ok() && bs.ok()) << fs.to_string() << bs.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(returns_without_waiting(stream_, std::chrono::seconds(60), [&] { fs = forward(f); }));
  EXPECT_TRUE(fs.ok()) << fs.to_string();
  EXPECT_TRUE(returns_without_waiting(stream_, std::chrono::seconds(60), [&] { bs = backward(b); }));
  EXPECT_TRUE(bs.ok()) << bs.to_string();

  // Without bounds the values are read on the host, in the stream's order: the call waits (the
  // gate gives up after a second and lets it go), which shows that the gate can see a wait.
  f.varlen.max_seqlen_q = f.varlen.max_seqlen_k = kUnknownLength;
  EXPECT_FALSE(returns_without_waiting(stream_, std::chrono::seconds(1), [&] { fs = forward(f); }));
  EXPECT_TRUE(fs.ok()) << fs.to_string();
}

// With exact bounds the grid is the one the host-read lengths give, so the forward is the same
// bit for bit (and right: the bounded run against the float64 reference); the rows outside every
// sequence are filled on the device.
TEST_F(CudaVarlenBounds, ForwardMatchesTheHostReadLengthsBitForBit) {
  std::vector<std::vector<unsigned char>> results;
  for (const bool bounded : {true, false}) {
    tools::ProblemSpec s = bounded_spec();
    s.varlen_bound_slack = bounded ? 0 : -1;
    s.dropout = {0.2, 17, 4};
    tools::Workload w(s);
    w.fill_inputs(7);
    w.poison_outputs();
    ASSERT_TRUE(w.to_device().ok());
    ForwardArgs f = w.forward_args();
    f.stream = stream_;
    const Status st = forward(f);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(w.copy_outputs_to_host().ok());
    if (bounded) {
      tools::VerifyReport report;
      ASSERT_TRUE(tools::verify_forward(w, {}, {}, &report).ok());
      for (const tools::CheckLine& line : report.lines) EXPECT_TRUE(line.pass()) << line.name;
    }
    results.push_back(w.host(tools::Tensor::out).bytes);
    results.push_back(w.host(tools::Tensor::lse).bytes);
    const std::vector<double> lse = w.to_double(tools::Tensor::lse);
    // Rows 0-2 of every head lie before the first sequence: LSE -inf (not the poison NaN).
    for (std::size_t row = 0; row < 3; ++row) EXPECT_EQ(lse[row], -std::numeric_limits<double>::infinity());
  }
  EXPECT_TRUE(results[0] == results[2]) << "out differs";
  EXPECT_TRUE(results[1] == results[3]) << "lse differs";
}

// Values that break every rule, with bounds: the call runs (nothing checks them on the host),
// touches nothing out of bounds (compute-sanitizer in the device harness; an illegal address
// here would fail the synchronisation) and leaves the device usable.
TEST_F(CudaVarlenBounds, MalformedValuesStayInBounds) {
  const std::int32_t kMax = std::numeric_limits<std::int32_t>::max(), kMin = std::numeric_limits<std::int32_t>::min();
  const std::vector<std::vector<std::int32_t>> seqstarts_q = {
      {0, 200, 100, -50, kMax}, {kMin, kMax, 0, 5, 3}, {90, 90, 90, 90, 90}};
  const std::vector<std::vector<std::int32_t>> seqstarts_k = {
      {kMax, 0, 7, -1, 400}, {0, 1000, 2000, 3000, 4000}, {-7, -7, 30, 20, 10}};
  const std::vector<std::int32_t> used = {-5, kMax, 3, kMin};
  for (std::size_t c = 0; c < seqstarts_q.size(); ++c) {
    tools::ProblemSpec s = bounded_spec();
    s.bias = tools::bias_pattern(tools::BiasKind::dense);
    s.dropout = {0.3, 5, 1};
    tools::Workload w(s);
    w.fill_inputs(next_seed());
    w.poison_outputs();
    ASSERT_TRUE(w.to_device().ok());
    std::int32_t* arrays = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&arrays), 3 * 5 * sizeof(std::int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(arrays, seqstarts_q[c].data(), 5 * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(arrays + 5, seqstarts_k[c].data(), 5 * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(arrays + 10, used.data(), 4 * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ForwardArgs f = w.forward_args();
    BackwardArgs b = w.backward_args();
    for (Varlen* vl : {&f.varlen, &b.varlen}) {
      vl->seqstart_q = make_index(arrays, 5);
      vl->seqstart_k = make_index(arrays + 5, 5);
      if (c != 1) vl->seqused_k = make_index(arrays + 10, 4);
    }
    f.stream = b.stream = stream_;
    const Status fs = forward(f);
    EXPECT_TRUE(fs.ok()) << fs.to_string();
    const Status bs = backward(b);
    EXPECT_TRUE(bs.ok()) << bs.to_string();
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
    cudaFree(arrays);
  }
}

// Keys past a sequence's used ones (seqused_k) are seen by nothing, whatever they hold
// (support/check.hpp), on the dispatcher's row. A TMA box would bring such rows into a sequence's
// last key tile, which is why the Hopper rows take fixed lengths only (select.cpp).
TEST(CudaVarlen, UnusedKeysHoldingNaNAreNotSeen) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.varlen_q = {200, 150};
  s.varlen_k = {300, 260};
  s.seqused_k = {230, 100};  // 70 and 160 unused rows: inside the last key tile and past it
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = 128;
  s.dtype = DType::bf16;
  s.backend = Backend::cuda;
  check_unused_keys_unseen(s);
}

}  // namespace
}  // namespace memattn::testing
