#include "workload/verify.hpp"

#include <algorithm>
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
  report->lines.push_back({"dq", compare(w.to_double(Tensor::dq), ref.dq), tol});
  report->lines.push_back({"dk", compare(w.to_double(Tensor::dk), ref.dk), tol});
  report->lines.push_back({"dv", compare(w.to_double(Tensor::dv), ref.dv), tol});
  if (w.has(Tensor::dbias)) report->lines.push_back({"dbias", compare(w.to_double_reduced(Tensor::dbias), ref.dbias), tol});
  return Status::Ok();
}

}  // namespace memattn::tools
