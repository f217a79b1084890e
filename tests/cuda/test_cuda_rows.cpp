// Every row of the compiled kernel table, forced (Options::overrides.kernel), on a problem it
// fits, against the float64 reference: rows that the dispatcher would not pick for the feature
// cases (a bucket's extra tiles, element-load rows next to aligned ones) are checked too. The
// problem is read off the row's name: dtype, head-dim bucket (D = the bucket, an unaligned D for
// element-load rows, D > 256 for the any-D rows), and with the row's features (bias and dropout,
// or a paged KV cache) when it has them. A forced row that does not fit fails the test with the dispatcher's
// reason. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "memattn/attention.hpp"
#include "memattn/kernels.hpp"
#include "support/check.hpp"
#include "support/dropout_masks.hpp"
#include "support/seed.hpp"
#include "workload/verify.hpp"

namespace memattn::testing {
namespace {

struct RowCase {
  std::string row;
  tools::ProblemSpec spec;
  bool backward;
  int bucket;  // the row's head-dim bucket
};

void PrintTo(const RowCase& c, std::ostream* os) { *os << c.spec.describe(); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

// Row names: <pass>_sm<family>_<dtype>_d<bucket>_m<M>n<N>w<W>[_gacc...]_<vec|elem>_<plain|bias|drop|full|paged>
// (full: bias and dropout code; paged: K and V from a KV cache).
bool row_case(const std::string& name, RowCase* c) {
  const std::vector<std::string> t = split(name, '_');
  if (t.size() < 7 || t[3].empty() || t[3][0] != 'd') return false;
  const std::string& dtype = t[2];
  const int bucket = std::atoi(t[3].c_str() + 1);
  const bool element_loads = t[t.size() - 2] == "elem";
  const bool bias = t.back() == "full" || t.back() == "bias";
  const bool dropout = t.back() == "full" || t.back() == "drop";
  // The any-D rows get a head dim beyond every register bucket (a multiple of 8 for the rows
  // with 16-byte loads, an odd one for the element-load rows); the 768 and 1024 buckets' rows (the
  // head dim split over a pair of CTAs) one that spans both halves.
  const int any_head_dim = element_loads ? 301 : bucket == 768 || bucket == 1024 ? bucket - 24 : 320;
  tools::ProblemSpec& s = c->spec;
  s.dtype = dtype == "bf16" ? DType::bf16 : dtype == "fp16" ? DType::f16 : DType::f32;
  s.head_dim = s.head_dim_v = bucket > 256 ? any_head_dim : element_loads ? bucket - 3 : bucket;
  s.batch = 2;
  s.seqlen_q = 150;
  s.seqlen_k = 200;
  s.heads_q = 4;
  s.heads_k = 2;
  if (t.back() == "paged") {
    // The KV cache rows run cache calls only: a paged cache whose pages (16 keys) do not divide the
    // 64-key tiles, five new keys appended first; a cache takes bottom-right masks.
    s.cache.layout = tools::CacheLayout::paged;
    s.cache.page_size = 16;
    s.cache.new_keys = 5;
    s.cache.cache_len = s.seqlen_k - s.cache.new_keys;
    s.mask = Mask::causal(Alignment::bottom_right);
  } else if (bias || dropout) {
    if (bias) s.bias = tools::bias_pattern(tools::BiasKind::dense);
    if (dropout) s.dropout = {0.1, 11, 3};
    s.mask = Mask::causal(Alignment::bottom_right);
  } else {
    s.mask = Mask::causal();
  }
  s.backend = Backend::cuda;
  if (name.find("_tf32x3_") != std::string::npos) s.precision = Precision::tf32x3;  // `automatic` would refuse them
  c->row = name;
  c->backward = t[0] == "bwd";
  (c->backward ? s.backward_overrides : s.forward_overrides).kernel = name;
  c->bucket = bucket;
  return true;
}

std::vector<RowCase> row_cases() {
  std::vector<RowCase> out;
  for (const KernelInfo& k : list_kernels()) {
    RowCase c;
    if (row_case(k.name, &c)) out.push_back(c);
  }
  return out;
}

class CudaRows : public ::testing::TestWithParam<RowCase> {};

// A KV cache row's call appends to the cache: the reference and the cache's snapshot come first,
// then out and lse against the one, the cache against the other with the new keys in their slots.
void check_cache_row(const tools::ProblemSpec& spec) {
  SCOPED_TRACE(spec.describe());
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  tools::Workload w(spec);
  w.fill_inputs(seed);
  ASSERT_TRUE(w.to_device().ok());
  w.poison_outputs();
  reference::ForwardResult ref;
  ASSERT_TRUE(tools::forward_reference(w, {}, {}, &ref).ok());
  const tools::CacheSnapshot before = tools::snapshot_cache(w);
  const Status fs = forward(w.forward_args());
  ASSERT_TRUE(fs.ok()) << fs.to_string();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  tools::VerifyReport report;
  tools::check_forward(w, {}, ref, &report);
  tools::check_cache_append(w, before, &report);
  EXPECT_EQ(report.lines.size(), 4u);  // out, lse, k_cache, v_cache
  for (const tools::CheckLine& line : report.lines)
    EXPECT_TRUE(line.pass()) << line.name << ": max abs " << line.error.max_abs << ", relative " << line.error.rel_l2
                             << " (tolerance " << line.tolerance << "), " << line.error.bad << " bad";
}

TEST_P(CudaRows, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (GetParam().spec.cache.enabled()) return check_cache_row(GetParam().spec);
  CheckOptions options;
  options.backward = GetParam().backward;
  if (GetParam().spec.precision == Precision::tf32x3) options.naive_factor = 3;
  check_case(GetParam().spec, options);
}

// Rows with dropout code apply exactly dropout_keep()'s mask (the reference comparison above has
// a tolerance; this has none). The mask problem has D = 8 and Dv = 48, so rows whose bucket is
// smaller are skipped.
TEST_P(CudaRows, DropoutMaskMatchesTheMapping) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const RowCase& c = GetParam();
  if (c.spec.dropout.p == 0.0) GTEST_SKIP() << "no dropout code in this row";
  if (c.bucket < 48) GTEST_SKIP() << "head-dim bucket below the mask problem's Dv = 48";
  check_dropout_masks(Backend::cuda, c.backward, c.spec.dtype, c.spec.forward_overrides, c.spec.backward_overrides,
                      c.spec.precision);
}

// Every backward row that takes `deterministic` (no atomics) gives bit-identical gradients over 20
// runs, each starting from poisoned outputs (the Hopper rows add dQ in key-tile order then). A row
// whose plan refuses deterministic mode because it adds dQ with atomics (the other one-pass rows)
// is skipped with the dispatcher's reason; any other
// refusal fails, so that a planning error cannot pass every row as a skip.
TEST_P(CudaRows, DeterministicIsBitIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const RowCase& c = GetParam();
  if (!c.backward) GTEST_SKIP() << "a forward row: deterministic is a backward setting";
  tools::ProblemSpec s = c.spec;
  s.deterministic = true;
  {
    tools::Workload w(s);
    ASSERT_TRUE(w.to_device().ok());
    std::string plan;
    const Status st = describe_plan(w.backward_args(), &plan);
    if (!st.ok() && st.message().find("uses atomics (not deterministic)") != std::string::npos)
      GTEST_SKIP() << "the row does not take deterministic: " << st.message();
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  check_backward_bit_identical(s, 20);
}

// A build whose table filter leaves no row has nothing to instantiate.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaRows);
INSTANTIATE_TEST_SUITE_P(Table, CudaRows, ::testing::ValuesIn(row_cases()),
                         [](const ::testing::TestParamInfo<RowCase>& info) { return info.param.row; });

// row_cases() leaves out the names row_case() cannot read, and an empty list instantiates nothing
// (allowed above): every compiled row must be read, or a change of the naming would pass the whole
// table unchecked. No GPU needed.
TEST(CudaRowsTable, EveryCompiledRowHasACase) {
  for (const KernelInfo& k : list_kernels()) {
    RowCase c;
    EXPECT_TRUE(row_case(k.name, &c)) << k.name << ": not a row name this test reads";
  }
}

}  // namespace
}  // namespace memattn::testing
