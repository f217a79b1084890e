#include "workload/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/numeric.hpp"

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

// The size a gradient's elements have where the softmax does not cancel them: dP = dO V^T / (1 - p)
// is about rms(dO) rms(V) sqrt(Dv) / (1 - p) per element and dS = P (dP - delta) at most that.
// dQ = scale dS K adds rows of K with weights summing to one; dK = scale dS^T Q and dV = P^T dO
// add rows of Q and dO with weights summing to the queries a key sees (over the heads of its
// group), whose rounding errors add up like a random walk: sqrt of that count. dbias sums dS over
// its broadcast copies, likewise.
struct GradientScales {
  double dq, dk, dv, dbias;
};

std::int64_t rows(const std::vector<std::int32_t>& lengths, std::int64_t fixed) {
  if (lengths.empty()) return fixed;
  std::int64_t n = 0;
  for (std::int32_t l : lengths) n += l;
  return n;
}

GradientScales gradient_scales(const Workload& w, std::size_t dbias_elements) {
  const ProblemSpec& s = w.spec();
  const double scale = s.scale.value_or(1.0 / std::sqrt(double(s.head_dim)));
  const double keep = 1.0 - s.dropout.p;
  const double dout = rms(w.to_double(Tensor::dout));
  const double dp = dout * rms(w.to_double(Tensor::v)) * std::sqrt(double(s.head_dim_v)) / keep;
  const std::int64_t q_rows = rows(s.varlen_q, s.batch * s.seqlen_q);
  const std::int64_t k_rows = rows(s.varlen_k.empty() ? s.varlen_q : s.varlen_k, s.batch * s.seqlen_k);
  const double per_key = std::sqrt(std::max(1.0, double(q_rows * s.heads_q) / double(std::max<std::int64_t>(1, k_rows * s.heads_k))));
  const double copies = dbias_elements > 0
                            ? double(s.num_seqs() * s.heads_q * s.max_q() * s.max_k()) / double(dbias_elements)
                            : 1.0;
  return {scale * dp * rms(w.to_double(Tensor::k)), scale * dp * rms(w.to_double(Tensor::q)) * per_key,
          dout / keep * per_key, dp * std::sqrt(std::max(1.0, copies))};
}

// A gradient line: the relative error against the reference, and, for gradients whose exact
// value is (nearly) zero (dQ and dK when every query sees one key: P = 1, so dS = 0), the
// absolute error against the rounding noise those magnitudes carry. Two sources: delta =
// rowsum(dO * O) reads O rounded to the inputs' dtype (about one unit roundoff u of the dtype
// times dP), and the float32 arithmetic with its fast exponential (measured up to ~8 float32
// units at D = 96, one key). A relative error of that noise over a zero norm says nothing; the
// limit below is about four times the noise measured, and a wrong kernel is off by far more.
double noise_units(DType dtype) {
  const double f32 = std::ldexp(1.0, -24);
  switch (dtype) {
    case DType::bf16: return 2 * std::ldexp(1.0, -8) + 32 * f32;
    case DType::f16: return 2 * std::ldexp(1.0, -11) + 32 * f32;
    default: return 34 * f32;
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
  line.noise_l2 = noise_units(dtype) * typical * std::sqrt(double(n));
  return line;
}

// One cache tensor after the append against the one before with the new rows written at their
// slots: every element compared as bytes (NaN included); max_abs and rel_l2 over the finite pairs
// say how far off the differing ones are.
CheckLine append_line(const char* name, const Workload& w, Tensor cache, Tensor fresh, const std::vector<unsigned char>& before) {
  const Buffer& after = w.host(cache);
  const TensorRef& c = after.view;
  const std::size_t item = dtype_size(c.dtype);
  std::vector<unsigned char> expected = before;
  const CacheSpec& spec = w.spec().cache;
  if (w.has(fresh) && expected.size() == after.bytes.size()) {
    const Buffer& rows = w.host(fresh);
    const TensorRef& n = rows.view;
    for (std::int64_t b = 0; b < n.sizes[0]; ++b)
      for (std::int64_t m = 0; m < n.sizes[1]; ++m) {
        const auto [page, row] = w.cache_slot(b, spec.cache_len + m);
        for (std::int64_t h = 0; h < n.sizes[2]; ++h)
          for (std::int64_t e = 0; e < n.sizes[3]; ++e) {
            const std::int64_t to = page * c.strides[0] + row * c.strides[1] + h * c.strides[2] + e;
            const std::int64_t from = b * n.strides[0] + m * n.strides[1] + h * n.strides[2] + e;
            std::memcpy(expected.data() + std::size_t(to) * item, rows.bytes.data() + std::size_t(from) * item, item);
          }
      }
  }
  CheckLine line{name, {}, 0.0};
  line.exact = true;
  ErrorStats& st = line.error;
  const std::size_t n = std::min(expected.size(), after.bytes.size()) / item;
  double diff2 = 0, ref2 = 0;
  for (std::size_t e = 0; e < n; ++e) {
    ++st.compared;
    const double want = detail::load_double(expected.data(), c.dtype, std::int64_t(e));
    if (std::isfinite(want)) ref2 += want * want;
    if (std::memcmp(expected.data() + e * item, after.bytes.data() + e * item, item) == 0) continue;
    ++st.bad;
    const double got = detail::load_double(after.bytes.data(), c.dtype, std::int64_t(e));
    if (std::isfinite(want) && std::isfinite(got)) {
      st.max_abs = std::max(st.max_abs, std::abs(got - want));
      diff2 += (got - want) * (got - want);
    }
  }
  st.bad += std::int64_t((std::max(expected.size(), after.bytes.size()) - std::min(expected.size(), after.bytes.size())) / item);
  st.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
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

Status forward_reference(const Workload& w, const reference::Selection& selection, const reference::Progress& progress,
                         reference::ForwardResult* result) {
  return reference::forward(w.host_forward_args(), result, progress, selection);
}

void check_forward(const Workload& w, const reference::Selection& selection, const reference::ForwardResult& ref,
                   VerifyReport* report) {
  const double tol = output_tolerance(w.spec().dtype);
  report->scope = describe_selection(selection);
  report->lines.push_back({"out", compare(w.to_double(Tensor::out), ref.out), tol});
  if (w.has(Tensor::lse)) report->lines.push_back({"lse", compare(w.to_double(Tensor::lse), ref.lse), kLseTolerance});
}

Status verify_forward(const Workload& w, const reference::Selection& selection,
                      const reference::Progress& progress, VerifyReport* report) {
  reference::ForwardResult ref;
  if (Status s = forward_reference(w, selection, progress, &ref); !s.ok()) return s;
  check_forward(w, selection, ref, report);
  return Status::Ok();
}

CacheSnapshot snapshot_cache(const Workload& w) { return {w.host(Tensor::k).bytes, w.host(Tensor::v).bytes}; }

void check_cache_append(const Workload& w, const CacheSnapshot& before, VerifyReport* report) {
  report->lines.push_back(append_line("k_cache", w, Tensor::k, Tensor::k_new, before.k));
  report->lines.push_back(append_line("v_cache", w, Tensor::v, Tensor::v_new, before.v));
}

Status verify_backward(const Workload& w, const reference::Selection& selection,
                       const reference::Progress& progress, VerifyReport* report) {
  BackwardArgs args = w.host_backward_args();
  reference::BackwardResult ref;
  if (Status s = reference::backward(args, &ref, progress, selection); !s.ok()) return s;
  const double tol = 2 * output_tolerance(w.spec().dtype);
  report->scope = describe_selection(selection);
  const GradientScales typical = gradient_scales(w, ref.dbias.size());
  report->lines.push_back(gradient_line("dq", w.to_double(Tensor::dq), ref.dq, typical.dq, w.spec().dtype, tol));
  report->lines.push_back(gradient_line("dk", w.to_double(Tensor::dk), ref.dk, typical.dk, w.spec().dtype, tol));
  report->lines.push_back(gradient_line("dv", w.to_double(Tensor::dv), ref.dv, typical.dv, w.spec().dtype, tol));
  if (w.has(Tensor::dbias))
    report->lines.push_back(
        gradient_line("dbias", w.to_double_reduced(Tensor::dbias), ref.dbias, typical.dbias, w.spec().dtype, tol));
  return Status::Ok();
}

}  // namespace memattn::tools
