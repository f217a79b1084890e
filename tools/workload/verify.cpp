#include "workload/verify.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace memattn::tools {
namespace {

// LSE is float32 whatever the inputs' dtype.
constexpr double kLseTolerance = 1e-5;

std::string describe_selection(const reference::Selection& sel) {
  if (sel.sequences.empty() && sel.kv_heads.empty()) return "all";
  const auto list = [](const std::vector<std::int64_t>& v) {
    std::string s;
    for (std::size_t e = 0; e < v.size(); ++e) s += (e ? "," : "") + std::to_string(v[e]);
    return s.empty() ? std::string("all") : s;
  };
  return "sampled: sequences " + list(sel.sequences) + ", kv heads " + list(sel.kv_heads);
}

// Root mean square of a tensor's finite elements.
double rms(const std::vector<double>& x) {
  double sum = 0;
  std::int64_t n = 0;
  for (double v : x)
    if (std::isfinite(v)) sum += v * v, ++n;
  return n > 0 ? std::sqrt(sum / double(n)) : 0.0;
}

// The size a gradient's elements have where the softmax does not cancel them: dP = dO V^T is
// about rms(dO) rms(V) sqrt(Dv) per element, dS = P (dP - delta) at most that, and dQ = scale dS K
// (dK = scale dS^T Q) adds rows of K (Q) with weights summing to about one; dV sums rows of dO.
struct GradientScales {
  double dq, dk, dv, dbias;
};

GradientScales gradient_scales(const Workload& w) {
  const ProblemSpec& s = w.spec();
  const double scale = s.scale.value_or(1.0 / std::sqrt(double(s.head_dim)));
  const double dout = rms(w.to_double(Tensor::dout));
  const double dp = dout * rms(w.to_double(Tensor::v)) * std::sqrt(double(s.head_dim_v));
  return {scale * dp * rms(w.to_double(Tensor::k)), scale * dp * rms(w.to_double(Tensor::q)), dout, dp};
}

// A gradient line: the relative error against the reference, and, for gradients whose exact
// value is (nearly) zero (dQ and dK when every query sees one key: P = 1, so dS = 0), the
// absolute error against the rounding noise those magnitudes carry: delta = rowsum(dO * O) reads
// O rounded to the inputs' dtype, so dS = P (dP - delta) keeps about one unit roundoff u of the
// dtype times dP. A relative error of that noise over a zero norm says nothing; a wrong kernel is
// off by far more than kNoiseUnits units of the magnitudes it computed with.
constexpr double kNoiseUnits = 8;

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

CheckLine gradient_line(const char* name, const std::vector<double>& x, const std::vector<double>& ref,
                        double typical, DType dtype, double tolerance) {
  CheckLine line{name, compare(x, ref), tolerance};
  double diff2 = 0;
  std::int64_t n = 0;
  for (std::size_t e = 0; e < ref.size() && e < x.size(); ++e) {
    if (!std::isfinite(ref[e]) || !std::isfinite(x[e])) continue;  // compare() counts these
    diff2 += (x[e] - ref[e]) * (x[e] - ref[e]);
    ++n;
  }
  line.abs_l2 = std::sqrt(diff2);
  line.noise_l2 = kNoiseUnits * unit_roundoff(dtype) * typical * std::sqrt(double(n));
  return line;
}

}  // namespace

bool VerifyReport::pass() const {
  return std::all_of(lines.begin(), lines.end(), [](const CheckLine& l) { return l.pass(); });
}

reference::Selection sample_selection(const Workload& w, double budget) {
  double flops = 0;
  if (!forward_flops(w.forward_args(), &flops).ok() || flops <= budget) return {};
  const ProblemSpec& s = w.spec();
  reference::Selection sel;
  sel.sequences = {0};
  if (s.num_seqs() > 1) sel.sequences.push_back(s.num_seqs() - 1);
  sel.kv_heads = {0};
  if (s.heads_k > 1) sel.kv_heads.push_back(s.heads_k - 1);
  return sel;
}

Status verify_forward(const Workload& w, const reference::Selection& selection,
                      const reference::Progress& progress, VerifyReport* report) {
  ForwardArgs args = w.host_forward_args();
  reference::ForwardResult ref;
  if (Status s = reference::forward(args, &ref, progress, selection); !s.ok()) return s;
  const double tol = output_tolerance(w.spec().dtype);
  report->scope = describe_selection(selection);
  report->lines.push_back({"out", compare(w.to_double(Tensor::out), ref.out), tol});
  if (w.has(Tensor::lse)) report->lines.push_back({"lse", compare(w.to_double(Tensor::lse), ref.lse), kLseTolerance});
  return Status::Ok();
}

Status verify_backward(const Workload& w, const reference::Selection& selection,
                       const reference::Progress& progress, VerifyReport* report) {
  BackwardArgs args = w.host_backward_args();
  reference::BackwardResult ref;
  if (Status s = reference::backward(args, &ref, progress, selection); !s.ok()) return s;
  const double tol = 2 * output_tolerance(w.spec().dtype);
  report->scope = describe_selection(selection);
  const GradientScales typical = gradient_scales(w);
  report->lines.push_back(gradient_line("dq", w.to_double(Tensor::dq), ref.dq, typical.dq, w.spec().dtype, tol));
  report->lines.push_back(gradient_line("dk", w.to_double(Tensor::dk), ref.dk, typical.dk, w.spec().dtype, tol));
  report->lines.push_back(gradient_line("dv", w.to_double(Tensor::dv), ref.dv, typical.dv, w.spec().dtype, tol));
  if (w.has(Tensor::dbias))
    report->lines.push_back(
        gradient_line("dbias", w.to_double_reduced(Tensor::dbias), ref.dbias, typical.dbias, w.spec().dtype, tol));
  return Status::Ok();
}

}  // namespace memattn::tools
