// fp32 precision (Options::precision): the 3xTF32 rows against the FMA rows on the same inputs,
// both against the float64 reference, over the shapes and features the 3xTF32 rows take (forward:
// aligned and unaligned head dims, masks, bias, dropout, GQA, long key loops; backward: aligned
// head dims up to 128, masks, GQA, long loops) and at large scores; and which rows each setting
// runs. Skipped without a GPU or without a 3xTF32 row in the build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "memattn/attention.hpp"
#include "memattn/kernels.hpp"
#include "memattn/reference.hpp"
#include "support/seed.hpp"
#include "workload/verify.hpp"

namespace memattn::testing {
namespace {

bool has_tf32x3_rows() {
  for (const KernelInfo& k : list_kernels())
    if (k.name.find("_tf32x3_") != std::string::npos) return true;
  return false;
}

// Whether the build has a 3xTF32 backward row for head dims up to d (its bucket, from the name:
// bwd_sm80_fp32_d<bucket>_...).
bool has_tf32x3_backward_for(std::int64_t d) {
  const std::string tag = "_fp32_d";
  for (const KernelInfo& k : list_kernels()) {
    const std::size_t at = k.name.find(tag);
    if (k.name.rfind("bwd_", 0) == 0 && k.name.find("_tf32x3_") != std::string::npos && at != std::string::npos &&
        std::stoll(k.name.substr(at + tag.size())) >= d)
      return true;
  }
  return false;
}

struct PrecisionCase {
  std::string name;
  tools::ProblemSpec spec;
  double logit = 0;  // > 0: scale so that the scores' standard deviation is about this
  // 3xTF32's error against the FMA rows' on the same inputs, at most. At a standard deviation of
  // 1e4 the few near-tie rows carry the error, and a 3xTF32 score's error is about three fp32
  // roundings against an FMA's one: 5.5x on one seed (docs/decisions.md, fp32 precision).
  double bar = 4;
};

void PrintTo(const PrecisionCase& c, std::ostream* os) { *os << c.spec.describe(); }

tools::ProblemSpec base(std::int64_t d, std::int64_t mq, std::int64_t mk) {
  tools::ProblemSpec s;
  s.dtype = DType::f32;
  s.backend = Backend::cuda;
  s.batch = 2;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = d;
  s.seqlen_q = mq;
  s.seqlen_k = mk;
  return s;
}

std::vector<PrecisionCase> cases() {
  std::vector<PrecisionCase> out;
  // 32-128: the register rows; 256 and 300 (Dv 72): the global-accumulator rows.
  for (std::int64_t d : {32, 64, 128, 256}) out.push_back({"d" + std::to_string(d), base(d, 150, 200)});
  out.push_back({"d300_dv72", base(300, 90, 140)});
  out.back().spec.head_dim_v = 72;
  out.push_back({"d61_unaligned", base(61, 100, 120)});
  out.push_back({"d7_dv13", base(7, 50, 60)});
  out.back().spec.head_dim_v = 13;
  PrecisionCase c{"causal_long_keys", base(128, 256, 2048)};
  c.spec.mask = Mask::causal(Alignment::bottom_right);
  out.push_back(c);
  c = {"window_bias_dropout", base(64, 130, 170)};
  c.spec.mask = Mask::window(40, 3);
  c.spec.bias = tools::bias_pattern(tools::BiasKind::dense);
  c.spec.dropout = {0.2, 5, 7};
  out.push_back(c);
  for (double logit : {1e2, 1e3, 1e4}) {
    PrecisionCase l{"logits_" + std::to_string(int(std::log10(logit))), base(128, 100, 300), logit,
                    logit >= 1e4 ? 8.0 : 4.0};
    l.spec.scale = logit / std::sqrt(128.0);  // unit-normal q and k: q . k has variance D
    out.push_back(l);
  }
  // D = 64 runs on the warpgroup rows on sm_90, where they are built.
  PrecisionCase l{"logits_4_d64", base(64, 100, 300), 1e4, 8.0};
  l.spec.scale = 1e4 / 8.0;
  out.push_back(l);
  return out;
}

class CudaPrecision : public ::testing::TestWithParam<PrecisionCase> {};

// out of a forward at `precision` on the inputs of `seed`, and its plan.
std::vector<double> run_forward(tools::ProblemSpec spec, Precision precision, std::uint64_t seed, std::string* plan,
                                std::vector<double>* reference_out) {
  spec.precision = precision;
  tools::Workload w(spec);
  w.fill_inputs(seed);
  EXPECT_TRUE(w.to_device().ok());
  w.poison_outputs();
  const ForwardArgs args = w.forward_args();
  EXPECT_TRUE(describe_plan(args, plan).ok());
  const Status s = forward(args);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(w.copy_outputs_to_host().ok());
  if (reference_out != nullptr) {
    reference::ForwardResult ref;
    EXPECT_TRUE(reference::forward(w.host_forward_args(), &ref).ok());
    *reference_out = ref.out;
  }
  return w.to_double(tools::Tensor::out);
}

// Within DESIGN's fp32 tolerance at ordinary scores, and within `bar` (4x) the FMA rows' error on
// the same inputs everywhere.
TEST_P(CudaPrecision, Tf32x3TracksTheFmaError) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!has_tf32x3_rows()) GTEST_SKIP() << "no 3xTF32 row in this build";
  const PrecisionCase& c = GetParam();
  SCOPED_TRACE(c.spec.describe());
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  std::string fma_plan, tf32_plan;
  std::vector<double> ref;
  const std::vector<double> fma = run_forward(c.spec, Precision::ieee, seed, &fma_plan, &ref);
  const std::vector<double> tf32 = run_forward(c.spec, Precision::tf32x3, seed, &tf32_plan, nullptr);
  EXPECT_NE(fma_plan.find("_ffma_"), std::string::npos) << fma_plan;
  EXPECT_NE(tf32_plan.find("_tf32x3_"), std::string::npos) << tf32_plan;
  const tools::ErrorStats fma_err = tools::compare(fma, ref), tf32_err = tools::compare(tf32, ref);
  EXPECT_EQ(tf32_err.bad, 0);
  EXPECT_EQ(fma_err.bad, 0);
  // At large scores the FMA rows themselves reach the limit (2.4e-5 at logits of 1e3 on an H200).
  if (c.logit == 0) EXPECT_LE(tf32_err.rel_l2, tools::output_tolerance(DType::f32));
  constexpr double kFloor = 6e-8;  // about an fp32 ulp at 1: where the FMA rows come out exact
  EXPECT_LE(tf32_err.rel_l2, c.bar * fma_err.rel_l2 + kFloor)
      << "3xTF32 " << tf32_err.rel_l2 << " against FMAs " << fma_err.rel_l2;
  std::printf("    %-22s FMA %.2e  3xTF32 %.2e  ratio %.2f\n", c.name.c_str(), fma_err.rel_l2, tf32_err.rel_l2,
              fma_err.rel_l2 > 0 ? tf32_err.rel_l2 / fma_err.rel_l2 : 0.0);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaPrecision);
INSTANTIATE_TEST_SUITE_P(Fp32, CudaPrecision, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<PrecisionCase>& info) { return info.param.name; });

// The backward's cases: the head dims of its 3xTF32 rows (aligned, up to 256; GQA throughout),
// masks, a query loop long enough to split the last wave's key tiles, and large scores.
std::vector<PrecisionCase> backward_cases() {
  std::vector<PrecisionCase> out;
  for (std::int64_t d : {32, 64, 128, 256}) out.push_back({"d" + std::to_string(d), base(d, 150, 200)});
  out.push_back({"d96_dv64", base(96, 130, 170)});
  out.back().spec.head_dim_v = 64;
  PrecisionCase c{"causal_long_keys", base(128, 256, 2048)};
  c.spec.mask = Mask::causal(Alignment::bottom_right);
  out.push_back(c);
  c = {"long_queries", base(64, 2048, 256)};
  c.spec.mask = Mask::causal(Alignment::top_left);
  out.push_back(c);
  c = {"window", base(64, 130, 170)};
  c.spec.mask = Mask::window(40, 3);
  out.push_back(c);
  for (double logit : {1e2, 1e3, 1e4}) {
    PrecisionCase l{"logits_" + std::to_string(int(std::log10(logit))), base(128, 100, 300), logit,
                    logit >= 1e4 ? 8.0 : 4.0};
    l.spec.scale = logit / std::sqrt(128.0);
    out.push_back(l);
  }
  PrecisionCase l{"logits_4_d64", base(64, 100, 300), 1e4, 8.0};
  l.spec.scale = 1e4 / 8.0;
  out.push_back(l);
  return out;
}

class CudaBackwardPrecision : public ::testing::TestWithParam<PrecisionCase> {};

// dq, dk and dv of a forward and backward at `precision` on the inputs of `seed`, the backward's
// plan, and the float64 reference's gradients.
std::vector<std::vector<double>> run_backward(tools::ProblemSpec spec, Precision precision, std::uint64_t seed,
                                              std::string* plan, reference::BackwardResult* ref) {
  spec.precision = precision;
  tools::Workload w(spec);
  w.fill_inputs(seed);
  EXPECT_TRUE(w.to_device().ok());
  w.poison_outputs();
  Status s = forward(w.forward_args());
  EXPECT_TRUE(s.ok()) << s.to_string();
  const BackwardArgs args = w.backward_args();
  EXPECT_TRUE(describe_plan(args, plan).ok());
  s = backward(args);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(w.copy_outputs_to_host().ok());
  if (ref != nullptr) EXPECT_TRUE(reference::backward(w.host_backward_args(), ref).ok());
  return {w.to_double(tools::Tensor::dq), w.to_double(tools::Tensor::dk), w.to_double(tools::Tensor::dv)};
}

// Each gradient within DESIGN's fp32 gradient tolerance at ordinary scores, and within `bar` the
// FMA rows' error on the same inputs everywhere. The 3xTF32 forward writes the LSE the 3xTF32
// backward takes: its scores are the forward's, bit for bit (kernel_table.py).
TEST_P(CudaBackwardPrecision, Tf32x3TracksTheFmaError) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const PrecisionCase& c = GetParam();
  const std::int64_t head_dim = std::max(c.spec.head_dim, c.spec.head_dim_v);
  if (!has_tf32x3_backward_for(head_dim)) GTEST_SKIP() << "no 3xTF32 backward row for head dim " << head_dim;
  SCOPED_TRACE(c.spec.describe());
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  std::string fma_plan, tf32_plan;
  reference::BackwardResult ref;
  const auto fma = run_backward(c.spec, Precision::ieee, seed, &fma_plan, &ref);
  const auto tf32 = run_backward(c.spec, Precision::tf32x3, seed, &tf32_plan, nullptr);
  EXPECT_NE(fma_plan.find("_ffma_"), std::string::npos) << fma_plan;
  EXPECT_NE(tf32_plan.find("_tf32x3_"), std::string::npos) << tf32_plan;
  const std::vector<double>* refs[3] = {&ref.dq, &ref.dk, &ref.dv};
  const char* names[3] = {"dq", "dk", "dv"};
  std::printf("    %-18s", c.name.c_str());
  for (int g = 0; g < 3; ++g) {
    const tools::ErrorStats fma_err = tools::compare(fma[g], *refs[g]), tf32_err = tools::compare(tf32[g], *refs[g]);
    EXPECT_EQ(tf32_err.bad, 0) << names[g];
    EXPECT_EQ(fma_err.bad, 0) << names[g];
    if (c.logit == 0) EXPECT_LE(tf32_err.rel_l2, 2 * tools::output_tolerance(DType::f32)) << names[g];
    constexpr double kFloor = 6e-8;
    EXPECT_LE(tf32_err.rel_l2, c.bar * fma_err.rel_l2 + kFloor)
        << names[g] << ": 3xTF32 " << tf32_err.rel_l2 << " against FMAs " << fma_err.rel_l2;
    std::printf("  %s FMA %.2e 3xTF32 %.2e (%.2f)", names[g], fma_err.rel_l2, tf32_err.rel_l2,
                fma_err.rel_l2 > 0 ? tf32_err.rel_l2 / fma_err.rel_l2 : 0.0);
  }
  std::printf("\n");
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaBackwardPrecision);
INSTANTIATE_TEST_SUITE_P(Fp32, CudaBackwardPrecision, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<PrecisionCase>& info) { return info.param.name; });

// The 3xTF32 forward register rows of one head-dim bucket (mma.sync, and on sm_90 the warpgroup
// MMA rows) compute the same scores bit for bit: each writes the LSE that the 3xTF32 backward
// recomputes its scores against, which at large scores must be exact (docs/decisions.md, fp32
// precision). The same inputs through each row forced; the scores show in the LSE where nothing
// else differs: with one key tile (the rows' row sums take tiles of different widths, which moves
// the LSE's last bits with more keys) at ordinary scores, and at large scores with many tiles (every
// row dominated by one key: the LSE is its score).
TEST(CudaPrecisionRows, Tf32x3ForwardRowsComputeTheSameScores) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::map<std::int64_t, std::vector<std::string>> rows;  // bucket -> row names
  const std::string tag = "_fp32_d";
  for (const KernelInfo& k : list_kernels()) {
    const std::string& n = k.name;
    if (n.rfind("fwd_", 0) == 0 && n.find("_tf32x3_") != std::string::npos && n.find("_gacc") == std::string::npos &&
        n.find("_vec_plain") != std::string::npos)
      rows[std::stoll(n.substr(n.find(tag) + tag.size()))].push_back(n);
  }
  int compared = 0;
  for (const auto& [bucket, names] : rows) {
    if (names.size() < 2) continue;
    const std::pair<std::int64_t, double> keys_logit[] = {{32, 0.0}, {32, 10.0}, {333, 1e4}};
    for (const auto& [keys, logit] : keys_logit) {
      tools::ProblemSpec spec = base(bucket, 200, keys);
      if (keys > 64) spec.mask = Mask::causal(Alignment::bottom_right);
      spec.precision = Precision::tf32x3;
      // Keys split over CTAs and combined sum the rows in another order (last bits of the LSE).
      spec.forward_overrides.num_splits = 1;
      if (logit > 0) spec.scale = logit / std::sqrt(double(bucket));
      const std::uint64_t seed = next_seed();
      SCOPED_TRACE(spec.describe() + ", inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
      std::vector<double> first;
      for (const std::string& name : names) {
        spec.forward_overrides.kernel = name;
        tools::Workload w(spec);
        w.fill_inputs(seed);
        ASSERT_TRUE(w.to_device().ok());
        w.poison_outputs();
        const Status st = forward(w.forward_args());
        ASSERT_TRUE(st.ok()) << name << ": " << st.to_string();
        ASSERT_TRUE(w.copy_outputs_to_host().ok());
        const std::vector<double> lse = w.to_double(tools::Tensor::lse);
        if (first.empty()) {
          // The rows agree with each other, and the first with the float64 reference (at ordinary
          // scores: at std 1e4 the FMA rows too exceed the fp32 tolerance, CudaPrecision).
          if (logit < 1e3) {
            tools::VerifyReport report;
            ASSERT_TRUE(tools::verify_forward(w, {}, {}, &report).ok());
            for (const tools::CheckLine& line : report.lines)
              EXPECT_TRUE(line.pass()) << name << " " << line.name << ": relative " << line.error.rel_l2 << ", "
                                       << line.error.bad << " bad";
          }
          first = lse;
          continue;
        }
        ASSERT_EQ(lse.size(), first.size());
        std::int64_t differ = 0;
        for (std::size_t i = 0; i < lse.size(); ++i) differ += lse[i] != first[i];
        EXPECT_EQ(differ, 0) << name << " against " << names.front() << ": " << differ << " of " << lse.size()
                             << " LSE values differ";
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "no bucket with two 3xTF32 forward register rows in this build";
}

// `automatic` takes the 3xTF32 rows, but FMAs for a forward that writes the LSE of a problem the
// 3xTF32 backward rows do not take (a bias here); the backward takes them where one fits (not with
// `deterministic`); `ieee` never does; 16-bit calls ignore the setting.
TEST(CudaPrecisionChoice, AutomaticPairsTheForwardWithItsBackward) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!has_tf32x3_backward_for(64)) GTEST_SKIP() << "no 3xTF32 backward row for head dim 64 in this build";
  const auto plan = [](const auto& args) {
    std::string p;
    const Status s = describe_plan(args, &p);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return p;
  };
  tools::Workload w(base(64, 128, 128));
  w.fill_inputs(next_seed());
  ASSERT_TRUE(w.to_device().ok());
  ForwardArgs a = w.forward_args();
  ASSERT_TRUE(a.lse.defined());
  BackwardArgs b = w.backward_args();
  a.precision = b.precision = Precision::automatic;
  EXPECT_NE(plan(a).find("_tf32x3_"), std::string::npos) << plan(a);
  EXPECT_NE(plan(b).find("_tf32x3_"), std::string::npos) << plan(b);
  b.deterministic = true;
  EXPECT_NE(plan(b).find("_ffma_"), std::string::npos) << plan(b);
  a.precision = Precision::ieee;
  EXPECT_NE(plan(a).find("_ffma_"), std::string::npos) << plan(a);
  a.lse = {};
  a.precision = Precision::automatic;
  EXPECT_NE(plan(a).find("_tf32x3_"), std::string::npos) << plan(a);
  a.precision = Precision(7);
  std::string p;
  const Status bad = describe_plan(a, &p);
  EXPECT_EQ(bad.code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.message().find("precision"), std::string::npos) << bad.message();

  tools::ProblemSpec with_bias = base(64, 128, 128);
  with_bias.bias = tools::bias_pattern(tools::BiasKind::dense);
  tools::Workload wb(with_bias);
  wb.fill_inputs(next_seed());
  ASSERT_TRUE(wb.to_device().ok());
  ForwardArgs ab = wb.forward_args();
  BackwardArgs bb = wb.backward_args();
  ab.precision = bb.precision = Precision::automatic;
  EXPECT_NE(plan(ab).find("_ffma_"), std::string::npos) << plan(ab);
  EXPECT_NE(plan(bb).find("_ffma_"), std::string::npos) << plan(bb);
  ab.lse = {};
  EXPECT_NE(plan(ab).find("_tf32x3_"), std::string::npos) << plan(ab);
}

}  // namespace
}  // namespace memattn::testing
