// The backward kernels' parameters: everything the forward reads (FwdParams, whose `out` is the
// forward's output O and `lse` its LSE) plus dO, the gradients and the delta workspace.
#pragma once

#include <cstdint>

#include "cuda/fwd_params.hpp"

namespace memattn::cuda {

struct BwdParams : FwdParams {
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  void* dbias;  // null unless asked for; the bias's strides (dense: no broadcast dimension)
  std::int64_t do_batch_stride, do_row_stride, do_head_stride;
  std::int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  std::int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  std::int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
  std::int64_t dbias_batch_stride, dbias_head_stride, dbias_row_stride, dbias_col_stride;
  std::int64_t dbias_sizes[4];
  float scale;  // softmax scale (dK and dQ carry it)
  // delta = rowsum(dO * O), fp32 [batch][heads_q][rows of q] with rows_per_batch = q.sizes[1].
  float* delta;
  std::int64_t delta_rows;  // rows per (batch, head): the tensors' M dimension
  int num_n_blocks;         // key tiles per (sequence, kv head)
  std::int64_t num_kv_blocks;  // num_n_blocks * heads_k * batch: the work items of dK/dV
};

}  // namespace memattn::cuda
