// Host validation of every argument (DESIGN.md §2): one clear error naming the argument, before
// anything runs and before anything is written.
#include "core/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/checks.hpp"
#include "cuda/backend.hpp"
#include "cuda/key_splits.hpp"
#include "memattn/dropout.hpp"

namespace memattn::detail {
namespace {

constexpr std::int64_t kMaxHeadDim = 65536;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

struct NamedPointer {
  const char* name;
  const void* ptr;
};

// All pointers live in one place, and that place suits the backend asked for.
// Null pointers (tensors with zero elements, absent optional ones) live nowhere: the first non-null
// pointer decides. When every pointer is null (an empty problem), the requested backend is kept
// (automatic: the CPU, or the reference for f64) and nothing is located.
Status check_locations(const std::vector<NamedPointer>& pointers, Backend requested, DType dtype, Problem* p) {
  if (requested != Backend::automatic && requested != Backend::cpu && requested != Backend::cuda &&
      requested != Backend::reference)
    return invalid("backend: unknown value " + std::to_string(int(requested)));
  const NamedPointer* front = nullptr;
  for (const NamedPointer& np : pointers)
    if (np.ptr != nullptr) {
      front = &np;
      break;
    }
  if (front == nullptr) {
    Backend resolved = requested == Backend::automatic ? (dtype == DType::f64 ? Backend::reference : Backend::cpu)
                                                       : requested;
    if (dtype == DType::f64 && resolved != Backend::reference)
      return invalid(std::string(pointers.front().name) + ": dtype f64 is supported by the reference backend only");
    p->backend = resolved;
    p->device = resolved == Backend::cuda ? current_cuda_device() : -1;
    if (resolved == Backend::cuda && p->device < 0)
      return invalid("backend: cuda was asked for, but there is no CUDA device");
    return Status::Ok();
  }
  const PointerInfo first = locate(front->ptr);
  for (const NamedPointer& np : pointers) {
    if (np.ptr == nullptr) continue;
    const PointerInfo info = locate(np.ptr);
    if (info.location != first.location || info.device != first.device)
      return invalid(std::string(np.name) + ": lives in " + describe(info) + " but " +
                     front->name + " lives in " + describe(first));
  }
  Backend resolved = requested;
  if (requested == Backend::automatic)
    resolved = first.location == Location::device ? Backend::cuda
               : dtype == DType::f64             ? Backend::reference
                                                 : Backend::cpu;
  if (dtype == DType::f64 && resolved != Backend::reference)
    return invalid(std::string(front->name) + ": dtype f64 is supported by the reference backend only");
  if (resolved == Backend::cuda) {
    if (first.location != Location::device)
      return invalid(std::string("backend: cuda needs device memory, but ") + front->name +
                     " lives in " + describe(first));
    if (first.device != current_cuda_device())
      return invalid(std::string(front->name) + ": lives on CUDA device " +
                     std::to_string(first.device) + " but the current device is " +
                     std::to_string(current_cuda_device()));
  } else if (first.location != Location::host) {
    return invalid(std::string("backend: ") + to_string(resolved) + " needs host memory, but " +
                   front->name + " lives in " + describe(first));
  }
  p->backend = resolved;
  p->device = first.device;
  return Status::Ok();
}


Status check_varlen_structure(const Varlen& vl) {
  if (!vl.seqstart_q.defined())
    return invalid(std::string("varlen.seqstart_q: is missing, but ") +
                   (vl.seqstart_k.defined() ? "varlen.seqstart_k" : "varlen.seqused_k") +
                   " is given; variable lengths need both seqstart_q and seqstart_k");
  if (vl.seqstart_q.size < 1)
    return invalid("varlen.seqstart_q: has " + std::to_string(vl.seqstart_q.size) +
                   " elements; it must have num_seqs + 1 >= 1 (the start of every sequence and the end of the last)");
  const std::int64_t n = vl.num_seqs();
  if (n > std::numeric_limits<std::int32_t>::max())
    return invalid("varlen.seqstart_q: " + std::to_string(n) + " sequences exceed 2^31 - 1");
  if (Status s = check_index(vl.seqstart_q, "varlen.seqstart_q", n + 1, "num_seqs + 1"); !s.ok()) return s;
  if (!vl.seqstart_k.defined())
    return invalid("varlen.seqstart_k: is missing; variable lengths need both seqstart_q and seqstart_k");
  if (Status s = check_index(vl.seqstart_k, "varlen.seqstart_k", n + 1,
                             "num_seqs + 1, like varlen.seqstart_q");
      !s.ok())
    return s;
  if (vl.seqused_k.defined())
    if (Status s = check_index(vl.seqused_k, "varlen.seqused_k", n,
                               "num_seqs = varlen.seqstart_q's size - 1, one per sequence");
        !s.ok())
      return s;
  return Status::Ok();
}


// A caller's bound on the sequence lengths, checked against the lengths read.
Status check_bound(std::int64_t bound, std::int64_t longest, std::int64_t b, const char* name, const char* what) {
  if (bound == kUnknownLength || longest <= bound) return Status::Ok();
  return invalid(std::string(name) + " = " + std::to_string(bound) + " is less than the " +
                 std::to_string(longest) + " " + what + " of sequence " + std::to_string(b));
}

// The values of a variable-length description, read on the host and checked in full.
Status read_varlen(const Varlen& vl, Location where, void* stream, std::int64_t total_q, std::int64_t total_k,
                   Problem* p) {
  const std::size_t n = std::size_t(vl.num_seqs());
  if (Status s = copy_index(vl.seqstart_q, "varlen.seqstart_q", where, stream, &p->seqstart_q); !s.ok()) return s;
  if (Status s = copy_index(vl.seqstart_k, "varlen.seqstart_k", where, stream, &p->seqstart_k); !s.ok()) return s;
  if (vl.seqused_k.defined()) {
    if (Status s = copy_index(vl.seqused_k, "varlen.seqused_k", where, stream, &p->seqlen_k_used); !s.ok()) return s;
  } else {
    p->seqlen_k_used.resize(n);
  }
  const auto check_starts = [&](const std::vector<std::int32_t>& st, const char* name,
                                std::int64_t total) -> Status {
    if (st[0] < 0)
      return invalid(std::string(name) + "[0] = " + std::to_string(st[0]) + " is negative");
    for (std::size_t b = 0; b < n; ++b)
      if (st[b + 1] < st[b])
        return invalid(std::string(name) + ": must be non-decreasing, but [" + std::to_string(b + 1) +
                       "] = " + std::to_string(st[b + 1]) + " < [" + std::to_string(b) +
                       "] = " + std::to_string(st[b]));
    if (st[n] > total)
      return invalid(std::string(name) + "[" + std::to_string(n) + "] = " + std::to_string(st[n]) +
                     " exceeds the " + std::to_string(total) + " packed rows");
    return Status::Ok();
  };
  if (Status s = check_starts(p->seqstart_q, "varlen.seqstart_q", total_q); !s.ok()) return s;
  if (Status s = check_starts(p->seqstart_k, "varlen.seqstart_k", total_k); !s.ok()) return s;
  p->seqlen_q = 0;
  p->seqlen_k = 0;
  for (std::size_t b = 0; b < n; ++b) {
    const std::int32_t klen = p->seqstart_k[b + 1] - p->seqstart_k[b];
    if (vl.seqused_k.defined()) {
      if (p->seqlen_k_used[b] < 0 || p->seqlen_k_used[b] > klen)
        return invalid("varlen.seqused_k[" + std::to_string(b) + "] = " +
                       std::to_string(p->seqlen_k_used[b]) + " is outside [0, " +
                       std::to_string(klen) + "] (the keys seqstart_k gives sequence " + std::to_string(b) + ")");
    } else {
      p->seqlen_k_used[b] = klen;
    }
    const std::int64_t qlen = p->seqstart_q[b + 1] - p->seqstart_q[b];
    if (Status s = check_bound(vl.max_seqlen_q, qlen, std::int64_t(b), "varlen.max_seqlen_q", "query rows"); !s.ok())
      return s;
    if (Status s = check_bound(vl.max_seqlen_k, p->seqlen_k_used[b], std::int64_t(b), "varlen.max_seqlen_k",
                               "used keys");
        !s.ok())
      return s;
    p->seqlen_q = std::max(p->seqlen_q, qlen);
    p->seqlen_k = std::max<std::int64_t>(p->seqlen_k, p->seqlen_k_used[b]);
  }
  return Status::Ok();
}

// Variable lengths: the sequences' values (read unless the CUDA backend was given bounds) and the
// longest lengths, which size the grid and the bias: the caller's bounds where given.
Status resolve_varlen(const Varlen& vl, Lengths lengths, void* stream, std::int64_t total_q, std::int64_t total_k,
                      Problem* p) {
  p->batch = vl.num_seqs();
  const Location where = p->backend == Backend::cuda ? Location::device : Location::host;
  p->lengths_known = where == Location::host || !vl.bounded() || lengths == Lengths::read;
  if (p->lengths_known) {
    if (Status s = read_varlen(vl, where, stream, total_q, total_k, p); !s.ok()) return s;
  } else {
    for (const auto& [x, name] : {std::pair{&vl.seqstart_q, "varlen.seqstart_q"},
                                  std::pair{&vl.seqstart_k, "varlen.seqstart_k"},
                                  std::pair{&vl.seqused_k, "varlen.seqused_k"}})
      if (Status s = check_readable(*x, name, where); !s.ok()) return s;
  }
  // No sequence is longer than its packed tensor.
  if (vl.max_seqlen_q != kUnknownLength) p->seqlen_q = std::min(vl.max_seqlen_q, total_q);
  if (vl.max_seqlen_k != kUnknownLength) p->seqlen_k = std::min(vl.max_seqlen_k, total_k);
  return Status::Ok();
}

// Checks shared by the forward and the backward: q, k, v, bias, options. Fills sizes.
// `cache`: the forward's KV cache (null for the backward); enabled, k and v are its tensors.
Status check_common(const Options& opt, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                    const TensorRef& bias, const KvCache* cache, std::vector<NamedPointer> pointers,
                    Lengths lengths, Problem* p) {
  const bool kv_cache = cache != nullptr && cache->enabled();
  if (Status s = check_tensor(q, "q", "[B, Mq, Hq, D]", 4); !s.ok()) return s;
  if (Status s = check_tensor(k, "k", "[B, Mk, Hk, D]", 4); !s.ok()) return s;
  if (Status s = check_tensor(v, "v", "[B, Mk, Hk, Dv]", 4); !s.ok()) return s;
  if (Status s = check_dtype(k, "k", q.dtype); !s.ok()) return s;
  if (Status s = check_dtype(v, "v", q.dtype); !s.ok()) return s;
  p->dtype = q.dtype;
  p->heads_q = q.sizes[2];
  p->heads_k = k.sizes[2];
  p->head_dim = q.sizes[3];
  p->head_dim_v = v.sizes[3];
  // Hq = 0 is an empty problem; Hk = 0 only with Hq = 0 (query heads need kv heads to attend to).
  if (p->heads_k == 0 && p->heads_q > 0)
    return invalid("k: kv heads Hk = 0 (dimension 2) with Hq = " + std::to_string(p->heads_q) +
                   " query heads; Hk must be >= 1 unless Hq = 0");
  if (p->head_dim < 1 || p->head_dim > kMaxHeadDim)
    return invalid("q: head dim D = " + std::to_string(p->head_dim) + " is outside [1, 65536]");
  if (p->head_dim_v < 1 || p->head_dim_v > kMaxHeadDim)
    return invalid("v: head dim Dv = " + std::to_string(p->head_dim_v) + " is outside [1, 65536]");
  // A cache's dimensions 0 and 1 are its own (cache rows or pages, and their length).
  const std::int64_t kv_batch = kv_cache ? k.sizes[0] : q.sizes[0];
  const char* k_layout = kv_cache ? "[B_cache or pages, Mk_max or page_size, Hk, D] (the cache)" : "[B, Mk, Hk, D]";
  const char* v_layout = kv_cache ? "k's [B_cache or pages, Mk_max or page_size, Hk] and Dv" : "[B, Mk, Hk, Dv]";
  if (Status s = check_sizes(k, "k", k_layout, {kv_batch, k.sizes[1], k.sizes[2], p->head_dim}); !s.ok())
    return s;
  if (Status s = check_sizes(v, "v", v_layout, {kv_batch, k.sizes[1], k.sizes[2], v.sizes[3]}); !s.ok())
    return s;
  if (p->heads_k > 0 && p->heads_q % p->heads_k != 0)
    return invalid("k: query heads Hq = " + std::to_string(p->heads_q) +
                   " must be a multiple of kv heads Hk = " + std::to_string(p->heads_k));

  const Varlen& vl = opt.varlen;
  p->varlen = vl.enabled();
  if (p->varlen) {
    if (q.sizes[0] != 1)
      return invalid("q: with variable lengths the batch dimension must be 1 (packed), got " +
                     std::to_string(q.sizes[0]));
    if (Status s = check_varlen_structure(vl); !s.ok()) return s;
    for (const auto& [bound, name] : {std::pair{vl.max_seqlen_q, "varlen.max_seqlen_q"},
                                      std::pair{vl.max_seqlen_k, "varlen.max_seqlen_k"}})
      if (bound < 0 && bound != kUnknownLength)
        return invalid(std::string(name) + ": must be >= 0 or kUnknownLength, got " + std::to_string(bound));
    pointers.push_back({"varlen.seqstart_q", vl.seqstart_q.data});
    pointers.push_back({"varlen.seqstart_k", vl.seqstart_k.data});
    pointers.push_back({"varlen.seqused_k", vl.seqused_k.data});
  } else {
    p->batch = q.sizes[0];
    p->seqlen_q = q.sizes[1];
    p->seqlen_k = k.sizes[1];
  }
  // Empty: no (query, key) pair at all. Validation goes on in full; api.cpp returns at once (after
  // a cache's append). A cache's sequences may hold no key: their rows see nothing.
  p->empty = q.sizes[0] == 0 || q.sizes[1] == 0 || p->heads_q == 0 || (!kv_cache && k.sizes[1] == 0) ||
             (p->varlen && (vl.num_seqs() == 0 || vl.max_seqlen_q == 0 || vl.max_seqlen_k == 0));
  if (opt.precision != Precision::automatic && opt.precision != Precision::ieee && opt.precision != Precision::tf32x3)
    return invalid("precision: unknown value " + std::to_string(int(opt.precision)));
  pointers.push_back({"workspace", opt.workspace});
  if (Status s = check_locations(pointers, opt.backend, q.dtype, p); !s.ok()) return s;
  if (p->varlen)
    if (Status s = resolve_varlen(vl, lengths, opt.stream, q.sizes[1], k.sizes[1], p); !s.ok()) return s;
  if (kv_cache)  // before the mask: a window's reach comes from the keys after the append
    if (Status s = check_kv_cache(*cache, opt, q, k, v, bias, lengths, p); !s.ok()) return s;

  p->has_bias = bias.defined();
  if (p->has_bias) {
    if (Status s = check_tensor(bias, "bias", "[B, Hq, Mq, Mk]", 4); !s.ok()) return s;
    if (bias.dtype != q.dtype && bias.dtype != DType::f32)
      return invalid(std::string("bias: dtype ") + to_string(bias.dtype) + " must be " + to_string(q.dtype) +
                     (q.dtype == DType::f32 ? " (the dtype of q)" : " (the dtype of q) or f32"));
    const std::int64_t full[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    for (int d = 0; d < 4; ++d) {
      const std::int64_t n = bias.sizes[d];
      const bool fits = n == 1 || n == full[d] || (p->varlen && d >= 2 && n >= full[d]);
      if (!fits)
        return invalid("bias: dimension " + std::to_string(d) + " has size " + std::to_string(n) +
                       "; it must be 1 (broadcast) or " + std::to_string(full[d]) +
                       (p->varlen && d >= 2 ? " or more" : "") + " to broadcast to [B, Hq, Mq, Mk] = " +
                       shape_string(full, 4));
      // A dimension of size 0 has no element to broadcast (nor dbias one to sum into).
      p->bias_broadcast[d] = n == 1 || (n > 1 && bias.strides[d] == 0);
    }
  }

  if (opt.scale) {
    if (!std::isfinite(*opt.scale)) return invalid("scale: must be finite");
    p->scale = *opt.scale;
  } else {
    p->scale = 1.0 / std::sqrt(double(p->head_dim));
  }

  const Mask& m = opt.mask;
  if (m.window_left < 0 && m.window_left != kUnbounded)
    return invalid("mask.window_left: must be >= 0 or kUnbounded, got " + std::to_string(m.window_left));
  if (m.window_right < 0 && m.window_right != kUnbounded)
    return invalid("mask.window_right: must be >= 0 or kUnbounded, got " + std::to_string(m.window_right));
  if (m.alignment != Alignment::top_left && m.alignment != Alignment::bottom_right)
    return invalid("mask.alignment: unknown value " + std::to_string(int(m.alignment)));
  // A window side of Mq + Mk or more limits nothing (the diagonal stays within Mk - 1 + Mq - 1 of
  // every key), so it is unbounded: later arithmetic on window bounds cannot overflow.
  std::int64_t reach = 0;
  if (__builtin_add_overflow(p->seqlen_q, p->seqlen_k, &reach)) reach = kInt64Max;
  p->window_left = m.window_left >= reach ? kUnbounded : m.window_left;
  p->window_right = m.window_right >= reach ? kUnbounded : m.window_right;
  p->bottom_right = m.alignment == Alignment::bottom_right;

  const Dropout& dr = opt.dropout;
  if (!(dr.p >= 0.0 && dr.p < 1.0))
    return invalid("dropout.p: must be in [0, 1), got " + std::to_string(dr.p));
  p->dropout_p = dr.p;
  p->dropout_seed = dr.seed;
  p->dropout_offset = dr.offset;
  if (dr.p > 0.0) {
    if (dr.offset >> 32)
      return invalid("dropout.offset: must be < 2^32 (it is one word of the Philox counter)");
    std::int64_t bh = 0;
    if (mul_overflows(p->batch, p->heads_q, &bh) || bh > (std::int64_t(1) << 32) ||
        p->seqlen_q > (std::int64_t(1) << 32) || p->seqlen_k > (std::int64_t(1) << 34))
      return invalid("dropout: the problem exceeds the Philox counter (B*Hq <= 2^32, Mq <= 2^32, Mk <= 2^34)");
    p->dropout_threshold = dropout_threshold(dr.p);
  }
  return Status::Ok();
}

enum class Lse { optional, required };  // the backward needs the forward's

Status check_out_lse(const TensorRef& out, const TensorRef& lse, const char* out_name,
                     const TensorRef& q, const Problem& p, Lse need) {
  if (Status s = check_tensor(out, out_name, "[B, Mq, Hq, Dv]", 4); !s.ok()) return s;
  if (Status s = check_dtype(out, out_name, q.dtype); !s.ok()) return s;
  if (Status s = check_sizes(out, out_name, "[B, Mq, Hq, Dv]", {q.sizes[0], q.sizes[1], p.heads_q, p.head_dim_v});
      !s.ok())
    return s;
  if (!lse.defined()) {
    // A null lse of the backward is allowed where it has no elements ([B, Hq, Mq] with a 0).
    const bool lse_has_elements = q.sizes[0] > 0 && p.heads_q > 0 && q.sizes[1] > 0;
    if (need == Lse::required && lse_has_elements)
      return invalid("lse: is required by the backward (the forward's logsumexp)");
    return Status::Ok();
  }
  if (Status s = check_tensor(lse, "lse", "[B, Hq, Mq]", 3); !s.ok()) return s;
  if (Status s = check_dtype(lse, "lse", DType::f32); !s.ok()) return s;
  return check_sizes(lse, "lse", "[B, Hq, Mq]", {q.sizes[0], p.heads_q, q.sizes[1]});
}

// overrides.num_splits: 0 to kMaxKeySplits, forward only. overrides.kernel: empty, or a compiled
// CUDA row of the call's pass on a call the CUDA backend runs. Whether the row can run this
// problem (or split its keys) is the dispatcher's question (it needs the device).
Status check_overrides(const KernelOverrides& o, cuda::Pass pass, const Problem& p) {
  if (o.num_splits < 0 || o.num_splits > cuda::kMaxKeySplits)
    return invalid("overrides.num_splits: must be 0 (the dispatcher's choice) or 1 to " +
                   std::to_string(cuda::kMaxKeySplits) + ", got " + std::to_string(o.num_splits));
  if (o.num_splits != 0 && pass == cuda::Pass::backward)
    return invalid("overrides.num_splits: applies to the forward only (got " + std::to_string(o.num_splits) +
                   " in a backward call; leave it 0)");
  if (o.kernel.empty()) return Status::Ok();
  const std::string name = "overrides.kernel: \"" + o.kernel + "\"";
  if (p.backend != Backend::cuda)
    return invalid(name + ": a forced kernel row applies to the CUDA backend only, and this call runs on the " +
                   to_string(p.backend) + " backend (leave overrides.kernel empty)");
  const std::optional<cuda::Pass> found = cuda::row_pass(o.kernel);
  if (!found)
    return invalid(name + " is not a row of this build's kernel table; it must name a compiled " +
                   cuda::to_string(pass) + " row (`memattn kernels` lists them) or be empty");
  if (*found != pass)
    return invalid(name + " is a " + cuda::to_string(*found) + " row; a " + cuda::to_string(pass) +
                   " call takes a " + cuda::to_string(pass) + " row (`memattn kernels` lists them)");
  return Status::Ok();
}

}  // namespace

Sequence Problem::sequence(std::int64_t b) const {
  if (cache.enabled) return {b, 0, seqlen_q, 0, cache.keys(b)};  // key rows: cache.slot
  if (!varlen) return {b, 0, seqlen_q, 0, seqlen_k};
  return {0, seqstart_q[b], seqstart_q[b + 1] - seqstart_q[b], seqstart_k[b], seqlen_k_used[b]};
}

namespace {

// Sum of max(0, a * d + b) over the integers d in [x, y], for a slope a in {-1, 0, 1}.
double sum_positive_linear(int a, std::int64_t b, std::int64_t x, std::int64_t y) {
  if (a > 0) x = std::max(x, 1 - b);  // a * d + b > 0 from there on
  if (a < 0) y = std::min(y, b - 1);  // ... up to there
  if (x > y) return 0.0;
  if (a == 0) return b > 0 ? double(y - x + 1) * double(b) : 0.0;
  // Arithmetic series of a * d + b from x to y.
  return double(y - x + 1) * (double(a) * double(x + y) / 2.0 + double(b));
}

}  // namespace

double visible_pairs_of(std::int64_t q_len, std::int64_t k_len, std::int64_t shift, std::int64_t left,
                        std::int64_t right) {
  if (q_len <= 0 || k_len <= 0) return 0;
  // Row i sees keys [lo, hi] with d = i + shift, lo = max(0, d - left), hi = min(k_len - 1, d + right)
  // (an unbounded side clamps only to the sequence). hi - lo + 1 is linear in d between the two
  // points where a clamp starts or stops acting; sum max(0, .) piece by piece.
  const std::int64_t d_first = shift, d_last = q_len - 1 + shift;
  std::vector<std::int64_t> cuts = {d_first, d_last + 1};
  if (left != kUnbounded) cuts.push_back(left + 1);                // lo = d - left from d > left on
  if (right != kUnbounded) cuts.push_back(k_len - 1 - right + 1);  // hi = k_len - 1 from there on
  std::sort(cuts.begin(), cuts.end());
  double pairs = 0;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::int64_t x = std::max(cuts[c], d_first), y = std::min(cuts[c + 1] - 1, d_last);
    if (x > y) continue;
    // On [x, y] each clamp either acts everywhere or nowhere; read which at x.
    const bool lo_moves = left != kUnbounded && x > left;
    const bool hi_moves = right != kUnbounded && x + right < k_len - 1;
    const int a = (hi_moves ? 1 : 0) - (lo_moves ? 1 : 0);
    const std::int64_t b = (hi_moves ? right : k_len - 1) - (lo_moves ? -left : 0) + 1;
    pairs += sum_positive_linear(a, b, x, y);
  }
  return pairs;
}

double Problem::visible_pairs() const {
  if ((!varlen && !cache.enabled) || !lengths_known) {  // every batch entry alike: one count (B may be 2^40)
    const Sequence s{0, 0, seqlen_q, 0, seqlen_k};
    const std::int64_t shift = bottom_right ? s.k_len - s.q_len : 0;
    return double(batch) * visible_pairs_of(s.q_len, s.k_len, shift, window_left, window_right) * double(heads_q);
  }
  double pairs = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const Sequence s = sequence(b);
    const std::int64_t shift = bottom_right ? s.k_len - s.q_len : 0;
    pairs += visible_pairs_of(s.q_len, s.k_len, shift, window_left, window_right);
  }
  return pairs * double(heads_q);
}

Status build_problem(const ForwardArgs& a, Problem* p, Lengths lengths) {
  *p = Problem{};
  const KvCache& c = a.kv_cache;
  const std::vector<NamedPointer> ptrs = {{"q", a.q.data},
                                          {"k", a.k.data},
                                          {"v", a.v.data},
                                          {"bias", a.bias.data},
                                          {"out", a.out.data},
                                          {"lse", a.lse.data},
                                          {"kv_cache.seqlens", c.seqlens.data},
                                          {"kv_cache.batch_idx", c.batch_idx.data},
                                          {"kv_cache.block_table", c.block_table.data},
                                          {"kv_cache.k_new", c.k_new.data},
                                          {"kv_cache.v_new", c.v_new.data}};
  if (Status s = check_common(a, a.q, a.k, a.v, a.bias, &c, ptrs, lengths, p); !s.ok()) return s;
  if (Status s = check_overrides(a.overrides, cuda::Pass::forward, *p); !s.ok()) return s;
  if (Status s = check_out_lse(a.out, a.lse, "out", a.q, *p, Lse::optional); !s.ok()) return s;
  if (Status s = check_no_overlap(a.out, "out"); !s.ok()) return s;
  if (a.lse.defined())
    if (Status s = check_no_overlap(a.lse, "lse"); !s.ok()) return s;
  return Status::Ok();
}

Status build_problem(const BackwardArgs& a, Problem* p, Lengths lengths) {
  *p = Problem{};
  const std::vector<NamedPointer> ptrs = {
      {"q", a.q.data},       {"k", a.k.data},   {"v", a.v.data},   {"bias", a.bias.data},
      {"out", a.out.data},   {"lse", a.lse.data}, {"dout", a.dout.data}, {"dq", a.dq.data},
      {"dk", a.dk.data},     {"dv", a.dv.data}, {"dbias", a.dbias.data}};
  if (Status s = check_common(a, a.q, a.k, a.v, a.bias, nullptr, ptrs, lengths, p); !s.ok()) return s;
  if (Status s = check_overrides(a.overrides, cuda::Pass::backward, *p); !s.ok()) return s;
  if (Status s = check_out_lse(a.out, a.lse, "out", a.q, *p, Lse::required); !s.ok()) return s;
  if (Status s = check_out_lse(a.dout, TensorRef{}, "dout", a.q, *p, Lse::optional); !s.ok()) return s;
  const struct {
    const TensorRef& grad;
    const TensorRef& like;
    const char* name;
    const char* layout;
  } grads[] = {{a.dq, a.q, "dq", "[B, Mq, Hq, D]"},
               {a.dk, a.k, "dk", "[B, Mk, Hk, D]"},
               {a.dv, a.v, "dv", "[B, Mk, Hk, Dv]"}};
  for (const auto& g : grads) {
    if (Status s = check_tensor(g.grad, g.name, g.layout, 4); !s.ok()) return s;
    if (Status s = check_dtype(g.grad, g.name, a.q.dtype); !s.ok()) return s;
    if (Status s = check_sizes(g.grad, g.name, g.layout,
                               {g.like.sizes[0], g.like.sizes[1], g.like.sizes[2], g.like.sizes[3]});
        !s.ok())
      return s;
    if (Status s = check_no_overlap(g.grad, g.name); !s.ok()) return s;
  }
  p->has_dbias = a.dbias.defined();
  if (p->has_dbias) {
    if (!p->has_bias) return invalid("dbias: given without a bias");
    if (Status s = check_tensor(a.dbias, "dbias", "(the bias's sizes)", 4); !s.ok()) return s;
    if (Status s = check_dtype(a.dbias, "dbias", a.bias.dtype); !s.ok()) return s;
    if (Status s = check_sizes(a.dbias, "dbias", "(the bias's sizes)",
                               {a.bias.sizes[0], a.bias.sizes[1], a.bias.sizes[2], a.bias.sizes[3]});
        !s.ok())
      return s;
    for (int d = 0; d < 4; ++d)
      if (p->bias_broadcast[d] && a.dbias.sizes[d] > 1 && a.dbias.strides[d] != 0)
        return invalid("dbias: dimension " + std::to_string(d) +
                       " is broadcast in the bias, so dbias needs size 1 or stride 0 there");
    if (Status s = check_no_overlap(a.dbias, "dbias", p->bias_broadcast); !s.ok()) return s;
    if (a.dbias.numel() == 0) p->has_dbias = false;  // valid, with nothing to write
  }
  return Status::Ok();
}

Status check_workspace(const Options& opt, std::size_t needed) {
  if (opt.workspace != nullptr && reinterpret_cast<std::uintptr_t>(opt.workspace) % 16 != 0)
    return {StatusCode::invalid_argument, "workspace: must be 16-byte aligned"};
  if (opt.workspace != nullptr && opt.workspace_bytes < needed)
    return {StatusCode::invalid_argument, "workspace: " + std::to_string(opt.workspace_bytes) +
                                              " bytes given, " + std::to_string(needed) + " needed"};
  return Status::Ok();
}

}  // namespace memattn::detail
