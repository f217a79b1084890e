// The CUDA forward against the float64 reference on every feature case (DESIGN.md §3), plus the
// sizes that stress indexing: batch x heads above 65535, and a sequence past 65536 keys with a
// dense bias whose offsets pass 2^31 (a 2^31-element bias, 4.3 GB); which tensors the Hopper TMA
// rows take, every work item their persistent grid draws, their bias rows on the bias cases, their
// dropout rows, and their packed variable-length batches. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

class CudaForward : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CudaForward, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_case(GetParam().spec, {/*backward=*/false});
}

INSTANTIATE_TEST_SUITE_P(Features, CudaForward, ::testing::ValuesIn(named_cases(Backend::cuda, {DType::bf16, DType::f16, DType::f32})),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

TEST(CudaForward, DropoutMaskMatchesTheMapping) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) check_dropout_masks(Backend::cuda, /*backward=*/false, dtype);
}

TEST(CudaForwardSizes, BatchTimesHeadsAbove65535) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 1100;
  s.heads_q = s.heads_k = 64;  // 70400 (sequence, head) pairs
  s.seqlen_q = s.seqlen_k = 9;
  s.head_dim = s.head_dim_v = 32;
  s.dtype = DType::bf16;
  s.backend = Backend::cuda;
  check_case(s, {false});
}

// Scores with a spread of ~23 (log2 units) per row: tiles after the first raise a row's maximum
// by more than softmax.hpp's kMaxRiseLog2 again and again, so the maximum moves mid-row (and the
// output is rescaled) instead of settling, in the register rows (D = 32), the wide rows (D = 512)
// and the pair (D = 1000, sm_90); causal bottom-right too, whose first tiles are partly masked.
TEST(CudaForwardSoftmax, MaximumMovesMidRow) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::int64_t d : {32, 512, 1000}) {
    for (const bool causal : {false, true}) {
      tools::ProblemSpec s;
      s.batch = 1;
      s.heads_q = s.heads_k = 2;
      s.seqlen_q = 70;
      s.seqlen_k = 333;  // five key tiles of 64 and a partial one
      s.head_dim = s.head_dim_v = d;
      s.scale = 16.0 / std::sqrt(double(d));  // scores spread ~16 natural units, ~23 in log2
      if (causal) s.mask = Mask::causal(Alignment::bottom_right);
      s.dtype = DType::bf16;
      s.backend = Backend::cuda;
      SCOPED_TRACE("D = " + std::to_string(d) + (causal ? ", causal" : ""));
      check_case(s, {false});
    }
  }
}

// Whether the row the dispatcher picks for `spec` can split its keys. A build without the sm80
// register rows of a problem (a reduced table) picks one that cannot, and then a part count is
// refused before any launch, naming the row: checked here.
bool row_splits_keys(const tools::ProblemSpec& spec) {
  tools::ProblemSpec probe = spec;
  probe.forward_overrides.num_splits = 2;
  tools::Workload w(probe);
  EXPECT_TRUE(w.to_device().ok());
  std::string plan;
  const Status s = describe_plan(w.forward_args(), &plan);
  if (s.ok()) return true;
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("cannot split a query tile's keys"), std::string::npos) << s.message();
  return false;
}

// Split keys (split_keys.hpp, split_combine.cu): every part count, and the dispatcher's own
// choice (0), against the reference on the problems splitting is for (few query rows, many keys,
// decoding with grouped heads) and on the awkward ones: parts without keys (causal rows near the start, a narrow window), key
// counts that are not whole tiles, bias and dropout, GQA, variable lengths with seqused_k and rows
// outside every sequence, and the register buckets 64 to 256.
TEST(CudaForwardSplitKeys, EveryPartCountMatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<tools::ProblemSpec> problems;
  const auto problem = [&](std::int64_t mq, std::int64_t mk, std::int64_t d, DType dtype) -> tools::ProblemSpec& {
    tools::ProblemSpec s;
    s.batch = 3;
    s.seqlen_q = mq;
    s.seqlen_k = mk;
    s.heads_q = 8;
    s.heads_k = 2;
    s.head_dim = s.head_dim_v = d;
    s.dtype = dtype;
    s.backend = Backend::cuda;
    problems.push_back(s);
    return problems.back();
  };
  problem(1, 1000, 128, DType::bf16);
  // One query row with grouped heads: the heads of a kv head run as its rows (pack_gqa.hpp), the
  // mask becoming a key range.
  problem(1, 1000, 128, DType::bf16).mask = Mask::causal(Alignment::top_left);
  {
    tools::ProblemSpec& s = problem(1, 900, 64, DType::f16);
    s.mask = Mask::window(40, 3, Alignment::bottom_right);
    s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
  }
  problem(1, 513, 128, DType::bf16).bias = tools::bias_pattern(tools::BiasKind::dense);
  {
    tools::ProblemSpec& s = problem(1, 300, 128, DType::bf16);  // heads of stride 0 at full size
    s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
    s.bias_expanded = true;
  }
  problem(1, 700, 128, DType::bf16).heads_k = 8;  // no groups: one row per tile
  problem(5, 777, 64, DType::f16).mask = Mask::causal(Alignment::bottom_right);
  problem(70, 333, 128, DType::bf16).mask = Mask::causal(Alignment::top_left);
  problem(9, 1500, 96, DType::bf16).mask = Mask::window(40, 3, Alignment::bottom_right);
  {
    tools::ProblemSpec& s = problem(3, 640, 128, DType::bf16);
    s.bias = tools::bias_pattern(tools::BiasKind::dense);
    s.dropout = Dropout{0.2, 1234, 7};
  }
  {
    tools::ProblemSpec& s = problem(0, 0, 64, DType::bf16);
    s.varlen_q = {1, 3, 0, 2};
    s.varlen_k = {500, 64, 10, 1000};
    s.seqused_k = {480, 64, 0, 999};
    s.varlen_outside = 2;
    problems.push_back(s);
    problems.back().varlen_bound_slack = 3;  // the lengths stay on the device
  }
  problem(2, 2000, 256, DType::f16);
  int split = 0;  // problems whose row splits its keys
  for (const tools::ProblemSpec& base : problems) {
    const bool splits_keys = row_splits_keys(base);
    split += splits_keys;
    for (const int splits : {0, 1, 2, 3, 7, 64}) {
      if (splits > 1 && !splits_keys) continue;
      tools::ProblemSpec s = base;
      s.forward_overrides.num_splits = splits;
      SCOPED_TRACE(s.describe());
      check_case(s, {false});
    }
  }
  if (split == 0) std::printf("note: no problem's row splits keys in this build (no sm80 register rows for them)\n");
}

// The decoding rows (sm80/decode/), forced, on what they are for and on their edges: one query
// row with 4 or 8 grouped heads as its rows (pack_gqa.hpp) or none, a few rows under a causal
// mask, a window, keys that fill no whole 16-key step (and fewer than one step), D and Dv below the
// bucket and apart, a negative scale, variable lengths with seqused_k, sequences without keys;
// with the dispatcher's part count and forced ones (parts without keys among them).
TEST(CudaForwardDecode, DecodingRowsMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::string> rows;
  for (const KernelInfo& k : list_kernels())
    if (k.name.find("_decode_") != std::string::npos) rows.push_back(k.name);
  if (rows.empty()) GTEST_SKIP() << "no decoding row in this build";
  for (const std::string& row : rows) {
    const bool fp16 = row.find("_fp16_") != std::string::npos;
    const int bucket = std::atoi(row.c_str() + row.find("_d") + 2);
    std::vector<tools::ProblemSpec> problems;
    const auto problem = [&](std::int64_t mq, std::int64_t mk, std::int64_t hq, std::int64_t hk) -> tools::ProblemSpec& {
      tools::ProblemSpec s;
      s.batch = 3;
      s.seqlen_q = mq;
      s.seqlen_k = mk;
      s.heads_q = hq;
      s.heads_k = hk;
      s.head_dim = s.head_dim_v = bucket;
      s.dtype = fp16 ? DType::f16 : DType::bf16;
      s.backend = Backend::cuda;
      s.forward_overrides.kernel = row;
      problems.push_back(s);
      return problems.back();
    };
    problem(1, 1000, 16, 4).mask = Mask::causal(Alignment::bottom_right);
    problem(1, 777, 16, 2);
    problem(1, 300, 4, 4).mask = Mask::window(40, 0, Alignment::bottom_right);
    problem(4, 517, 4, 2).mask = Mask::causal(Alignment::bottom_right);
    problem(8, 5, 2, 2).mask = Mask::causal(Alignment::bottom_right);  // rows that see no key
    problem(1, 7, 8, 2);
    {
      tools::ProblemSpec& s = problem(2, 333, 4, 1);
      s.head_dim = bucket - 8;
      s.head_dim_v = bucket - 24;
      s.scale = -0.3;
    }
    {
      tools::ProblemSpec& s = problem(0, 0, 8, 2);
      s.varlen_q = {1, 3, 0, 1};
      s.varlen_k = {500, 64, 10, 1000};
      s.seqused_k = {480, 0, 0, 999};
      s.varlen_outside = 2;
    }
    for (const tools::ProblemSpec& base : problems) {
      for (const int splits : {0, 1, 3, 64}) {
        tools::ProblemSpec s = base;
        s.forward_overrides.num_splits = splits;
        SCOPED_TRACE(row + ": " + s.describe());
        check_case(s, {false});
      }
    }
  }
}

// The Hopper rows (TMA loads) on an sm_90 GPU: the dispatcher picks one for a plain aligned problem
// whose keys see many queries, and passes over it for K/V broadcast over the batch (a stride of 0
// no tensor map describes), which then runs on another row; forced, the row refuses it before any
// launch, saying why. Skipped where the build has no such row or the GPU is not an sm_90.
TEST(CudaForwardHopper, TmaRowsTakeWhatTensorMapsDescribe) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "not an sm_90 GPU";
  const std::string row = "fwd_sm90_bf16_d128_m128n128w12_wgmma_tma_vec_plain";
  const std::vector<KernelInfo> rows = list_kernels();
  if (std::none_of(rows.begin(), rows.end(), [&](const KernelInfo& k) { return k.name == row; }))
    GTEST_SKIP() << row << " is not in this build";
  tools::ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = s.seqlen_k = 300;
  s.heads_q = s.heads_k = 4;
  s.head_dim = s.head_dim_v = 128;
  s.mask = Mask::causal();
  s.dtype = DType::bf16;
  s.backend = Backend::cuda;
  const auto plan = [](const tools::ProblemSpec& spec, std::string* text) {
    tools::Workload w(spec);
    EXPECT_TRUE(w.to_device().ok());
    return describe_plan(w.forward_args(), text);
  };
  std::string text;
  ASSERT_TRUE(plan(s, &text).ok());
  EXPECT_NE(text.find("TMA loads"), std::string::npos) << text;
  s.kv_broadcast_batch = true;
  ASSERT_TRUE(plan(s, &text).ok());
  EXPECT_EQ(text.find("TMA loads"), std::string::npos) << text;
  check_case(s, {false});
  s.forward_overrides.kernel = row;
  const Status forced = plan(s, &text);
  EXPECT_EQ(forced.code(), StatusCode::invalid_argument) << forced.to_string();
  EXPECT_NE(forced.message().find("TMA loads need"), std::string::npos) << forced.message();
}

// The Hopper forward's persistent grid (sm90/fwd/producer.hpp): one CTA per SM draws the query
// tiles past the first wave as it finishes one and hands them to its consumer warpgroups. Three
// times as many items as SMs, 3 query tiles per (sequence, head), the last one partial, 168 keys
// (a partial second key tile). The bf16 rows run top-left causal (the first query tile sees one key
// tile, the others two), the fp16 rows bottom-right causal (the first query tile sees no key: empty
// items, written by the consumers alone; the second in part), the fp32 rows too. Every TMA row of
// the build, forced, against the reference.
TEST(CudaForwardHopper, EveryDrawnItemMatchesTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const GpuInfo gpu = current_gpu();
  if (gpu.arch != 90) GTEST_SKIP() << "not an sm_90 GPU";
  const int sms = gpu.sms;
  constexpr std::int64_t kBatch = 2, kQueryTiles = 3;
  const std::int64_t heads = (3 * sms + kBatch * kQueryTiles - 1) / (kBatch * kQueryTiles);
  int ran = 0;
  // A row's name gives its head dim and query tile: fwd_sm90_bf16_d64_m192n96w16_wgmma_tma_vec_plain.
  const auto number_after = [](const std::string& name, const char* tag) {
    return std::stoi(name.substr(name.find(tag) + std::char_traits<char>::length(tag)));
  };
  for (const std::string& name : rows_named("fwd_sm90_", "_tma_")) {
    const DType dtype = name.find("_bf16_") != std::string::npos   ? DType::bf16
                        : name.find("_fp16_") != std::string::npos ? DType::f16
                                                                     : DType::f32;
    const bool top_left = dtype == DType::bf16;
    tools::ProblemSpec s;
    s.batch = kBatch;
    s.seqlen_q = (kQueryTiles - 1) * number_after(name, "_m") + 77;
    s.seqlen_k = 168;
    s.heads_q = s.heads_k = heads;
    s.head_dim = s.head_dim_v = number_after(name, "_d");
    s.mask = Mask::causal(top_left ? Alignment::top_left : Alignment::bottom_right);
    s.dtype = dtype;
    s.backend = Backend::cuda;
    s.forward_overrides.kernel = name;
    // The bias rows (..._btile_vec_bias) take bias problems only: dense, or broadcast over heads;
    // the dropout rows (..._dpair_vec_drop) run with dropout.
    if (ends_with(name, "_bias"))
      s.bias = tools::bias_pattern(top_left ? tools::BiasKind::dense : tools::BiasKind::broadcast_heads);
    if (ends_with(name, "_drop")) s.dropout = {0.2, 5, 9};
    CheckOptions options;
    options.backward = false;
    if (dtype == DType::f32) {  // the 3xTF32 rows: their error against a naive fp32 one's, as CudaRows
      s.precision = Precision::tf32x3;
      options.naive_factor = 3;
    }
    SCOPED_TRACE(name + ": " + s.describe());
    check_case(s, options);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "the build has no TMA forward row";
}

// The Hopper forward's bias rows (each key tile's bias by TMA: sm90/fwd/traits.hpp's
// FwdBiasTraits), forced, on every bias they take: dense, broadcast over the batch, the heads or
// the queries (a key-padding bias, as [B, H, 1, Mk] and expanded with a stride of 0); under no
// mask, both causal alignments (Mq above and below Mk: fully masked rows), a window, GQA, head
// dims below the bucket. A bias no tensor map describes (fp32, broadcast over the keys, rows of 150
// keys: 300 bytes) is refused by the forced row before any launch, saying why, and runs on another
// row by default. Skipped where the build has no bias row or the GPU is not an sm_90.
TEST(CudaForwardHopper, BiasRowsMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "not an sm_90 GPU";
  using tools::BiasKind;
  struct Case {
    std::int64_t mq, mk;
    int heads_q, heads_k;
    BiasKind bias;
    Mask mask;
    bool expanded = false;  // broadcast dimensions at full size with a stride of 0
  };
  const Case cases[] = {
      {150, 200, 2, 2, BiasKind::dense, Mask::none()},
      {300, 168, 4, 2, BiasKind::broadcast_batch, Mask::causal()},
      {77, 264, 4, 1, BiasKind::broadcast_heads, Mask::causal(Alignment::bottom_right)},
      {264, 136, 2, 2, BiasKind::dense, Mask::causal(Alignment::bottom_right)},  // rows that see no key
      {200, 256, 2, 2, BiasKind::dense, Mask::window(30, 7, Alignment::top_left)},
      {1, 520, 4, 2, BiasKind::row, Mask::none()},
      {150, 264, 4, 2, BiasKind::row, Mask::causal(Alignment::bottom_right)},
      {300, 200, 2, 2, BiasKind::row, Mask::none(), true},
  };
  std::string name;  // the row under test
  // The row `name`, forced, refuses the problem before any launch with `reason`.
  const auto expect_refused = [&](tools::ProblemSpec t, const char* reason) {
    t.forward_overrides.kernel = name;
    tools::Workload w(t);
    ASSERT_TRUE(w.to_device().ok());
    std::string text;
    const Status forced = describe_plan(w.forward_args(), &text);
    EXPECT_EQ(forced.code(), StatusCode::invalid_argument) << forced.to_string();
    EXPECT_NE(forced.message().find(reason), std::string::npos) << forced.message();
  };
  int ran = 0;
  for (const std::string& row : rows_named("fwd_sm90_", "_tma_btile_")) {
    name = row;
    const int bucket = std::stoi(name.substr(name.find("_d") + 2));
    for (const int d : {bucket, bucket - 24}) {
      for (const Case& c : cases) {
        tools::ProblemSpec s;
        s.batch = 2;
        s.seqlen_q = c.mq;
        s.seqlen_k = c.mk;
        s.heads_q = c.heads_q;
        s.heads_k = c.heads_k;
        s.head_dim = s.head_dim_v = d;
        s.dtype = name.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
        s.bias = tools::bias_pattern(c.bias);
        s.bias_expanded = c.expanded;
        s.mask = c.mask;
        s.backend = Backend::cuda;
        s.forward_overrides.kernel = name;
        SCOPED_TRACE(name + ": " + s.describe());
        check_case(s, {false});
        ++ran;
      }
    }
    // Biases that no tensor map describes, with the reason the forced row gives.
    tools::ProblemSpec s;
    s.batch = 2;
    s.seqlen_q = 150;
    s.seqlen_k = 200;
    s.heads_q = s.heads_k = 2;
    s.head_dim = s.head_dim_v = bucket;
    s.dtype = name.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
    s.backend = Backend::cuda;
    for (int variant = 0; variant < 3; ++variant) {
      tools::ProblemSpec t = s;
      t.bias = tools::bias_pattern(BiasKind::dense);
      t.bias_f32 = variant == 0;
      if (variant == 1) t.bias = tools::BiasPattern{false, false, false, true};  // over the keys
      if (variant == 2) t.seqlen_k = 150;  // rows of 300 bytes: no bias tile takes them
      SCOPED_TRACE(name + " refuses " + t.describe());
      check_case(t, {false});  // by default on another row
      expect_refused(t, variant == 0 ? "bias by TMA needs" : "bias tile needs");
    }
    expect_refused(s, "problems with a bias only");  // no bias: the plain rows take it
  }
  if (ran == 0) GTEST_SKIP() << "the build has no Hopper bias row";
}

// The Hopper forward's dropout rows (sm90/fwd/traits.hpp's FwdDropoutTraits), forced, against the
// reference (which drops the same elements): rates from rare to most, under no mask, both causal
// alignments (rows that see no key), a window, GQA and MQA, a negative scale (the unmasked tiles'
// other loop), head dims below the bucket and D != Dv, several work items per CTA. Bit for bit,
// the mask itself is CudaRows.DropoutMaskMatchesTheMapping's. Skipped where the build has no
// Hopper dropout row or the GPU is not an sm_90.
TEST(CudaForwardHopper, DropoutRowsMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "not an sm_90 GPU";
  struct Case {
    std::int64_t batch, mq, mk;
    int heads_q, heads_k;
    double p;
    Mask mask;
    float scale = 0.0f;  // 0: 1 / sqrt(D)
  };
  const Case cases[] = {
      {2, 150, 200, 2, 2, 0.1, Mask::none()},
      {1, 300, 168, 4, 2, 0.5, Mask::causal()},
      {2, 77, 264, 4, 1, 0.9, Mask::causal(Alignment::bottom_right)},
      {1, 264, 136, 2, 2, 0.25, Mask::causal(Alignment::bottom_right)},  // rows that see no key
      {1, 200, 256, 2, 2, 0.1, Mask::window(30, 7, Alignment::top_left)},
      {2, 130, 300, 2, 2, 0.01, Mask::none(), -0.05f},
      {3, 700, 700, 8, 2, 0.15, Mask::causal()},  // more items than some SMs' first draw
  };
  int ran = 0;
  for (const std::string& name : rows_named("fwd_sm90_", "_tma_dpair_")) {
    const int bucket = std::stoi(name.substr(name.find("_d") + 2));
    for (const int d : {bucket, bucket - 24}) {
      for (const Case& c : cases) {
        tools::ProblemSpec s;
        s.batch = c.batch;
        s.seqlen_q = c.mq;
        s.seqlen_k = c.mk;
        s.heads_q = c.heads_q;
        s.heads_k = c.heads_k;
        s.head_dim = d;
        s.head_dim_v = d == bucket ? d : bucket - 8;
        s.dtype = name.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
        s.dropout = {c.p, 1234567 + std::uint64_t(ran), std::uint64_t(3 * ran)};
        s.mask = c.mask;
        if (c.scale != 0.0f) s.scale = c.scale;
        s.backend = Backend::cuda;
        s.forward_overrides.kernel = name;
        SCOPED_TRACE(name + ": " + s.describe());
        check_case(s, {false});
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "the build has no Hopper dropout row";
}

// The 16-bit Hopper forward rows, forced, on packed variable-length batches: sequences longer
// and shorter than a tile, without queries or keys, seqused_k below a sequence's keys, both causal
// alignments and none, a bias on the bias rows; the rows outside the sequences hold NaN (a key
// tile's box runs on into them, and the consumers zero V's rows there). Against the reference.
TEST(CudaForwardHopper, VariableLengthsMatchTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (current_gpu().arch != 90) GTEST_SKIP() << "not an sm_90 GPU";
  int ran = 0;
  for (const std::string& name : rows_named("fwd_sm90_", "_tma_")) {
    if (name.find("_fp32_") != std::string::npos) continue;
    const bool bias = name.find("_btile_") != std::string::npos;
    for (const Mask& mask : {Mask::none(), Mask::causal(Alignment::bottom_right), Mask::causal()}) {
      tools::ProblemSpec s = packed_sequences(std::stoi(name.substr(name.find("_d") + 2)));
      s.dtype = name.find("_bf16_") != std::string::npos ? DType::bf16 : DType::f16;
      if (bias) s.bias = tools::bias_pattern(tools::BiasKind::dense);
      if (ends_with(name, "_drop")) s.dropout = {0.3, 21, 4};
      s.mask = mask;
      s.backend = Backend::cuda;
      s.forward_overrides.kernel = name;
      SCOPED_TRACE(name);
      CheckOptions options;
      options.backward = false;
      options.nan_outside_sequences = true;
      check_case(s, options);
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "the build has no 16-bit Hopper forward row";
}

TEST(CudaForwardSizes, LongSequenceWithDenseBiasNeedsInt64Offsets) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  tools::ProblemSpec s;
  s.batch = 1;
  s.heads_q = s.heads_k = 1;
  s.seqlen_q = 32769;  // with bottom-right alignment the last rows read bias offsets past 2^31
  s.seqlen_k = 65540;  // and more than 65536 keys
  s.head_dim = s.head_dim_v = 64;
  s.dtype = DType::bf16;
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  s.mask = Mask::window(40, 3, Alignment::bottom_right);  // keeps the float64 reference cheap
  s.with_dbias = false;
  s.backend = Backend::cuda;
  check_case(s, {false});
}

}  // namespace
}  // namespace memattn::testing
