// The CUDA backward against the float64 reference's gradients on every feature case (DESIGN.md
// §3), with the forward's output and LSE as input. Cases the build's backward rows do not cover
// are skipped with the library's reason, where the build lacks the dtype's catch-all row (a cut
// kernel table); with it they fail. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "memattn/attention.hpp"
#include "memattn/kernels.hpp"
#include "support/cases.hpp"
#include "support/check.hpp"
#include "support/dropout_masks.hpp"

namespace memattn::testing {
namespace {

// Whether the build has the dtype's catch-all backward row, which takes every problem (any head
// dim and alignment, bias and dropout, no atomics; sm80's, which runs on every supported GPU):
// bwd_sm80_<dtype>_d65536_..._elem_full. The whole table has one per dtype, the reduced one for
// bf16 and fp32 (test_kernel_table.py). With it, a case without a backward row (`unsupported`) is
// a dispatcher failure, not a cut table's gap, so it fails instead of being skipped.
bool has_catch_all_backward(DType dtype) {
  const char* name = dtype == DType::bf16 ? "bf16" : dtype == DType::f16 ? "fp16" : "fp32";
  const std::string prefix = std::string("bwd_sm80_") + name + "_d65536_", suffix = "_elem_full";
  for (const KernelInfo& k : list_kernels()) {
    const std::string& n = k.name;
    if (n.compare(0, prefix.size(), prefix) == 0 && n.size() > suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 && n.find("_fused") == std::string::npos)
      return true;
  }
  return false;
}

class CudaBackward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CudaBackward, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  CheckOptions options;
  options.skip_unsupported_backward = !has_catch_all_backward(GetParam().spec.dtype);
  check_case(GetParam().spec, options);
}

INSTANTIATE_TEST_SUITE_P(Features, CudaBackward, ::testing::ValuesIn(named_cases(Backend::cuda, {DType::bf16, DType::f16, DType::f32})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// The same cases at head dims of the larger buckets (64, 128 and 256, where the one-pass rows
// run, and 512 for them alone): D = 64, 120, 248 and 376 (Dv 8 less where the case has Dv != D).
// The cases beyond 128 and the 1013-row one (slow on the reference) are left out.
std::vector<NamedCase> wide_head_cases(std::initializer_list<int> head_dims = {64, 120, 248}) {
  std::vector<NamedCase> out;
  for (const int d : head_dims)
    for (NamedCase c : named_cases(Backend::cuda, {DType::bf16, DType::f16})) {
      tools::ProblemSpec& s = c.spec;
      if (s.head_dim > 128 || s.seqlen_q > 1000) continue;
      const bool same = s.head_dim == s.head_dim_v;
      s.head_dim = d;
      s.head_dim_v = same ? d : d - 8;
      c.name = "d" + std::to_string(d) + "_" + c.name;
      out.push_back(c);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(WideHeads, CudaBackward, ::testing::ValuesIn(wide_head_cases()),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// The one-pass rows take only long sequences by default (min_queries_per_key), which the feature
// cases are not: here each wide-head case runs on every one-pass row of its dtype and bucket that
// covers its features (forced: Options::overrides.kernel): sm80's mma.sync row and, on an sm_90
// GPU, the wgmma rows (with and without the TMA producer). Skipped when none covers it (dropout)
// or none fits (a bias whose rows are not 16-byte aligned; the wgmma rows on another GPU;
// variable lengths on the TMA row).
class CudaBackwardOnePass : public ::testing::TestWithParam<NamedCase> {};

// Whether the build has the kernel-table row `name`.
bool compiled(const std::string& name) {
  const std::vector<KernelInfo> rows = list_kernels();
  return std::any_of(rows.begin(), rows.end(), [&](const KernelInfo& k) { return k.name == name; });
}

// The one-pass rows (bwd_sm80_..._fused..., bwd_sm90_..._wgmma_fused..., and the warp-specialised
// bwd_sm90_..._wgmma_tma_fused...) of the spec's dtype and bucket with its features.
std::vector<std::string> one_pass_rows(const tools::ProblemSpec& s) {
  if (s.dropout.p > 0 || s.deterministic) return {};
  const int d = int(std::max(s.head_dim, s.head_dim_v));
  const int bucket = d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 512;
  const std::string dtype_bucket =
      std::string("_") + (s.dtype == DType::bf16 ? "bf16" : s.dtype == DType::f16 ? "fp16" : "fp32") + "_d" +
      std::to_string(bucket) + "_";
  const std::string suffix = s.bias.has_value() ? "_btile_vec_bias" : "_vec_plain";
  std::vector<std::string> out;
  struct Kind {
    const char* family;
    bool tma;
  };
  for (const Kind kind : {Kind{"bwd_sm80", false}, Kind{"bwd_sm90", false}, Kind{"bwd_sm90", true}}) {
    const std::string prefix = kind.family + dtype_bucket;
    for (const KernelInfo& k : list_kernels()) {
      const std::string& n = k.name;
      if (n.compare(0, prefix.size(), prefix) == 0 && n.find("_fused_") != std::string::npos &&
          (n.find("_tma_") != std::string::npos) == kind.tma &&
          n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          (suffix == "_btile_vec_bias" || n.find("_btile") == std::string::npos)) {
        out.push_back(n);
        break;  // the kind's first: its default tile
      }
    }
  }
  return out;
}

// Why the forced backward row cannot run the spec's problem (the dispatcher's reason), or empty when
// it can. Other errors fail the test.
std::string forced_row_refusal(const tools::ProblemSpec& s) {
  tools::Workload w(s);
  const Status st = w.to_device();
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::string plan;
  const Status sp = describe_plan(w.backward_args(), &plan);
  if (sp.ok()) return {};
  if (sp.message().find("cannot run this problem") != std::string::npos) return sp.message();
  ADD_FAILURE() << sp.to_string();
  return sp.message();
}

TEST_P(CudaBackwardOnePass, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  int ran = 0;
  std::string refusals;
  for (const std::string& row : one_pass_rows(GetParam().spec)) {
    tools::ProblemSpec s = GetParam().spec;
    s.backward_overrides.kernel = row;
    if (const std::string why = forced_row_refusal(s); !why.empty()) {
      refusals += why + "; ";
      continue;
    }
    SCOPED_TRACE(row);
    check_case(s);  // a forced row that cannot run the problem fails (invalid_argument), never `unsupported`
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no one-pass row of this build runs this case: " << refusals;
}

// The wide-head cases, with Mk rounded up to a multiple of 8 where there is a bias (the bias tile
// needs 16-byte rows; at the cases' odd Mk no bias-tile row fits).
std::vector<NamedCase> one_pass_cases() {
  std::vector<NamedCase> out = wide_head_cases({64, 120, 248, 376});
  for (NamedCase& c : out)
    if (c.spec.bias.has_value() && !c.spec.varlen()) c.spec.seqlen_k = (c.spec.seqlen_k + 7) / 8 * 8;
  return out;
}

INSTANTIATE_TEST_SUITE_P(WideHeads, CudaBackwardOnePass, ::testing::ValuesIn(one_pass_cases()),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

// one_pass_rows() finds the rows by the parts of their names, and skips a case when it finds none:
// were the names to change, every case above would be skipped. So each one-pass row of the build
// (a backward row with atomics, sm80's or sm90's) must be found for a problem of its dtype, bucket
// and bias. The Hopper rows with dropout are not searched for (the cases above have none; the row
// tests and the CudaBackwardPersistent, CudaBackwardHopper and determinism tests run them). No GPU
// needed.
TEST(CudaBackwardOnePassRows, TheSearchFindsEveryOnePassRow) {
  int rows = 0;
  for (const KernelInfo& k : list_kernels()) {
    const bool sm80 = k.name.rfind("bwd_sm80_", 0) == 0,
               wgmma = k.name.find("_wgmma_fused_") != std::string::npos ||
                       k.name.find("_wgmma_tma_fused_") != std::string::npos;
    if (!(sm80 || wgmma) || k.description.find(", atomics") == std::string::npos) continue;
    if (k.description.find(", dropout") != std::string::npos) continue;
    ++rows;
    // <pass>_sm<family>_<dtype>_d<bucket>_...: the format test_cuda_rows.cpp reads too.
    const std::size_t dtype_at = std::string("bwd_sm80_").size(), bucket_at = k.name.find("_d", dtype_at);
    ASSERT_NE(bucket_at, std::string::npos) << k.name;
    const int bucket = std::atoi(k.name.c_str() + bucket_at + 2);
    tools::ProblemSpec s = problem_shape(1, 64, 64, 1, 1, bucket, bucket);
    s.dtype = k.name.compare(dtype_at, 4, "bf16") == 0   ? DType::bf16
              : k.name.compare(dtype_at, 4, "fp16") == 0 ? DType::f16
                                                         : DType::f32;
    if (k.description.find(", bias") != std::string::npos) s.bias = tools::bias_pattern(tools::BiasKind::dense);
    s.backend = Backend::cuda;
    const std::vector<std::string> found = one_pass_rows(s);
    const std::string family = k.name.substr(0, std::string("bwd_sm80").size());
    const bool tma = k.name.find("_tma_") != std::string::npos;
    EXPECT_TRUE(std::any_of(found.begin(), found.end(), [&](const std::string& n) {
      return n.rfind(family, 0) == 0 && (n.find("_tma_") != std::string::npos) == tma;
    })) << k.name << ": no one-pass row of its kind found for " << s.describe();
  }
  if (rows == 0) GTEST_SKIP() << "the build has no one-pass rows";
}

// The backward regenerates exactly the forward's mask (dV with dO = identity shows it).
TEST(CudaBackward, DropoutMaskMatchesTheMapping) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) check_dropout_masks(Backend::cuda, /*backward=*/true, dtype);
}

// The one-pass rows at D = 128 are chosen only for query loops of some length (their
// min_queries_per_key: a key sees Mq queries, about Mq / 2 when causal; 512 for sm80's row, 256
// for the wgmma row and 128 for the warp-specialised one on an sm_90 GPU), and with
// `deterministic` only where they add dQ in a fixed order (the warp-specialised row).
TEST(CudaBackwardDispatch, OnePassRowsTakeLongQueryLoops) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // A build of sm_90 SASS alone leaves out sm80's one-pass row where the wgmma row comes first.
  const bool sm90 = current_gpu().arch == 90;
  const bool tma = sm90 && compiled("bwd_sm90_bf16_d128_m64n128w12_wgmma_tma_fused_vec_plain");
  const bool wgmma = sm90 && compiled("bwd_sm90_bf16_d128_m64n128w8_wgmma_fused_vec_plain");
  if (!(tma || wgmma || compiled("bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain")) ||
      !compiled("bwd_sm80_bf16_d128_m64n64w4_vec_plain"))
    GTEST_SKIP() << "the build lacks the D = 128 rows";
  const std::int64_t shortest = tma ? 128 : wgmma ? 256 : 512;
  enum Variant { plain, causal, deterministic };
  const auto one_pass = [](std::int64_t seqlen, Variant variant) {
    tools::ProblemSpec s = problem_shape(1, seqlen, seqlen, 1, 1, 128, 128);
    if (variant == causal) s.mask = Mask::causal();
    s.deterministic = variant == deterministic;
    s.backend = Backend::cuda;
    tools::Workload w(s);
    std::string plan;
    const Status st = w.to_device();
    EXPECT_TRUE(st.ok()) << st.to_string();
    const Status sp = describe_plan(w.backward_args(), &plan);
    EXPECT_TRUE(sp.ok()) << sp.to_string();
    return plan.find("_fused_") != std::string::npos;
  };
  EXPECT_TRUE(one_pass(4096, plain));
  EXPECT_TRUE(one_pass(2048, causal));
  EXPECT_TRUE(one_pass(shortest, plain));
  EXPECT_TRUE(one_pass(2 * shortest, causal));
  EXPECT_FALSE(one_pass(shortest, causal));
  EXPECT_FALSE(one_pass(shortest / 2, plain));
  EXPECT_EQ(one_pass(4096, deterministic), tma);
}

// The one-pass rows split the key tiles of a part-full last wave along their queries
// (tail_split.hpp): problems with a few key tiles more than a whole number of waves (one partial
// tile per head, the heads chosen from the GPU's multiprocessor count; the plan must say it
// splits), against the reference. Mq not a multiple of the query tile; with GQA a part's steps
// cross from one query head to the next; 68 extra tiles are split three ways; D = 256 and 512
// (sm80's 32 x 32 row, S and dP summed over head-dim slices) run their own layouts; every case
// on each one-pass row of its bucket (sm80's, and the wgmma row on an sm_90 GPU).
TEST(CudaBackwardTailSplit, SplitTilesMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!compiled("bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain") &&
      !compiled("bwd_sm90_bf16_d128_m64n128w8_wgmma_fused_vec_plain"))
    GTEST_SKIP() << "the build lacks the D = 128 one-pass rows";
  const int sms = current_gpu().sms;
  int ran = 0;
  struct Case {
    DType dtype;
    int head_dim, head_dim_v, group;
    bool bias;
    std::int64_t seqlen_q, seqlen_k, extra_tiles;
  };
  for (const Case c : {Case{DType::bf16, 128, 128, 1, false, 1000, 40, 5}, Case{DType::f16, 120, 112, 2, false, 300, 33, 6},
                       Case{DType::bf16, 128, 128, 1, true, 1000, 40, 5}, Case{DType::bf16, 64, 64, 2, false, 520, 40, 4},
                       Case{DType::bf16, 72, 72, 1, false, 2000, 8, 68}, Case{DType::bf16, 256, 256, 1, false, 520, 40, 5},
                       Case{DType::bf16, 512, 512, 1, false, 300, 20, 3}}) {
    tools::ProblemSpec s = problem_shape(1, c.seqlen_q, c.seqlen_k, 1, 1, c.head_dim, c.head_dim_v);  // heads below
    s.dtype = c.dtype;
    if (c.bias) s.bias = tools::bias_pattern(tools::BiasKind::dense);
    s.backend = Backend::cuda;
    // Forced, each one-pass row of the case (the bias rows' default needs longer query loops). A
    // filtered build may lack the case's rows; the wgmma rows run only on an sm_90 GPU.
    for (const std::string& row : one_pass_rows(s)) {
      s.backward_overrides.kernel = row;
      s.heads_k = s.heads_q = 1;
      if (!forced_row_refusal(s).empty()) continue;
      std::string plan;
      for (int per_sm = 1; per_sm <= 4 && plan.find("split over") == std::string::npos; ++per_sm) {
        s.heads_k = std::int64_t(sms) * per_sm + c.extra_tiles;  // one key tile per head
        s.heads_q = s.heads_k * c.group;
        tools::Workload w(s);
        ASSERT_TRUE(w.to_device().ok());
        ASSERT_TRUE(describe_plan(w.backward_args(), &plan).ok());
      }
      SCOPED_TRACE(s.describe() + ": " + plan);
      EXPECT_NE(plan.find("split over"), std::string::npos);
      check_case(s);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no one-pass row ran a case";
}

// The Hopper backward's persistent grid (sm90/bwd/tile_scheduler.hpp): one CTA per SM draws the
// work items past the first wave as it finishes one. Three times as many items as SMs, 3 key tiles
// of 128 per (sequence, kv head), the last one partial, GQA (an item's steps cross query heads).
// The bf16 rows run top-left causal with 160 queries: the first key tile's items see every query
// row, the second's the last 32 (one masked step per query head), the third's none (empty items,
// drawn and done at once); the fp16 rows run bottom-right causal with 16 queries (one short step
// per query head, masked on the last key tile). Short query lengths keep the naive check short.
// Every warp-specialised row of the build, forced, against the reference (the dropout rows with
// dropout).
TEST(CudaBackwardPersistent, EveryDrawnItemMatchesTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const GpuInfo gpu = current_gpu();
  if (gpu.arch != 90) GTEST_SKIP() << "the warp-specialised backward rows run on sm_90 only";
  const int sms = gpu.sms;
  constexpr std::int64_t kBatch = 2, kKeyTiles = 3, kSeqlenK = (kKeyTiles - 1) * 128 + 77;
  const std::int64_t heads_k = (3 * sms + kBatch * kKeyTiles - 1) / (kBatch * kKeyTiles);
  int ran = 0;
  for (const std::string& row : rows_named("bwd_sm90_", "_tma_")) {
    const int head_dim = row.find("_d64_") != std::string::npos ? 64 : 128;
    const DType dtype = row.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
    const bool top_left = dtype == DType::bf16;
    tools::ProblemSpec s =
        problem_shape(kBatch, top_left ? 160 : 16, kSeqlenK, 2 * heads_k, heads_k, head_dim, head_dim);
    s.dtype = dtype;
    s.mask = Mask::causal(top_left ? Alignment::top_left : Alignment::bottom_right);
    if (ends_with(row, "_drop")) s.dropout = {0.2, 77, 5};  // the dropout rows
    s.backend = Backend::cuda;
    s.backward_overrides.kernel = row;
    if (const std::string why = forced_row_refusal(s); !why.empty()) {
      ADD_FAILURE() << row << ": " << why;
      continue;
    }
    SCOPED_TRACE(row + ": " + s.describe());
    check_case(s);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "the build has no warp-specialised backward row";
}

// The warp-specialised Hopper rows, forced, on packed variable-length batches: sequences longer and
// shorter than a tile, without queries or keys, seqused_k below a sequence's keys, both causal
// alignments and none, default and `deterministic` (dQ in key-tile order, per sequence); NaN in
// every row of q and dout outside the sequences and every K and V row no sequence's keys use (the
// Q, dO, K and V boxes run on into them; the kernel zeroes them in shared memory).
TEST(CudaBackwardHopper, VariableLengthsMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "the warp-specialised backward rows run on sm_90 only";
  int ran = 0;
  for (const std::string& row : rows_named("bwd_sm90_", "_tma_")) {
    for (const Mask& mask : {Mask::none(), Mask::causal(Alignment::bottom_right), Mask::causal()}) {
      for (const bool deterministic : {false, true}) {
        tools::ProblemSpec s = packed_sequences(row.find("_d64_") != std::string::npos ? 64 : 128);
        s.dtype = row.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
        s.mask = mask;
        s.deterministic = deterministic;
        if (ends_with(row, "_drop")) s.dropout = {0.3, 8, 1};
        s.backend = Backend::cuda;
        s.backward_overrides.kernel = row;
        SCOPED_TRACE(row);
        CheckOptions options;
        options.nan_outside_sequences = true;
        check_case(s, options);
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "the build has no warp-specialised backward row";
}

// Bit-identical gradients run after run (the kernels own their output rows: no atomics).
TEST(CudaBackwardDeterminism, TwentyRunsAreBitIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s = problem_shape(2, 200, 300, 4, 2, 64, 64);
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  s.dropout = {0.1, 5, 0};
  s.deterministic = true;
  s.backend = Backend::cuda;
  check_backward_bit_identical(s, 20, /*skip_unsupported=*/!has_catch_all_backward(s.dtype));
}

// `deterministic` on the Hopper rows (sm90/bwd/dq_writer.hpp): the key tiles add into each query
// tile's dQ in tile order, each waiting for the one before, walking the query tiles downwards.
// 256 work items (more than the SMs, so that neighbouring key tiles run side by side and wait),
// GQA. Every warp-specialised row of the build, forced, under each mask shape: none (every key
// tile adds into every query tile: the longest chains), bottom-right causal with fewer queries
// than keys (steps that start mid-tile, moved to the query tile's start), top-left causal with
// more queries than keys, and a window bounded on both sides (each key tile's query tiles start
// and end later than the previous tile's).
TEST(CudaBackwardDeterminism, HopperRowsAddDqInKeyTileOrder) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "the warp-specialised backward rows run on sm_90 only";
  int ran = 0;
  for (const std::string& row : rows_named("bwd_sm90_", "_tma_")) {
    const int head_dim = row.find("_d64_") != std::string::npos ? 64 : 128;
    const bool bf16 = row.find("_bf16_") != std::string::npos;
    struct Case {
      std::int64_t queries;
      Mask mask;
    };
    for (const Case& c : {Case{1000, Mask::none()}, Case{777, Mask::causal(Alignment::bottom_right)},
                          Case{1100, Mask::causal()}, Case{1000, Mask::window(300, 200)}}) {
      tools::ProblemSpec s = problem_shape(2, c.queries, 1000, 32, 16, head_dim, head_dim);
      s.dtype = bf16 ? DType::bf16 : DType::f16;
      s.mask = c.mask;
      s.deterministic = true;
      if (ends_with(row, "_drop")) s.dropout = {0.1, 31, 2};
      s.backend = Backend::cuda;
      s.backward_overrides.kernel = row;
      if (const std::string why = forced_row_refusal(s); !why.empty()) {
        ADD_FAILURE() << row << ": " << why;
        continue;
      }
      SCOPED_TRACE(row);
      check_backward_bit_identical(s, 20);
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "the build has no warp-specialised backward row";
}

// The same with a bias shared by the batch and the heads ([1, 1, Mq, Mk]): dbias is summed over
// them in a fixed order.
TEST(CudaBackwardDeterminism, BroadcastDbiasIsBitIdentical) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s = problem_shape(2, 130, 77, 4, 4, 32, 32);
  s.dtype = DType::f16;
  s.bias = tools::BiasPattern{true, true, false, false};
  s.mask = Mask::causal();
  s.deterministic = true;
  s.backend = Backend::cuda;
  check_backward_bit_identical(s, 20, /*skip_unsupported=*/!has_catch_all_backward(s.dtype));
}

// A small bf16 problem on the device with the forward run: the workspace tests' inputs.
std::unique_ptr<tools::Workload> small_problem_after_forward() {
  tools::ProblemSpec s = problem_shape(1, 64, 64, 2, 2, 64, 64);
  s.backend = Backend::cuda;
  auto w = std::make_unique<tools::Workload>(s);
  w->fill_inputs(next_seed());
  if (!w->to_device().ok() || !forward(w->forward_args()).ok()) return nullptr;
  return w;
}

// A caller's workspace smaller than the plan's is refused before anything runs: the gradients
// keep their poison.
TEST(CudaBackwardWorkspace, ASmallerOneIsRefusedBeforeAnyLaunch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto problem = small_problem_after_forward();
  ASSERT_NE(problem, nullptr);
  tools::Workload& w = *problem;
  ASSERT_TRUE(w.reserve_workspace().ok());
  BackwardArgs a = w.backward_args();
  std::size_t need = 0;
  ASSERT_TRUE(backward_workspace_size(a, &need).ok());
  ASSERT_GT(need, 0u);
  ASSERT_NE(a.workspace, nullptr);
  a.workspace_bytes = need - 1;
  w.poison_outputs();
  const Status st = backward(a);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  for (tools::Tensor t : {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv})
    for (double x : w.to_double(t)) ASSERT_TRUE(std::isnan(x));
}

// The caller's allocator instead of a workspace: asked once, after planning, for the size the
// query gives; the gradients equal those of a call with the workspace given outright.
TEST(CudaBackwardWorkspace, TheCallersAllocatorIsAskedOnceForThePlannedSize) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s = problem_shape(2, 77, 130, 4, 2, 64, 64);
  s.mask = Mask::causal(Alignment::bottom_right);
  s.deterministic = true;  // bit-identical gradients from the two calls
  s.backend = Backend::cuda;
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  ASSERT_TRUE(w.to_device().ok());
  ASSERT_TRUE(w.reserve_workspace().ok());
  BackwardArgs given = w.backward_args();
  std::size_t need = 0;
  ASSERT_TRUE(backward_workspace_size(given, &need).ok());
  ASSERT_GT(need, 0u);
  w.poison_outputs();  // out and lse too: the forward runs again before each backward
  ASSERT_TRUE(forward(w.forward_args()).ok());
  ASSERT_TRUE(backward(given).ok());
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  std::vector<std::vector<double>> expected;
  for (tools::Tensor t : {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv}) expected.push_back(w.to_double(t));

  BackwardArgs a = w.backward_args();
  std::vector<std::size_t> asked;
  a.allocate_workspace = [&](std::size_t bytes) {
    asked.push_back(bytes);
    return given.workspace;
  };
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  ASSERT_TRUE(backward(a).ok());
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], need);
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  int i = 0;
  for (tools::Tensor t : {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv}) {
    const std::vector<double> got = w.to_double(t);
    ASSERT_EQ(got.size(), expected[i].size());
    for (std::size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], expected[i][e]) << tools::to_string(t) << " " << e;
    ++i;
  }
}

// An allocator that returns null fails the call before any launch: the gradients keep their poison.
TEST(CudaBackwardWorkspace, ANullFromTheAllocatorIsOutOfMemoryBeforeAnyLaunch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto problem = small_problem_after_forward();
  ASSERT_NE(problem, nullptr);
  tools::Workload& w = *problem;
  BackwardArgs a = w.backward_args();
  a.allocate_workspace = [](std::size_t) -> void* { return nullptr; };
  w.poison_outputs();
  const Status st = backward(a);
  EXPECT_EQ(st.code(), StatusCode::out_of_memory);
  EXPECT_NE(st.message().find("allocator returned null"), std::string::npos) << st.message();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  for (tools::Tensor t : {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv})
    for (double x : w.to_double(t)) ASSERT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace memattn::testing
