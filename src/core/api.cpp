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

template <class Args>
Status workspace_size(const Args& args, const detail::Problem& p, std::size_t* bytes) {
  *bytes = 0;
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
  switch (p.backend) {
    case Backend::reference: return run_reference(args, p);
    case Backend::cuda: return cuda::backward(args, p);
    default: return cpu::backward(args, p);
  }
}

Status describe_plan(const ForwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
  switch (p.backend) {
    case Backend::reference: *plan = "reference (float64, naive)"; return Status::Ok();
    case Backend::cuda: return cuda::describe_forward(args, p, plan);
    default: *plan = cpu::describe_forward(p); return Status::Ok();
  }
}

Status describe_plan(const BackwardArgs& args, std::string* plan) {
  detail::Problem p;
  if (Status s = detail::build_problem(args, &p); !s.ok()) return s;
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
