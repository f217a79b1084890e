// Decoding with grouped heads rewritten as rows (cuda/pack_gqa.cpp), on the host: where the
// rewrite applies, the rewritten call (the new views of the same memory, the rewritten problem)
// run by the CPU backend gives the original call's output and LSE, under every mask, with each
// bias layout, and over contiguous and paged KV caches; where it must not apply (dropout, more
// than one query row, no grouping, a cache bounded by a window) it declines and changes nothing.
// The CUDA kernels then run the rewritten call as they run any other; this checks the views.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/problem.hpp"
#include "cpu/backend.hpp"
#include "cuda/pack_gqa.hpp"
#include "memattn/reference.hpp"
#include "workload/workload.hpp"

namespace memattn {
namespace {

using tools::BiasKind;
using tools::CacheLayout;
using tools::ProblemSpec;
using tools::Tensor;
using tools::Workload;

// One query row per sequence, 8 query heads on 2 kv heads, 37 keys (not a multiple of any tile).
ProblemSpec decoding() {
  ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 1;
  s.seqlen_k = 37;
  s.heads_q = 8;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = 24;
  s.dtype = DType::f32;  // the two runs sum in different orders; fp32 keeps that difference small
  s.backend = Backend::cpu;
  return s;
}

// Within `tol` of `want` relative to 1 + |want|; an infinite `want` (a row without keys) exactly.
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (std::isinf(want[e])) {
      ASSERT_EQ(got[e], want[e]) << what << " element " << e;
      continue;
    }
    ASSERT_NEAR(got[e], want[e], tol * (1 + std::fabs(want[e]))) << what << " element " << e;
  }
}

// The original call on the CPU backend against the float64 reference, then the rewritten one
// against the original: outputs and LSE agree.
void expect_same_result(const ProblemSpec& spec) {
  SCOPED_TRACE(spec.describe());
  Workload w(spec);
  w.fill_inputs(17);
  ForwardArgs args = w.host_forward_args();
  args.backend = Backend::cpu;
  detail::Problem p;
  ASSERT_TRUE(detail::build_problem(args, &p).ok());
  ForwardArgs packed;
  detail::Problem packed_problem;
  ASSERT_TRUE(cuda::pack_gqa_rows(args, p, &packed, &packed_problem));
  EXPECT_EQ(packed_problem.heads_q, spec.heads_k);
  EXPECT_EQ(packed_problem.seqlen_q, spec.heads_q / spec.heads_k);
  EXPECT_FALSE(packed_problem.is_masked());

  // The reference reads a cache's new keys from k_new, so it runs before the append as after it.
  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(args, &ref).ok());
  w.poison_outputs();
  if (p.cache.enabled) cpu::append_kv_cache(args, p);
  ASSERT_TRUE(cpu::forward(args, p).ok());
  const std::vector<double> out = w.to_double(Tensor::out), lse = w.to_double(Tensor::lse);
  expect_near(out, ref.out, 1e-4, "out against the reference");
  expect_near(lse, ref.lse, 1e-4, "lse against the reference");
  w.poison_outputs();
  // The append writes the same values to the same slots again.
  if (packed_problem.cache.enabled) cpu::append_kv_cache(packed, packed_problem);
  ASSERT_TRUE(cpu::forward(packed, packed_problem).ok());
  const std::vector<double> packed_out = w.to_double(Tensor::out), packed_lse = w.to_double(Tensor::lse);

  expect_near(packed_out, out, 1e-5, "out");
  expect_near(packed_lse, lse, 1e-5, "lse");
}

TEST(PackGqa, EveryMaskGivesTheSameResult) {
  const std::vector<Mask> masks = {Mask::none(),
                                   Mask::causal(Alignment::top_left),
                                   Mask::causal(Alignment::bottom_right),
                                   Mask::window(5, 0, Alignment::bottom_right),
                                   Mask::window(3, 2, Alignment::top_left),
                                   Mask::window(0, 40, Alignment::top_left),
                                   Mask::window(0, 0, Alignment::top_left)};  // one key
  for (const Mask& mask : masks) {
    ProblemSpec s = decoding();
    s.mask = mask;
    expect_same_result(s);
  }
}

TEST(PackGqa, EachBiasLayoutFollowsItsHeads) {
  for (const BiasKind kind : {BiasKind::dense, BiasKind::broadcast_batch, BiasKind::broadcast_heads, BiasKind::row}) {
    for (const bool f32 : {false, true}) {
      ProblemSpec s = decoding();
      s.bias = tools::bias_pattern(kind);
      s.bias_f32 = f32;
      s.mask = Mask::window(6, 0, Alignment::bottom_right);  // the bias's key columns are narrowed too
      expect_same_result(s);
    }
  }
}

TEST(PackGqa, KvCachesKeepTheirLayout) {
  for (const CacheLayout layout : {CacheLayout::contiguous, CacheLayout::paged}) {
    for (const std::int64_t new_keys : {0, 1}) {
      ProblemSpec s = decoding();
      s.mask = Mask::causal(Alignment::bottom_right);
      s.cache.layout = layout;
      s.cache.page_size = 8;
      s.cache.cache_len = 29;
      s.cache.new_keys = new_keys;
      s.seqlen_k = s.cache.cache_len + new_keys;
      expect_same_result(s);
    }
  }
}

// Calls the rewrite must leave alone: it returns false and leaves its outputs as they were.
TEST(PackGqa, DeclinesWhatItCannotRewrite) {
  std::vector<std::pair<std::string, ProblemSpec>> cases;
  {
    ProblemSpec s = decoding();
    s.dropout = {0.25, 3, 0};
    cases.emplace_back("dropout", s);
  }
  {
    ProblemSpec s = decoding();
    s.seqlen_q = 2;
    cases.emplace_back("two query rows", s);
  }
  {
    ProblemSpec s = decoding();
    s.heads_k = s.heads_q;
    cases.emplace_back("no grouping", s);
  }
  {
    ProblemSpec s = decoding();
    s.mask = Mask::window(2, 0, Alignment::bottom_right);
    s.cache.layout = CacheLayout::paged;
    s.cache.cache_len = 30;
    s.seqlen_k = 30;
    cases.emplace_back("a cache under a window", s);
  }
  for (auto& [name, spec] : cases) {
    SCOPED_TRACE(name);
    Workload w(spec);
    w.fill_inputs(5);
    ForwardArgs args = w.host_forward_args();
    detail::Problem p;
    ASSERT_TRUE(detail::build_problem(args, &p).ok());
    ForwardArgs packed;
    packed.q.data = nullptr;
    detail::Problem packed_problem;
    packed_problem.heads_q = -7;
    EXPECT_FALSE(cuda::pack_gqa_rows(args, p, &packed, &packed_problem));
    EXPECT_EQ(packed.q.data, nullptr);
    EXPECT_EQ(packed_problem.heads_q, -7);
  }
}

}  // namespace
}  // namespace memattn
