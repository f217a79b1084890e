// Decoding with grouped heads: the rewrite (pack_gqa.hpp).
#include "cuda/pack_gqa.hpp"

#include <algorithm>
#include <cstdint>

namespace memattn::cuda {
namespace {

// The view moved `first` rows down dimension `dim` and cut to `count` of them.
TensorRef narrow(TensorRef t, int dim, std::int64_t first, std::int64_t count) {
  t.data = static_cast<char*>(t.data) + first * t.strides[dim] * std::int64_t(dtype_size(t.dtype));
  t.sizes[dim] = count;
  return t;
}

// Dimension `heads` (size Hq = Hk * g, stride s) split into Hk heads (stride g * s) and the g
// rows of dimension `rows` (stride s; a stride 0 stays 0 in both). A bias's head dimension of
// size 1 stays one, and the rows broadcast with it.
TensorRef heads_as_rows(TensorRef t, int heads, int rows, std::int64_t heads_k, std::int64_t group) {
  if (t.sizes[heads] == 1) {
    t.sizes[rows] = 1;
    t.strides[rows] = 0;
    return t;
  }
  t.sizes[rows] = group;
  t.strides[rows] = t.strides[heads];
  t.sizes[heads] = heads_k;
  t.strides[heads] *= group;
  return t;
}

// The call with the g query heads of each kv head as the rows of one unmasked problem: the views
// of q, out and lse, and the problem's heads, rows and mask. Keys, values and bias unchanged.
void call_with_heads_as_rows(const ForwardArgs& a, const detail::Problem& p, ForwardArgs* packed,
                             detail::Problem* packed_problem) {
  const std::int64_t group = p.group_size();
  *packed = a;
  packed->q = heads_as_rows(a.q, 2, 1, p.heads_k, group);
  packed->out = heads_as_rows(a.out, 2, 1, p.heads_k, group);
  if (a.lse.defined()) packed->lse = heads_as_rows(a.lse, 1, 2, p.heads_k, group);
  *packed_problem = p;
  packed_problem->heads_q = p.heads_k;
  packed_problem->seqlen_q = group;
  packed_problem->window_left = packed_problem->window_right = kUnbounded;
  packed_problem->bottom_right = false;
}

}  // namespace

bool pack_gqa_rows(const ForwardArgs& a, const detail::Problem& p, ForwardArgs* packed,
                   detail::Problem* packed_problem) {
  const std::int64_t group = p.group_size();
  if (p.varlen || p.seqlen_q != 1 || group <= 1 || p.has_dropout() || p.seqlen_k == 0) return false;
  if (p.cache.enabled) {
    // The row is each sequence's last position (bottom-right): it sees all its keys unless a window
    // bounds it on the left, and the key counts differ by sequence, so only then is it rewritten
    // (the cache's rows need no narrowing).
    if (p.window_left != kUnbounded) return false;
    call_with_heads_as_rows(a, p, packed, packed_problem);
    return true;
  }
  // The one row's keys: its diagonal is key 0 (top-left) or the last key (bottom-right).
  const std::int64_t diagonal = p.bottom_right ? p.seqlen_k - 1 : 0;
  const std::int64_t first = p.window_left == kUnbounded ? 0 : std::max<std::int64_t>(0, diagonal - p.window_left);
  const std::int64_t last =
      p.window_right == kUnbounded ? p.seqlen_k - 1 : std::min(p.seqlen_k - 1, diagonal + p.window_right);
  if (first > last) return false;  // no key: the usual path writes the empty rows
  const std::int64_t keys = last - first + 1;

  call_with_heads_as_rows(a, p, packed, packed_problem);
  packed->k = narrow(a.k, 1, first, keys);
  packed->v = narrow(a.v, 1, first, keys);
  if (p.has_bias) {
    TensorRef bias = heads_as_rows(a.bias, 1, 2, p.heads_k, group);
    if (!p.bias_broadcast[3]) bias = narrow(bias, 3, first, keys);
    packed->bias = bias;
    packed_problem->bias_broadcast[2] = p.bias_broadcast[1];
  }
  packed_problem->seqlen_k = keys;
  return true;
}

}  // namespace memattn::cuda
