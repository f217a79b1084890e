#include "support/check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "memattn/reference.hpp"
#include "support/naive.hpp"

namespace memattn::testing {
namespace {

// Errors this small are rounding noise, below anything the 2x rule could tell apart: half an
// ulp of the dtype at 1 (the naive path can be exact, e.g. with a single key).
double error_floor(DType dtype) {
  switch (dtype) {
    case DType::f32: return 6e-8;
    case DType::f16: return 4.9e-4;
    case DType::bf16: return 3.9e-3;
  }
  return 0;
}

// compare() skips the elements the reference leaves NaN, so a reference that wrote nothing, or an
// element a backend left unwritten where the reference did too, would pass unseen. With every
// sequence selected the reference leaves NaN only in packed rows outside every sequence
// (`varlen_outside`), where the library defines the result: `fill` (0, or -inf for the LSE). So
// those elements must hold `fill`, they must exist when the spec has such rows, and nowhere else
// may the reference hold NaN.
void expect_outside(const char* name, const std::vector<double>& got, const std::vector<double>& ref, double fill,
                    bool rows_outside) {
  EXPECT_EQ(got.size(), ref.size()) << name << ": element count";
  std::int64_t outside = 0, wrong = 0;
  for (std::size_t e = 0; e < ref.size() && e < got.size(); ++e) {
    if (!std::isnan(ref[e])) continue;
    ++outside;
    wrong += !(got[e] == fill);
  }
  if (rows_outside) EXPECT_GT(outside, 0) << name << ": no element outside every sequence to check";
  else EXPECT_EQ(outside, 0) << name << ": the reference left " << outside << " elements NaN (unwritten)";
  EXPECT_EQ(wrong, 0) << name << ": " << wrong << " elements outside every sequence are not " << fill;
}

void expect_close(const char* name, const std::vector<double>& got, const std::vector<double>& naive,
                  const std::vector<double>& ref, double tolerance, DType dtype, bool rows_outside,
                  double naive_factor = 2) {
  expect_outside(name, got, ref, 0.0, rows_outside);
  const tools::ErrorStats err = tools::compare(got, ref);
  const tools::ErrorStats naive_err = tools::compare(naive, ref);
  EXPECT_EQ(err.bad, 0) << name << ": " << err.bad << " elements unwritten (NaN) or wrong infinities";
  EXPECT_LE(err.rel_l2, tolerance) << name << ": relative error " << err.rel_l2 << " over the limit " << tolerance;
  EXPECT_LE(err.rel_l2, naive_factor * naive_err.rel_l2 + error_floor(dtype))
      << name << ": error " << err.rel_l2 << " is more than " << naive_factor << "x the naive " << to_string(dtype)
      << " implementation's " << naive_err.rel_l2;
  if (const char* v = std::getenv("MEMATTN_TEST_VERBOSE"); v && *v == '1')
    std::printf("    %-5s rel %.3e  naive %.3e  ratio %.2f\n", name, err.rel_l2, naive_err.rel_l2,
                naive_err.rel_l2 > 0 ? err.rel_l2 / naive_err.rel_l2 : 0.0);
}

// An error d in a row's LSE scales its probabilities by e^d, a relative error d of the softmax's
// normaliser whatever the LSE's size. So each element's error counts against max(|lse|, 1), not
// |lse| alone: that would blow up on a row whose scores nearly cancel (one key, q.k near 0).
double lse_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double diff2 = 0, ref2 = 0;
  for (std::size_t e = 0; e < ref.size() && e < got.size(); ++e) {
    if (!std::isfinite(ref[e]) || !std::isfinite(got[e])) continue;  // compare() counts these
    diff2 += (got[e] - ref[e]) * (got[e] - ref[e]);
    ref2 += std::max(ref[e] * ref[e], 1.0);
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : 0.0;
}

// CheckOptions::nan_outside_sequences: NaN into the packed rows of `t` outside [start, start +
// used) of every sequence (`lens` its rows, `used` the used ones: all where empty).
void nan_outside(tools::Workload& w, tools::Tensor t, const std::vector<std::int32_t>& lens,
                 const std::vector<std::int32_t>& used) {
  if (!w.has(t)) return;
  tools::Buffer& b = w.host(t);
  std::vector<bool> inside(std::size_t(b.view.sizes[1]), false);
  std::int64_t start = w.spec().varlen_outside;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    for (std::int64_t r = start; r < start + (used.empty() ? lens[i] : used[i]); ++r) inside[std::size_t(r)] = true;
    start += lens[i];
  }
  for (std::int64_t r = 0; r < b.view.sizes[1]; ++r) {
    if (inside[std::size_t(r)]) continue;
    for (std::int64_t h = 0; h < b.view.sizes[2]; ++h)
      for (std::int64_t e = 0; e < b.view.sizes[3]; ++e)
        detail::store_float(b.bytes.data(), b.view.dtype, r * b.view.strides[1] + h * b.view.strides[2] + e,
                            std::numeric_limits<float>::quiet_NaN());
  }
}

}  // namespace

// With MEMATTN_TEST_VERBOSE=1, prints how long each phase of a check takes.
struct PhaseTimer {
  bool on = std::getenv("MEMATTN_TEST_VERBOSE") && *std::getenv("MEMATTN_TEST_VERBOSE") == '1';
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  void operator()(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    if (on) std::printf("    %-12s %8.3f s\n", phase, std::chrono::duration<double>(now - last).count());
    std::fflush(stdout);
    last = now;
  }
};

void check_case(const tools::ProblemSpec& spec, const CheckOptions& options) {
  SCOPED_TRACE(spec.describe());
  PhaseTimer phase;
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  tools::Workload w(spec);
  w.fill_inputs(seed);
  if (options.nan_outside_sequences && spec.varlen()) {
    nan_outside(w, tools::Tensor::q, spec.varlen_q, {});
    nan_outside(w, tools::Tensor::dout, spec.varlen_q, {});
    nan_outside(w, tools::Tensor::k, spec.varlen_k, spec.seqused_k);
    nan_outside(w, tools::Tensor::v, spec.varlen_k, spec.seqused_k);
  }
  phase("inputs");
  if (spec.backend == Backend::cuda) ASSERT_TRUE(w.to_device().ok());
  w.poison_outputs();
  phase("to device");
  const Status fs = forward(w.forward_args());
  ASSERT_TRUE(fs.ok()) << fs.to_string();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  phase("forward");

  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(w.host_forward_args(), &ref).ok());
  phase("reference");
  const NaiveForward naive = naive_forward(w);
  phase("naive");
  const double tol = tools::output_tolerance(spec.dtype);
  const bool outside = spec.varlen() && spec.varlen_outside > 0;
  expect_close("out", w.to_double(tools::Tensor::out), naive.out, ref.out, tol, spec.dtype, outside,
               options.naive_factor);
  if (w.has(tools::Tensor::lse)) {
    const std::vector<double> got = w.to_double(tools::Tensor::lse);
    expect_outside("lse", got, ref.lse, -INFINITY, outside);
    const tools::ErrorStats lse = tools::compare(got, ref.lse);
    EXPECT_EQ(lse.bad, 0) << "lse: unwritten or wrong infinities";
    EXPECT_LE(lse_error(got, ref.lse), 1e-5) << "lse";
  }
  if (!options.backward) return;

  const Status bs = backward(w.backward_args());
  if (options.skip_unsupported_backward && bs.code() == StatusCode::unsupported) GTEST_SKIP() << bs.message();
  ASSERT_TRUE(bs.ok()) << bs.to_string();
  ASSERT_TRUE(w.copy_outputs_to_host().ok());
  reference::BackwardResult bref;
  ASSERT_TRUE(reference::backward(w.host_backward_args(), &bref).ok());
  const NaiveBackward nb = naive_backward(w);
  expect_close("dq", w.to_double(tools::Tensor::dq), nb.dq, bref.dq, 2 * tol, spec.dtype, outside);
  expect_close("dk", w.to_double(tools::Tensor::dk), nb.dk, bref.dk, 2 * tol, spec.dtype, outside);
  expect_close("dv", w.to_double(tools::Tensor::dv), nb.dv, bref.dv, 2 * tol, spec.dtype, outside);
  if (w.has(tools::Tensor::dbias))  // the bias has no packed rows: nothing of it is outside
    expect_close("dbias", w.to_double_reduced(tools::Tensor::dbias), nb.dbias, bref.dbias, 2 * tol, spec.dtype, false);
}

namespace {

// Every element of `got` is finite and compared with `ref` (compare() skips the reference's NaN,
// its unwritten elements), within `tol`.
void expect_finite_and_close(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                             const std::string& name) {
  ASSERT_FALSE(got.empty()) << name << ": no elements";
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](double x) { return std::isfinite(x); }))
      << name << ": not every element is finite";
  const tools::ErrorStats err = tools::compare(got, ref);
  EXPECT_EQ(err.compared, std::int64_t(got.size())) << name << ": elements compared";
  EXPECT_TRUE(err.ok(tol)) << name << ": relative error " << err.rel_l2 << ", " << err.bad << " bad elements";
}

}  // namespace

void check_backward_bit_identical(const tools::ProblemSpec& spec, int runs, bool skip_unsupported) {
  SCOPED_TRACE(spec.describe());
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  tools::Workload w(spec);
  w.fill_inputs(seed);
  if (spec.backend == Backend::cuda) ASSERT_TRUE(w.to_device().ok());
  const std::vector<tools::Tensor> grads = {tools::Tensor::dq, tools::Tensor::dk, tools::Tensor::dv,
                                            tools::Tensor::dbias};
  std::vector<std::vector<unsigned char>> first;
  for (int run = 0; run < runs; ++run) {
    // Every output poisoned, then the forward writes out and LSE again (the backward's inputs)
    // and the backward must write every gradient element: equal bytes from two runs that left
    // NaN behind would prove nothing.
    w.poison_outputs();
    const Status fs = forward(w.forward_args());
    if (skip_unsupported && fs.code() == StatusCode::unsupported) GTEST_SKIP() << fs.message();
    ASSERT_TRUE(fs.ok()) << fs.to_string();
    const Status bs = backward(w.backward_args());
    if (skip_unsupported && bs.code() == StatusCode::unsupported) GTEST_SKIP() << bs.message();
    ASSERT_TRUE(bs.ok()) << bs.to_string();
    ASSERT_TRUE(w.copy_outputs_to_host().ok());
    std::vector<std::vector<unsigned char>> bytes;
    for (tools::Tensor t : grads) bytes.push_back(w.host(t).bytes);
    if (run > 0) {
      ASSERT_EQ(bytes, first) << "run " << run << " differs";
      continue;
    }
    first = bytes;
    // The first run's gradients are finite and right (the later runs equal them byte for byte).
    reference::BackwardResult ref;
    ASSERT_TRUE(reference::backward(w.host_backward_args(), &ref).ok());
    const double tol = 2 * tools::output_tolerance(spec.dtype);
    std::vector<std::pair<tools::Tensor, const std::vector<double>*>> checks = {
        {tools::Tensor::dq, &ref.dq}, {tools::Tensor::dk, &ref.dk}, {tools::Tensor::dv, &ref.dv}};
    if (w.has(tools::Tensor::dbias)) checks.push_back({tools::Tensor::dbias, &ref.dbias});
    for (const auto& [t, r] : checks)  // dbias as the reference sums it
      expect_finite_and_close(t == tools::Tensor::dbias ? w.to_double_reduced(t) : w.to_double(t), *r, tol,
                              tools::to_string(t));
  }
}

void check_unused_keys_unseen(const tools::ProblemSpec& spec) {
  SCOPED_TRACE(spec.describe());
  ASSERT_EQ(spec.seqused_k.size(), spec.varlen_k.size()) << "a varlen spec with seqused_k";
  ASSERT_EQ(spec.varlen_outside, 0);
  const std::uint64_t seed = next_seed();
  SCOPED_TRACE("inputs from seed " + std::to_string(seed) + ": replay with " + replay_hint());
  tools::Workload w(spec);
  w.fill_inputs(seed);
  if (spec.backend == Backend::cuda) ASSERT_TRUE(w.to_device().ok());
  const auto run = [&](std::vector<unsigned char>* out) {
    w.poison_outputs();
    const Status st = forward(w.forward_args());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(w.copy_outputs_to_host().ok());
    reference::ForwardResult ref;
    ASSERT_TRUE(reference::forward(w.host_forward_args(), &ref).ok());
    expect_finite_and_close(w.to_double(tools::Tensor::out), ref.out, tools::output_tolerance(spec.dtype), "out");
    *out = w.host(tools::Tensor::out).bytes;
  };
  std::vector<unsigned char> finite, with_nan;
  run(&finite);
  if (::testing::Test::HasFatalFailure()) return;
  for (const tools::Tensor t : {tools::Tensor::k, tools::Tensor::v}) {
    std::vector<double> values = w.to_double(t);  // [1, packed keys, Hk, D or Dv]
    const std::int64_t row = spec.heads_k * (t == tools::Tensor::k ? spec.head_dim : spec.head_dim_v);
    std::int64_t start = 0;
    for (std::size_t b = 0; b < spec.varlen_k.size(); ++b) {
      for (std::int64_t e = (start + spec.seqused_k[b]) * row; e < (start + spec.varlen_k[b]) * row; ++e)
        values[std::size_t(e)] = std::numeric_limits<double>::quiet_NaN();
      start += spec.varlen_k[b];
    }
    w.set_values(t, values);
  }
  if (spec.backend == Backend::cuda) ASSERT_TRUE(w.copy_inputs_to_device().ok());
  run(&with_nan);
  EXPECT_TRUE(finite == with_nan) << "NaN in the unused keys changed the output";
}

}  // namespace memattn::testing
