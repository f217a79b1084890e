// The public entry points: validate once, then hand the call to the resolved backend.
#include <cmath>
#include <cstdio>
#include <new>
#include <optional>
#include <string>
#include <limits>
#include <vector>

#include "core/guarded.hpp"
#include "core/memory.hpp"
#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "cpu/backend.hpp"
#include "cuda/backend.hpp"
#include "memattn/attention.hpp"
#include "memattn/reference.hpp"

#ifndef MEMATTN_VERSION
#define MEMATTN_VERSION "0.0.0"
#endif

namespace memattn {
namespace {


// Writes a float64 result array into a strided output of rank 3 or 4 (contiguous source order);
// NaN entries of the source mark elements the operation does not write.
void write_result(const std::vector<double>& src, const TensorRef& dst) {
  std::int64_t idx[4] = {0, 0, 0, 0};
  const std::int64_t n = dst.numel();
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rem = e, off = 0;
    for (int d = dst.rank - 1; d >= 0; --d) {
      idx[d] = rem % dst.sizes[d];
      rem /= dst.sizes[d];
      off += idx[d] * dst.strides[d];
    }
    if (!std::isnan(src[std::size_t(e)])) detail::store_double(dst.data, dst.dtype, off, src[std::size_t(e)]);
  }
}

// dbias from the reference comes reduced (broadcast dimensions of size 1).
void write_dbias(const std::vector<double>& src, const TensorRef& dst, const bool* broadcast) {
  TensorRef reduced = dst;
  for (int d = 0; d < 4; ++d)
    if (broadcast[d]) reduced.sizes[d] = 1;
  write_result(src, reduced);
}

Status run_reference(const ForwardArgs& args) {
  reference::ForwardResult r;
  if (Status s = reference::forward(args, &r); !s.ok()) return s;
  write_result(r.out, args.out);
  if (args.lse.defined()) write_result(r.lse, args.lse);
  return Status::Ok();
}

Status run_reference(const BackwardArgs& args, const detail::Problem& p) {
  reference::BackwardResult r;
  if (Status s = reference::backward(args, &r); !s.ok()) return s;
  write_result(r.dq, args.dq);
  write_result(r.dk, args.dk);
  write_result(r.dv, args.dv);
  if (args.dbias.defined()) write_dbias(r.dbias, args.dbias, p.bias_broadcast);
  return Status::Ok();
}

bool has_elements(const TensorRef& t) {
  if (!t.defined()) return false;
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return false;
  return true;
}

// Writes `value` into every element of a validated tensor where the call's tensors live: on the
// host here, on the GPU by a fill kernel on the call's stream. A tensor without elements is not
// touched (its pointer may be null).
Status fill(const TensorRef& t, double value, const detail::Problem& p, void* stream) {
  if (!has_elements(t)) return Status::Ok();
  if (p.backend == Backend::cuda) return cuda::fill(t, value, stream);
  std::int64_t idx[4] = {0, 0, 0, 0};
  for (;;) {
    std::int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides[d];
    detail::store_double(t.data, t.dtype, off, value);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.sizes[d]) idx[d--] = 0;
    if (d < 0) return Status::Ok();
  }
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Empty problems (Problem::empty: B, Mq, Mk or Hq is 0, or no sequence) return here, before any
// backend runs: every gradient is 0 and every query row sees no key (out 0, LSE -inf).
Status finish_empty(const ForwardArgs& a, const detail::Problem& p) {
  if (Status s = fill(a.out, 0.0, p, a.stream); !s.ok()) return s;
  return fill(a.lse, kNegInf, p, a.stream);
}

Status finish_empty(const BackwardArgs& a, const detail::Problem& p) {
  for (const TensorRef* g : {&a.dq, &a.dk, &a.dv, &a.dbias})
    if (Status s = fill(*g, 0.0, p, a.stream); !s.ok()) return s;
  return Status::Ok();
}

// Rows [begin, end) of dimension `dim` of a tensor.
TensorRef rows(const TensorRef& t, int dim, std::int64_t begin, std::int64_t end) {
  TensorRef r = t;
  if (t.data != nullptr)
    r.data = static_cast<char*>(t.data) + begin * t.strides[dim] * std::int64_t(dtype_size(t.dtype));
  r.sizes[dim] = end - begin;
  return r;
}

// With variable lengths, the packed rows before the first sequence and from the end of the last
// one on belong to no sequence: no backend visits them. (Keys past seqused_k inside a sequence
// are the backends' own: they zero those gradients.) `starts` is a validated seqstart.
template <class F>
Status for_uncovered(const std::vector<std::int32_t>& starts, std::int64_t total, F&& f) {
  if (Status s = f(std::int64_t(0), std::int64_t(starts.front())); !s.ok()) return s;
  return f(std::int64_t(starts.back()), total);
}

// The same where the lengths stay on the device: the fill kernel reads the bounds there.
Status fill_outside(const TensorRef& t, int dim, const IndexRef& starts, double value, void* stream) {
  return cuda::fill_outside(t, dim, starts.data, starts.size - 1, value, stream);
}

Status finish_uncovered(const ForwardArgs& a, const detail::Problem& p) {
  if (!p.varlen) return Status::Ok();
  if (!p.lengths_known) {
    if (Status s = fill_outside(a.out, 1, a.varlen.seqstart_q, 0.0, a.stream); !s.ok()) return s;
    return a.lse.defined() ? fill_outside(a.lse, 2, a.varlen.seqstart_q, kNegInf, a.stream) : Status::Ok();
  }
  return for_uncovered(p.seqstart_q, a.q.sizes[1], [&](std::int64_t begin, std::int64_t end) {
    if (begin >= end) return Status::Ok();
    if (Status s = fill(rows(a.out, 1, begin, end), 0.0, p, a.stream); !s.ok()) return s;
    return a.lse.defined() ? fill(rows(a.lse, 2, begin, end), kNegInf, p, a.stream) : Status::Ok();
  });
}

Status finish_uncovered(const BackwardArgs& a, const detail::Problem& p) {
  if (!p.varlen) return Status::Ok();
  if (!p.lengths_known) {
    if (Status s = fill_outside(a.dq, 1, a.varlen.seqstart_q, 0.0, a.stream); !s.ok()) return s;
    if (Status s = fill_outside(a.dk, 1, a.varlen.seqstart_k, 0.0, a.stream); !s.ok()) return s;
    return fill_outside(a.dv, 1, a.varlen.seqstart_k, 0.0, a.stream);
  }
  const auto zero = [&](const TensorRef& t) {
    return [&](std::int64_t begin, std::int64_t end) {
      return begin < end ? fill(rows(t, 1, begin, end), 0.0, p, a.stream) : Status::Ok();
    };
  };
  if (Status s = for_uncovered(p.seqstart_q, a.q.sizes[1], zero(a.dq)); !s.ok()) return s;
  if (Status s = for_uncovered(p.seqstart_k, a.k.sizes[1], zero(a.dk)); !s.ok()) return s;
  return for_uncovered(p.seqstart_k, a.k.sizes[1], zero(a.dv));
}

std::string bytes_text(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f bytes (%.3g GiB)", bytes, bytes / double(1ull << 30));
  return text;
}

// The CPU backends' large allocations, checked against the memory left before they are made.
Status check_host_scratch(const detail::Problem& p, bool backward) {
  if (p.backend == Backend::cuda) return Status::Ok();
  const double needed = detail::host_scratch_bytes(p, backward);
  const std::optional<double> available = detail::host_memory_available();
  if (!available || needed <= *available) return Status::Ok();
  return {StatusCode::out_of_memory, std::string("host memory: the ") + to_string(p.backend) + " backend's " +
                                         (backward ? "backward" : "forward") + " needs about " + bytes_text(needed) +
                                         " of scratch for this problem; " + bytes_text(*available) + " are available"};
}

template <class Args>
Status workspace_size(const Args& args, const detail::Problem& p, std::size_t* bytes) {
  *bytes = 0;
  if (p.empty) return Status::Ok();
  if (p.backend == Backend::cuda) return cuda::workspace_size(args, p, bytes);
  return Status::Ok();  // the CPU paths allocate their own scratch
}

}  // namespace

namespace {

Status validate_impl(const ForwardArgs& args) {
  detail::Problem p;
  return detail::build_problem(args, &p);
}

Status validate_impl(const BackwardArgs& args) {
  detail::Problem p;
  return detail::build_problem(args, &p);
}

Status forward_workspace_size_impl(const ForwardArgs& args, std::size_t* bytes) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  return workspace_size(args, p, bytes);
}

Status backward_workspace_size_impl(const BackwardArgs& args, std::size_t* bytes) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  return workspace_size(args, p, bytes);
}

Status forward_impl(const ForwardArgs& args) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  // The alignment here; the size where the plan is made (cuda::forward), not twice per call.
  if (Status s = detail::check_workspace(args, 0); !s.ok()) return s;
  // A cache's new keys go in whether or not any query attends to them: here on the host, or by
  // the CUDA backend once its plan is made (nothing can refuse the call after that). The
  // reference reads them from kv_cache.k_new, the rest of the cache being untouched by the append.
  if (p.empty) {
    if (p.cache.enabled && p.backend == Backend::cuda)
      if (Status s = cuda::append_kv_cache(args, p); !s.ok()) return s;
    if (p.cache.enabled && p.backend != Backend::cuda) cpu::append_kv_cache(args, p);
    return finish_empty(args, p);
  }
  if (Status s = check_host_scratch(p, false); !s.ok()) return s;
  if (p.cache.enabled && p.backend != Backend::cuda) cpu::append_kv_cache(args, p);
  Status s;
  switch (p.backend) {
    case Backend::reference: s = run_reference(args); break;
    case Backend::cuda: s = cuda::forward(args, p); break;
    default: s = cpu::forward(args, p);
  }
  if (!s.ok()) return s;
  return finish_uncovered(args, p);
}

Status backward_impl(const BackwardArgs& args) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, 0); !s.ok()) return s;
  if (p.empty) return finish_empty(args, p);
  if (Status s = check_host_scratch(p, true); !s.ok()) return s;
  Status s;
  switch (p.backend) {
    case Backend::reference: s = run_reference(args, p); break;
    case Backend::cuda: s = cuda::backward(args, p); break;
    default: s = cpu::backward(args, p);
  }
  if (!s.ok()) return s;
  return finish_uncovered(args, p);
}

Status describe_plan_impl(const ForwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (p.empty) {
    *plan = "empty problem (B, Mq, Mk or Hq is 0, or no sequence): returns at once with filled outputs";
    return Status::Ok();
  }
  switch (p.backend) {
    case Backend::reference: *plan = "reference (float64, naive)"; return Status::Ok();
    case Backend::cuda: return cuda::describe_forward(args, p, plan);
    default: *plan = cpu::describe_forward(p); return Status::Ok();
  }
}

Status describe_plan_impl(const BackwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (p.empty) {
    *plan = "empty problem (B, Mq, Mk or Hq is 0, or no sequence): returns at once with filled outputs";
    return Status::Ok();
  }
  switch (p.backend) {
    case Backend::reference: *plan = "reference (float64, naive)"; return Status::Ok();
    case Backend::cuda: return cuda::describe_backward(args, p, plan);
    default: *plan = cpu::describe_backward(p); return Status::Ok();
  }
}

Status forward_flops_impl(const ForwardArgs& args, double* flops) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p, detail::Lengths::read); !s.ok()) return s;
  *flops = 2.0 * p.visible_pairs() * double(p.head_dim + p.head_dim_v);
  return Status::Ok();
}

}  // namespace

// Every entry point runs guarded: no exception crosses the API.
constexpr const char* kCall = "the memory of the call";
Status validate(const ForwardArgs& args) { return detail::guarded(kCall, [&] { return validate_impl(args); }); }
Status validate(const BackwardArgs& args) { return detail::guarded(kCall, [&] { return validate_impl(args); }); }
Status forward_workspace_size(const ForwardArgs& args, std::size_t* bytes) {
  return detail::guarded(kCall, [&] { return forward_workspace_size_impl(args, bytes); });
}
Status backward_workspace_size(const BackwardArgs& args, std::size_t* bytes) {
  return detail::guarded(kCall, [&] { return backward_workspace_size_impl(args, bytes); });
}
Status forward(const ForwardArgs& args) { return detail::guarded(kCall, [&] { return forward_impl(args); }); }
Status backward(const BackwardArgs& args) { return detail::guarded(kCall, [&] { return backward_impl(args); }); }
Status describe_plan(const ForwardArgs& args, std::string* plan) {
  return detail::guarded(kCall, [&] { return describe_plan_impl(args, plan); });
}
Status describe_plan(const BackwardArgs& args, std::string* plan) {
  return detail::guarded(kCall, [&] { return describe_plan_impl(args, plan); });
}
Status forward_flops(const ForwardArgs& args, double* flops) {
  return detail::guarded(kCall, [&] { return forward_flops_impl(args, flops); });
}

bool cuda_available() { return cuda::device_count() > 0; }

const char* version() { return MEMATTN_VERSION; }

}  // namespace memattn
