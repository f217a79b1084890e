// The public entry points: validate once, then hand the call to the resolved backend.
#include <cmath>
#include <limits>
#include <vector>

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

// Empty problems (Problem::empty: B, Mq, Mk or Hq is 0) return here, before any backend runs.
// Every gradient is 0 and a row that sees no key has out 0 and LSE -inf; an output with no elements
// is not touched (its pointer may be null). On the host the outputs are written here. On the CUDA
// backend writing device memory needs the stream, so: a problem whose outputs all have no elements
// returns at once; Mk = 0 with B, Mq, Hq > 0 goes to the kernels, which handle a row with no key
// (out 0, LSE -inf, dq 0; tests/support/cases.cpp's empty_keys); any other empty problem with an
// output that has elements (the backward's dk, dv or dbias with Mq = 0 or Hq = 0) is refused as
// unsupported, before anything is written.
bool has_elements(const TensorRef& t) {
  if (!t.defined()) return false;
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return false;
  return true;
}

// Writes `value` into every element of a validated host tensor of rank 3 or 4.
void fill_host(const TensorRef& t, double value) {
  if (!has_elements(t)) return;
  std::int64_t idx[4] = {0, 0, 0, 0};
  for (;;) {
    std::int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides[d];
    detail::store_double(t.data, t.dtype, off, value);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.sizes[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

enum class EmptyRun { done, to_backend };

// The one empty problem the CUDA backend is given: Mk = 0 (no key anywhere) with B, Mq, Hq > 0.
bool cuda_runs_empty(const detail::Problem& p) {
  return p.backend == Backend::cuda && p.batch > 0 && p.seqlen_q > 0 && p.heads_q > 0;
}

// The kernels were only ever given real k and v pointers (descriptors are built from them), so a
// null k or v (allowed for Mk = 0) is not handed to them.
Status cuda_needs_kv(const TensorRef& k, const TensorRef& v) {
  if (k.defined() && v.defined()) return Status::Ok();
  return {StatusCode::unsupported,
          std::string(k.defined() ? "v" : "k") +
              ": data pointer is null; with Mk = 0 the CUDA backend still needs k and v pointers (any "
              "address on the tensors' device) until it writes out = 0, LSE = -inf itself"};
}

Status finish_empty(const ForwardArgs& a, const detail::Problem& p, EmptyRun* run) {
  *run = EmptyRun::done;
  const bool outputs = has_elements(a.out) || has_elements(a.lse);
  if (p.backend == Backend::cuda) {
    if (!outputs || !cuda_runs_empty(p)) return Status::Ok();
    *run = EmptyRun::to_backend;  // only Mk = 0 leaves outputs with elements
    return cuda_needs_kv(a.k, a.v);
  }
  fill_host(a.out, 0.0);
  fill_host(a.lse, -std::numeric_limits<double>::infinity());
  return Status::Ok();
}

Status finish_empty(const BackwardArgs& a, const detail::Problem& p, EmptyRun* run) {
  *run = EmptyRun::done;
  const TensorRef* grads[] = {&a.dq, &a.dk, &a.dv, &a.dbias};
  if (p.backend == Backend::cuda) {
    if (has_elements(a.dk) || has_elements(a.dv) || has_elements(a.dbias))
      return {StatusCode::unsupported,
              "empty problem (B = " + std::to_string(p.batch) + ", Mq = " + std::to_string(p.seqlen_q) +
                  ", Mk = " + std::to_string(p.seqlen_k) + ", Hq = " + std::to_string(p.heads_q) +
                  "): the CUDA backend cannot yet zero-fill dk, dv or dbias of an empty problem (they are all 0); " +
                  "nothing was written"};
    if (!has_elements(a.dq) || !cuda_runs_empty(p)) return Status::Ok();
    *run = EmptyRun::to_backend;  // Mk = 0: the kernels write dq = 0
    if (!a.dk.defined() || !a.dv.defined())
      return {StatusCode::unsupported, std::string(a.dk.defined() ? "dv" : "dk") +
                                           ": data pointer is null; with Mk = 0 the CUDA backend still needs it"};
    return cuda_needs_kv(a.k, a.v);
  }
  for (const TensorRef* g : grads) fill_host(*g, 0.0);
  return Status::Ok();
}

template <class Args>
Status workspace_size(const Args& args, const detail::Problem& p, std::size_t* bytes) {
  *bytes = 0;
  if (p.empty && !cuda_runs_empty(p)) return Status::Ok();
  if (p.backend == Backend::cuda) return cuda::workspace_size(args, p, bytes);
  return Status::Ok();  // the CPU paths allocate their own scratch
}

}  // namespace

Status validate(const ForwardArgs& args) {
  detail::Problem p;
  return detail::build_problem(args, &p);
}

Status validate(const BackwardArgs& args) {
  detail::Problem p;
  return detail::build_problem(args, &p);
}

Status forward_workspace_size(const ForwardArgs& args, std::size_t* bytes) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  return workspace_size(args, p, bytes);
}

Status backward_workspace_size(const BackwardArgs& args, std::size_t* bytes) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  return workspace_size(args, p, bytes);
}

Status forward(const ForwardArgs& args) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  // The alignment here; the size where the plan is made (cuda::forward), not twice per call.
  if (Status s = detail::check_workspace(args, 0); !s.ok()) return s;
  if (p.empty) {
    EmptyRun run;
    if (Status s = finish_empty(args, p, &run); !s.ok() || run == EmptyRun::done) return s;
  }
  switch (p.backend) {
    case Backend::reference: return run_reference(args);
    case Backend::cuda: return cuda::forward(args, p);
    default: return cpu::forward(args, p);
  }
}

Status backward(const BackwardArgs& args) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, 0); !s.ok()) return s;
  if (p.empty) {
    EmptyRun run;
    if (Status s = finish_empty(args, p, &run); !s.ok() || run == EmptyRun::done) return s;
  }
  switch (p.backend) {
    case Backend::reference: return run_reference(args, p);
    case Backend::cuda: return cuda::backward(args, p);
    default: return cpu::backward(args, p);
  }
}

Status describe_plan(const ForwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (p.empty && !cuda_runs_empty(p)) {
    *plan = "empty problem (B, Mq, Mk or Hq is 0): returns at once with zero-filled outputs";
    return Status::Ok();
  }
  switch (p.backend) {
    case Backend::reference: *plan = "reference (float64, naive)"; return Status::Ok();
    case Backend::cuda: return cuda::describe_forward(args, p, plan);
    default: *plan = cpu::describe_forward(p); return Status::Ok();
  }
}

Status describe_plan(const BackwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  if (p.empty && !cuda_runs_empty(p)) {
    *plan = "empty problem (B, Mq, Mk or Hq is 0): returns at once with zero-filled outputs";
    return Status::Ok();
  }
  switch (p.backend) {
    case Backend::reference: *plan = "reference (float64, naive)"; return Status::Ok();
    case Backend::cuda: return cuda::describe_backward(args, p, plan);
    default: *plan = cpu::describe_backward(p); return Status::Ok();
  }
}

Status forward_flops(const ForwardArgs& args, double* flops) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  *flops = 2.0 * p.visible_pairs() * double(p.head_dim + p.head_dim_v);
  return Status::Ok();
}

bool cuda_available() { return cuda::device_count() > 0; }

const char* version() { return MEMATTN_VERSION; }

}  // namespace memattn
