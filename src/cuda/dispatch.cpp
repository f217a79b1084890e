// The CUDA backend's entry points: a call becomes a plan (the row chosen, select.hpp; the
// kernel parameters filled from the validated Problem; the schedule, schedule.hpp; the
// workspace, workspace.hpp), then the workspace is found and the row launched. workspace_size
// and describe_plan make the same plan without launching.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/pack_gqa.hpp"
#include "cuda/schedule.hpp"
#include "cuda/select.hpp"
#include "cuda/split_combine.hpp"
#include "cuda/workspace.hpp"

namespace memattn::cuda {
namespace {

constexpr double kLog2e = 1.4426950408889634;

// The forward's view of a call (the backward reads the same tensors); Args is ForwardArgs or
// BackwardArgs.
template <class Args>
FwdParams forward_params(const Args& a, const detail::Problem& p, int block_m) {
  FwdParams f{};
  f.q = a.q.data;
  f.k = a.k.data;
  f.v = a.v.data;
  f.bias = p.has_bias ? a.bias.data : nullptr;
  f.out = a.out.data;
  f.lse = a.lse.defined() ? static_cast<float*>(a.lse.data) : nullptr;
  f.q_batch_stride = a.q.strides[0], f.q_row_stride = a.q.strides[1], f.q_head_stride = a.q.strides[2];
  f.k_batch_stride = a.k.strides[0], f.k_row_stride = a.k.strides[1], f.k_head_stride = a.k.strides[2];
  f.v_batch_stride = a.v.strides[0], f.v_row_stride = a.v.strides[1], f.v_head_stride = a.v.strides[2];
  f.o_batch_stride = a.out.strides[0], f.o_row_stride = a.out.strides[1], f.o_head_stride = a.out.strides[2];
  if (f.lse) f.lse_batch_stride = a.lse.strides[0], f.lse_head_stride = a.lse.strides[1], f.lse_row_stride = a.lse.strides[2];
  if (p.has_bias) {
    const std::int64_t* s = a.bias.strides;
    f.bias_batch_stride = p.bias_broadcast[0] ? 0 : s[0];
    f.bias_head_stride = p.bias_broadcast[1] ? 0 : s[1];
    f.bias_row_stride = p.bias_broadcast[2] ? 0 : s[2];
    f.bias_col_stride = p.bias_broadcast[3] ? 0 : s[3];
    f.bias_is_f32 = a.bias.dtype == DType::f32;
  }
  f.batch = int(p.batch);
  f.heads_q = int(p.heads_q);
  f.heads_k = int(p.heads_k);
  f.group = int(p.group_size());
  f.head_dim = int(p.head_dim);
  f.head_dim_v = int(p.head_dim_v);
  f.seqlen_q = p.seqlen_q;
  f.seqlen_k = p.seqlen_k;
  if (p.varlen) {
    f.seqstart_q = a.varlen.seqstart_q.data;
    f.seqstart_k = a.varlen.seqstart_k.data;
    f.seqused_k = a.varlen.seqused_k.data;
    f.packed_q = a.q.sizes[1];
    f.packed_k = a.k.sizes[1];
  }
  f.scale = float(p.scale);
  f.scale_log2 = float(p.scale * kLog2e);
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.bottom_right = p.bottom_right;
  f.dropout = p.has_dropout();
  f.dropout_threshold = p.dropout_threshold;
  f.dropout_scale = float(1.0 / (1.0 - p.dropout_p));
  f.seed_lo = std::uint32_t(p.dropout_seed);
  f.seed_hi = std::uint32_t(p.dropout_seed >> 32);
  f.dropout_offset = std::uint32_t(p.dropout_offset);
  f.num_m_blocks = int((p.seqlen_q + block_m - 1) / block_m);
  f.num_blocks = std::int64_t(f.num_m_blocks) * p.heads_q * p.batch;
  return f;
}

// The backward's parameters: the forward's, the gradients, and the key-tile counts.
BwdParams backward_params(const BackwardArgs& a, const detail::Problem& p, const BackwardKernel& k) {
  BwdParams b{};
  static_cast<FwdParams&>(b) = forward_params(a, p, k.block_m);
  b.dout = a.dout.data;
  b.dq = a.dq.data;
  b.dk = a.dk.data;
  b.dv = a.dv.data;
  b.dbias = p.has_dbias ? a.dbias.data : nullptr;
  b.do_batch_stride = a.dout.strides[0], b.do_row_stride = a.dout.strides[1], b.do_head_stride = a.dout.strides[2];
  b.dq_batch_stride = a.dq.strides[0], b.dq_row_stride = a.dq.strides[1], b.dq_head_stride = a.dq.strides[2];
  b.dk_batch_stride = a.dk.strides[0], b.dk_row_stride = a.dk.strides[1], b.dk_head_stride = a.dk.strides[2];
  b.dv_batch_stride = a.dv.strides[0], b.dv_row_stride = a.dv.strides[1], b.dv_head_stride = a.dv.strides[2];
  if (p.has_dbias) {
    b.dbias_batch_stride = a.dbias.strides[0], b.dbias_head_stride = a.dbias.strides[1];
    b.dbias_row_stride = a.dbias.strides[2], b.dbias_col_stride = a.dbias.strides[3];
    for (int d = 0; d < 4; ++d) b.dbias_sizes[d] = a.dbias.sizes[d];
  }
  b.delta_rows = a.q.sizes[1];
  b.num_n_blocks = int((p.seqlen_k + k.block_n - 1) / k.block_n);
  b.num_kv_blocks = std::int64_t(b.num_n_blocks) * p.heads_k * p.batch;
  return b;
}

// A forward ready to launch: the row, its parameters, and the workspace it needs.
struct ForwardPlan {
  const ForwardKernel* kernel = nullptr;
  FwdParams params{};
  std::size_t workspace_bytes = 0;
  bool packed_gqa = false;  // the query heads of a kv head run as its rows (pack_gqa.hpp)
};

Status plan_forward(const ForwardArgs& call_args, const detail::Problem& call_problem, ForwardPlan* plan) {
  ForwardArgs packed_args;
  detail::Problem packed_problem;
  plan->packed_gqa = pack_gqa_rows(call_args, call_problem, &packed_args, &packed_problem);
  const ForwardArgs& args = plan->packed_gqa ? packed_args : call_args;
  const detail::Problem& p = plan->packed_gqa ? packed_problem : call_problem;
  if (p.cache.enabled && p.seqlen_k > kMaxCachePosition)
    return {StatusCode::unsupported, "k: backend cuda reads a KV cache of at most " + std::to_string(kMaxCachePosition) +
                                         " keys per sequence; this call's sequences hold up to " + std::to_string(p.seqlen_k)};
  if (Status s = choose_forward(args, p, &plan->kernel); !s.ok()) return s;
  plan->params = forward_params(args, p, plan->kernel->block_m);
  cache_params(args, p, &plan->params);
  if (Status s = schedule_forward(*plan->kernel, p, args.overrides, &plan->params); !s.ok()) return s;
  plan->workspace_bytes = plan_forward_workspace(*plan->kernel, p, &plan->params);
  return Status::Ok();
}

struct BackwardPlan {
  const BackwardKernel* kernel = nullptr;
  BwdParams params{};
  BackwardWorkspace workspace;
};

Status plan_backward(const BackwardArgs& args, const detail::Problem& p, BackwardPlan* plan) {
  if (Status s = choose_backward(args, p, &plan->kernel); !s.ok()) return s;
  const BackwardKernel& k = *plan->kernel;
  plan->params = backward_params(args, p, k);
  if (Status s = schedule_backward(k, p, args.overrides, args.deterministic, &plan->params); !s.ok()) return s;
  plan_backward_workspace(k, args, p, &plan->params, &plan->workspace);
  return Status::Ok();
}

}  // namespace

Status workspace_size(const ForwardArgs& args, const detail::Problem& p, std::size_t* bytes) {
  ForwardPlan plan;
  const Status s = plan_forward(args, p, &plan);
  *bytes = s.ok() ? plan.workspace_bytes : 0;
  return s.code() == StatusCode::unsupported ? Status::Ok() : s;  // forward() reports why no row fits
}

Status workspace_size(const BackwardArgs& args, const detail::Problem& p, std::size_t* bytes) {
  BackwardPlan plan;
  const Status s = plan_backward(args, p, &plan);
  *bytes = s.ok() ? plan.workspace.bytes : 0;
  return s.code() == StatusCode::unsupported ? Status::Ok() : s;
}

Status forward(const ForwardArgs& args, const detail::Problem& p) {
  ForwardPlan plan;
  if (Status s = plan_forward(args, p, &plan); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, plan.workspace_bytes); !s.ok()) return s;
  if (p.seqlen_q == 0 || p.batch == 0) return Status::Ok();
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const Scratch scratch(args, plan.workspace_bytes, stream);
  if (Status s = scratch.status(); !s.ok()) return s;
  bind_forward_workspace(*plan.kernel, scratch.get(), &plan.params);
  // A cache's new keys go in once nothing can refuse the call any more, before the kernel reads
  // them, unless the kernel writes them itself (cache_params).
  if (plan.params.cache_k_new == nullptr)
    if (Status s = append_kv_cache(args, p); !s.ok()) return s;
  if (Status s = plan.kernel->launch(plan.params, stream); !s.ok()) return s;
  return plan.params.num_splits > 1 ? launch_split_combine(plan.params, p.dtype, stream) : Status::Ok();
}

Status describe_forward(const ForwardArgs& args, const detail::Problem& p, std::string* text) {
  ForwardPlan plan;
  if (Status s = plan_forward(args, p, &plan); !s.ok()) return s;
  *text = describe(*plan.kernel);
  if (p.cache.enabled && !plan.kernel->paged) *text += ", the KV cache read as strided rows (one page per sequence)";
  if (plan.packed_gqa) *text += ", the query heads of each kv head as its rows";
  if (plan.params.num_splits > 1)
    *text += ", keys split over " + std::to_string(plan.params.num_splits) + " CTAs per query tile, then combined";
  else if (plan.workspace_bytes)
    *text += ", workspace " + std::to_string(plan.workspace_bytes >> 20) + " MiB for " +
             std::to_string(plan.params.grid_ctas) + " CTAs";
  return Status::Ok();
}

Status backward(const BackwardArgs& args, const detail::Problem& p) {
  BackwardPlan plan;
  if (Status s = plan_backward(args, p, &plan); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, plan.workspace.bytes); !s.ok()) return s;
  if (p.batch == 0) return Status::Ok();
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const Scratch scratch(args, plan.workspace.bytes, stream);
  if (Status s = scratch.status(); !s.ok()) return s;
  bind_backward_workspace(*plan.kernel, plan.workspace, scratch.get(), &plan.params);
  return plan.kernel->launch(plan.params, stream);
}

Status describe_backward(const BackwardArgs& args, const detail::Problem& p, std::string* text) {
  BackwardPlan plan;
  if (Status s = plan_backward(args, p, &plan); !s.ok()) return s;
  *text = describe(*plan.kernel);
  const BwdParams& b = plan.params;
  if (b.kv_split_parts > 1)
    *text += ", the last " + std::to_string(b.num_kv_blocks - b.kv_split_first) + " of " +
             std::to_string(b.num_kv_blocks) + " key tiles split over " + std::to_string(b.kv_split_parts) +
             " CTAs each";
  return Status::Ok();
}

}  // namespace memattn::cuda
