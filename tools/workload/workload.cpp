#include "workload/workload.hpp"

#include "workload/checked.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "workload/device.hpp"
#include "core/numeric.hpp"

namespace memattn::tools {

const char* to_string(BiasKind kind) {
  switch (kind) {
    case BiasKind::none: return "none";
    case BiasKind::dense: return "dense";
    case BiasKind::broadcast_batch: return "broadcast-batch";
    case BiasKind::broadcast_heads: return "broadcast-heads";
    case BiasKind::row: return "row";
  }
  return "?";
}

bool parse_bias_kind(const std::string& text, BiasKind* kind) {
  for (BiasKind k : {BiasKind::none, BiasKind::dense, BiasKind::broadcast_batch, BiasKind::broadcast_heads,
                     BiasKind::row})
    if (text == to_string(k)) {
      *kind = k;
      return true;
    }
  return false;
}

std::optional<BiasPattern> bias_pattern(BiasKind kind) {
  switch (kind) {
    case BiasKind::none: return std::nullopt;
    case BiasKind::dense: return BiasPattern{false, false, false, false};
    case BiasKind::broadcast_batch: return BiasPattern{true, false, false, false};
    case BiasKind::broadcast_heads: return BiasPattern{false, true, false, false};
    case BiasKind::row: return BiasPattern{false, false, true, false};
  }
  return std::nullopt;
}

std::string describe_bias(const BiasPattern& pattern) {
  for (BiasKind k : {BiasKind::dense, BiasKind::broadcast_batch, BiasKind::broadcast_heads, BiasKind::row})
    if (bias_pattern(k) == pattern) return to_string(k);
  static const char* names[4] = {"B", "Hq", "Mq", "Mk"};
  std::string s = "[";
  for (int d = 0; d < 4; ++d) s += std::string(d ? ", " : "") + (pattern[d] ? "1" : names[d]);
  return s + "]";
}

const char* to_string(Tensor t) {
  static const char* names[] = {"q", "k", "v", "bias", "out", "lse", "dout", "dq", "dk", "dv", "dbias", "k_new", "v_new"};
  return names[int(t)];
}

std::int64_t ProblemSpec::max_q() const {
  if (!varlen()) return seqlen_q;
  return std::int64_t(*std::max_element(varlen_q.begin(), varlen_q.end())) + std::max<std::int64_t>(varlen_bound_slack, 0);
}

std::int64_t ProblemSpec::max_k() const {
  if (!varlen()) return seqlen_k;
  const std::vector<std::int32_t>& lens = seqused_k.empty() ? varlen_k : seqused_k;
  return std::int64_t(*std::max_element(lens.begin(), lens.end())) + std::max<std::int64_t>(varlen_bound_slack, 0);
}

std::string ProblemSpec::describe() const {
  std::ostringstream s;
  s << to_string(dtype) << " B=" << num_seqs();
  if (varlen()) {
    s << " varlen q=[";
    for (std::size_t b = 0; b < varlen_q.size(); ++b) s << (b ? "," : "") << varlen_q[b];
    s << "] k=[";
    for (std::size_t b = 0; b < varlen_k.size(); ++b) s << (b ? "," : "") << varlen_k[b];
    s << "]";
    if (!seqused_k.empty()) s << " seqused_k";
    if (varlen_outside > 0) s << " outside=" << varlen_outside;
    if (varlen_bound_slack >= 0) s << " bounds(+" << varlen_bound_slack << ")";
  } else {
    s << " Mq=" << seqlen_q << " Mk=" << seqlen_k;
  }
  s << " Hq=" << heads_q << " Hk=" << heads_k << " D=" << head_dim << " Dv=" << head_dim_v;
  if (!mask.is_none()) {
    s << " mask(" << (mask.window_left == kUnbounded ? std::string("inf") : std::to_string(mask.window_left))
      << "," << (mask.window_right == kUnbounded ? std::string("inf") : std::to_string(mask.window_right)) << ","
      << memattn::to_string(mask.alignment) << ")";
  }
  if (bias) s << " bias=" << describe_bias(*bias) << (bias_f32 ? "(f32)" : "") << (bias_expanded ? "(expanded)" : "");
  if (dropout.p > 0) s << " dropout=" << dropout.p;
  if (precision != Precision::automatic) s << " precision=" << memattn::to_string(precision);
  if (kv_broadcast_batch) s << " kv-stride0";
  if (padding) s << " padded";
  if (cache.enabled()) {
    s << " kv-cache=" << to_string(cache.layout);
    if (cache.layout == CacheLayout::paged) s << "(page=" << cache.page_size << ")";
    s << " cached=" << cache.cache_len << " new=" << cache.new_keys;
  }
  for (const KernelOverrides* o : {&forward_overrides, &backward_overrides})
    if (!o->kernel.empty()) s << " kernel=" << o->kernel;
  if (!forward_overrides.l2_sized_groups || !backward_overrides.l2_sized_groups) s << " no-l2-groups";
  if (!forward_overrides.split_last_wave || !backward_overrides.split_last_wave) s << " no-tail-split";
  if (forward_overrides.num_splits) s << " splits=" << forward_overrides.num_splits;
  return s.str();
}

namespace {

// Strides for a row-major view of `sizes` with `pad` spare elements after each row of every
// dimension above the last (so no dimension but the last is contiguous when pad > 0).
void padded_strides(const std::int64_t* sizes, int rank, std::int64_t pad, std::int64_t* strides,
                    std::int64_t* elements) {
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride = stride * std::max<std::int64_t>(sizes[d], 1) + (d > 0 ? pad : 0);
  }
  *elements = stride;
}

// padded_strides' element count with every step checked; false on overflow.
bool padded_elements(std::initializer_list<std::int64_t> sizes, std::int64_t pad, std::int64_t* elements) {
  std::int64_t stride = 1;
  const std::int64_t* s = sizes.begin();
  for (int d = int(sizes.size()) - 1; d >= 0; --d)
    if (!checked_mul(stride, std::max<std::int64_t>(s[d], 1), &stride) || !checked_add(stride, d > 0 ? pad : 0, &stride))
      return false;
  *elements = stride;
  return true;
}

Buffer make_buffer(DType dtype, std::initializer_list<std::int64_t> sizes, std::int64_t pad) {
  Buffer buf;
  TensorRef& t = buf.view;
  t.dtype = dtype;
  t.rank = int(sizes.size());
  std::copy(sizes.begin(), sizes.end(), t.sizes);
  std::int64_t elements = 0;
  padded_strides(t.sizes, t.rank, pad, t.strides, &elements);
  buf.bytes.resize(std::size_t(elements) * dtype_size(dtype));
  t.data = buf.bytes.data();
  return buf;
}

// splitmix64: a counter-based generator, so every element's value depends only on (seed, index).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Standard normal value of element `index`: Box-Muller on one 64-bit hash gives the pair of
// elements (2k, 2k + 1), so generation costs one hash and one log/sincos per two values.
float normal(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t r = mix(seed ^ mix(index >> 1));
  const float u1 = (float(std::uint32_t(r >> 40)) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
  const float u2 = float(std::uint32_t(r) >> 8) * (1.0f / 16777216.0f);             // [0, 1)
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float angle = 6.2831853f * u2;
  return radius * ((index & 1) ? std::sin(angle) : std::cos(angle));
}

// Calls f(offset, linear index) for every element of a view.
template <class F>
void for_each_element(const TensorRef& t, F f) {
  const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rem = e, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rem % t.sizes[d]) * t.strides[d];
      rem /= t.sizes[d];
    }
    f(off, e);
  }
}

}  // namespace

bool workload_bytes(const ProblemSpec& s, std::int64_t* bytes) {
  const std::int64_t P = s.padding;
  const std::int64_t B = s.varlen() ? 1 : s.batch;
  std::int64_t Mq = s.seqlen_q, Mk = s.seqlen_k;
  if (s.varlen()) {
    Mq = Mk = 2 * std::int64_t(s.varlen_outside);
    for (std::int32_t n : s.varlen_q)
      if (!checked_add(Mq, n, &Mq)) return false;
    for (std::int32_t n : s.varlen_k)
      if (!checked_add(Mk, n, &Mk)) return false;
  }
  const std::int64_t kv_batch = s.kv_broadcast_batch ? 1 : B;
  const std::int64_t item = std::int64_t(dtype_size(s.dtype));
  // The rank-4 buffers of the constructor: q, out, then k, v, dout, dq, dk, dv, or with a cache
  // its k, v (and k_new, v_new).
  std::vector<std::array<std::int64_t, 4>> shapes = {{B, Mq, s.heads_q, s.head_dim}, {B, Mq, s.heads_q, s.head_dim_v}};
  if (s.cache.enabled()) {
    CacheShape c;
    if (!cache_shape(B, s.cache, &c)) return false;
    shapes.push_back({c.rows, c.cols, s.heads_k, s.head_dim});
    shapes.push_back({c.rows, c.cols, s.heads_k, s.head_dim_v});
    if (s.cache.new_keys > 0) {
      shapes.push_back({B, s.cache.new_keys, s.heads_k, s.head_dim});
      shapes.push_back({B, s.cache.new_keys, s.heads_k, s.head_dim_v});
    }
  } else {
    shapes.insert(shapes.end(), {{kv_batch, Mk, s.heads_k, s.head_dim},
                                 {kv_batch, Mk, s.heads_k, s.head_dim_v},
                                 {B, Mq, s.heads_q, s.head_dim_v},
                                 {B, Mq, s.heads_q, s.head_dim},
                                 {B, Mk, s.heads_k, s.head_dim},
                                 {B, Mk, s.heads_k, s.head_dim_v}});
  }
  std::int64_t total = 0, elements = 0, b = 0;
  for (const auto& sz : shapes)
    if (!padded_elements({sz[0], sz[1], sz[2], sz[3]}, P, &elements) || !checked_mul(elements, item, &b) ||
        !checked_add(total, b, &total))
      return false;
  if (s.with_lse && (!padded_elements({B, s.heads_q, Mq}, P, &elements) || !checked_mul(elements, 4, &b) ||
                     !checked_add(total, b, &total)))
    return false;
  if (s.bias) {
    const std::int64_t full[4] = {s.num_seqs(), s.heads_q, s.max_q(), s.max_k()};
    const BiasPattern& bc = *s.bias;
    const std::int64_t bitem = s.bias_f32 ? 4 : item;
    if (!padded_elements({bc[0] ? 1 : full[0], bc[1] ? 1 : full[1], bc[2] ? 1 : full[2], bc[3] ? 1 : full[3]}, P,
                         &elements) ||
        !checked_mul(elements, bitem, &b) || !checked_mul(b, s.with_dbias ? 2 : 1, &b) || !checked_add(total, b, &total))
      return false;
  }
  *bytes = total;
  return true;
}

Workload::Workload(const ProblemSpec& spec) : spec_(spec) {
  std::int64_t keys = 0;
  if (spec_.cache.enabled() && checked_add(spec_.cache.cache_len, spec_.cache.new_keys, &keys)) spec_.seqlen_k = keys;
  const ProblemSpec& s = spec_;
  const std::int64_t P = s.padding;
  const std::int64_t B = s.varlen() ? 1 : s.batch;
  std::int64_t Mq = s.seqlen_q, Mk = s.seqlen_k;
  if (s.varlen()) {
    seqstart_q_.assign(1, s.varlen_outside);
    seqstart_k_.assign(1, s.varlen_outside);
    for (std::int32_t n : s.varlen_q) seqstart_q_.push_back(seqstart_q_.back() + n);
    for (std::int32_t n : s.varlen_k) seqstart_k_.push_back(seqstart_k_.back() + n);
    seqused_k_ = s.seqused_k;
    Mq = seqstart_q_.back() + s.varlen_outside;
    Mk = seqstart_k_.back() + s.varlen_outside;
  }
  const DType dt = s.dtype;
  host(Tensor::q) = make_buffer(dt, {B, Mq, s.heads_q, s.head_dim}, P);
  host(Tensor::out) = make_buffer(dt, {B, Mq, s.heads_q, s.head_dim_v}, P);
  if (s.with_lse) host(Tensor::lse) = make_buffer(DType::f32, {B, s.heads_q, Mq}, P);
  if (s.cache.enabled()) {
    build_cache(B);
  } else {
    const std::int64_t kv_batch = s.kv_broadcast_batch ? 1 : B;
    host(Tensor::k) = make_buffer(dt, {kv_batch, Mk, s.heads_k, s.head_dim}, P);
    host(Tensor::v) = make_buffer(dt, {kv_batch, Mk, s.heads_k, s.head_dim_v}, P);
    if (s.kv_broadcast_batch) {
      for (Tensor t : {Tensor::k, Tensor::v}) {
        host(t).view.sizes[0] = B;
        host(t).view.strides[0] = 0;
      }
    }
    host(Tensor::dout) = make_buffer(dt, {B, Mq, s.heads_q, s.head_dim_v}, P);
    host(Tensor::dq) = make_buffer(dt, {B, Mq, s.heads_q, s.head_dim}, P);
    host(Tensor::dk) = make_buffer(dt, {B, Mk, s.heads_k, s.head_dim}, P);
    host(Tensor::dv) = make_buffer(dt, {B, Mk, s.heads_k, s.head_dim_v}, P);
  }

  if (s.bias) {
    const std::int64_t full[4] = {s.num_seqs(), s.heads_q, s.max_q(), s.max_k()};
    const BiasPattern& bcast = *s.bias;
    const DType bdt = s.bias_f32 ? DType::f32 : dt;
    for (Tensor t : {Tensor::bias, Tensor::dbias}) {
      if (t == Tensor::dbias && !s.with_dbias) continue;
      Buffer& b = host(t);
      b = make_buffer(bdt, {bcast[0] ? 1 : full[0], bcast[1] ? 1 : full[1], bcast[2] ? 1 : full[2], bcast[3] ? 1 : full[3]}, P);
      if (s.bias_expanded)
        for (int d = 0; d < 4; ++d)
          if (bcast[d]) {
            b.view.sizes[d] = full[d];
            b.view.strides[d] = 0;
          }
    }
  }
}

Workload::~Workload() = default;

const char* to_string(CacheLayout layout) {
  switch (layout) {
    case CacheLayout::none: return "none";
    case CacheLayout::contiguous: return "contiguous";
    case CacheLayout::paged: return "paged";
  }
  return "?";
}

bool cache_shape(std::int64_t batch, const CacheSpec& cache, CacheShape* shape) {
  std::int64_t keys = 0;
  if (!checked_add(cache.cache_len, cache.new_keys, &keys)) return false;
  CacheShape c;
  if (cache.layout == CacheLayout::paged) {
    if (cache.page_size < 1) return false;
    c.cols = cache.page_size;
    // A block table has at least one column, even for sequences without keys.
    c.pages_per_seq = std::max<std::int64_t>(1, keys / cache.page_size + (keys % cache.page_size != 0));
    if (!checked_mul(batch, c.pages_per_seq, &c.rows) || !checked_add(c.rows, 1, &c.rows) ||
        c.rows - 1 > std::numeric_limits<std::int32_t>::max())
      return false;
  } else {
    c.rows = batch;
    c.cols = keys;
    c.pages_per_seq = 1;
  }
  *shape = c;
  return true;
}

void Workload::build_cache(std::int64_t batch) {
  const ProblemSpec& s = spec_;
  if (!cache_shape(batch, s.cache, &cache_shape_)) return;  // workload_bytes refuses such a spec
  const CacheShape& c = cache_shape_;
  host(Tensor::k) = make_buffer(s.dtype, {c.rows, c.cols, s.heads_k, s.head_dim}, s.padding);
  host(Tensor::v) = make_buffer(s.dtype, {c.rows, c.cols, s.heads_k, s.head_dim_v}, s.padding);
  if (s.cache.new_keys > 0) {
    host(Tensor::k_new) = make_buffer(s.dtype, {batch, s.cache.new_keys, s.heads_k, s.head_dim}, s.padding);
    host(Tensor::v_new) = make_buffer(s.dtype, {batch, s.cache.new_keys, s.heads_k, s.head_dim_v}, s.padding);
  }
  cache_seqlens_.assign(std::size_t(batch), std::int32_t(s.cache.cache_len));
  if (s.cache.layout != CacheLayout::paged) return;
  // mt19937_64's stream is fixed by the standard (std::shuffle's use of it is not): the same
  // pages on every platform.
  std::vector<std::int32_t> order(std::size_t(c.rows));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(0x5eed'cace);
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[std::size_t(rng() % (i + 1))]);
  block_table_.assign(order.begin(), order.begin() + std::ptrdiff_t(batch * c.pages_per_seq));
  // A table that came out as pages 0, 1, 2, ... would not tell a kernel that ignores it from one
  // that reads it: shift it onto the spare page.
  bool identity = true;
  for (std::size_t i = 0; i < block_table_.size(); ++i) identity = identity && block_table_[i] == std::int32_t(i);
  if (identity)
    for (std::int32_t& page : block_table_) ++page;
}

std::pair<std::int64_t, std::int64_t> Workload::cache_slot(std::int64_t b, std::int64_t j) const {
  if (spec_.cache.layout != CacheLayout::paged) return {b, j};
  const CacheShape& c = cache_shape_;
  return {block_table_[std::size_t(b * c.pages_per_seq + j / c.cols)], j % c.cols};
}

void Workload::poison_unused_slots() {
  const CacheShape& c = cache_shape_;
  std::vector<bool> used(std::size_t(c.rows * c.cols), false);
  for (std::int64_t b = 0; b < std::int64_t(cache_seqlens_.size()); ++b)
    for (std::int64_t j = 0; j < spec_.cache.cache_len; ++j) {
      const auto [page, row] = cache_slot(b, j);
      used[std::size_t(page * c.cols + row)] = true;
    }
  for (Tensor t : {Tensor::k, Tensor::v}) {
    Buffer& buf = host(t);
    const TensorRef& view = buf.view;
    for (std::int64_t page = 0; page < c.rows; ++page)
      for (std::int64_t row = 0; row < c.cols; ++row) {
        if (used[std::size_t(page * c.cols + row)]) continue;
        for (std::int64_t h = 0; h < view.sizes[2]; ++h)
          for (std::int64_t e = 0; e < view.sizes[3]; ++e)
            detail::store_float(buf.bytes.data(), view.dtype,
                                page * view.strides[0] + row * view.strides[1] + h * view.strides[2] + e,
                                std::numeric_limits<float>::quiet_NaN());
      }
  }
}

void Workload::set_cache_args(Memory memory, ForwardArgs* a) const {
  const bool device = memory == Memory::device && device_;
  const std::int64_t batch = std::int64_t(cache_seqlens_.size());
  a->kv_cache.seqlens = make_index(device ? device_->cache_seqlens() : cache_seqlens_.data(), batch);
  if (spec_.cache.layout == CacheLayout::paged) {
    const std::int64_t cols = cache_shape_.pages_per_seq;
    a->kv_cache.block_table = {device ? device_->block_table() : block_table_.data(), batch, cols, cols};
  }
  if (has(Tensor::k_new)) {
    a->kv_cache.k_new = view(Tensor::k_new, memory);
    a->kv_cache.v_new = view(Tensor::v_new, memory);
  }
}

TensorRef Workload::view(Tensor t, Memory memory) const {
  TensorRef v = buffers_[int(t)].view;
  if (memory == Memory::device && device_ && v.defined()) v.data = device_->pointer(int(t));
  return v;
}

ForwardArgs Workload::make_forward_args(Memory memory) const {
  const bool device = memory == Memory::device;
  ForwardArgs a;
  a.q = view(Tensor::q, memory);
  a.k = view(Tensor::k, memory);
  a.v = view(Tensor::v, memory);
  a.bias = view(Tensor::bias, memory);
  a.out = view(Tensor::out, memory);
  a.lse = view(Tensor::lse, memory);
  a.mask = spec_.mask;
  a.dropout = spec_.dropout;
  a.scale = spec_.scale;
  a.backend = spec_.backend;
  a.precision = spec_.precision;
  a.overrides = spec_.forward_overrides;
  if (device && device_ && device_->workspace) {
    a.workspace = device_->workspace;
    a.workspace_bytes = device_->workspace_bytes;
  }
  if (spec_.varlen()) {
    const bool dev = device && device_;
    const std::int64_t n = spec_.num_seqs();
    a.varlen.seqstart_q = make_index(dev ? device_->seqstart_q() : seqstart_q_.data(), n + 1);
    a.varlen.seqstart_k = make_index(dev ? device_->seqstart_k() : seqstart_k_.data(), n + 1);
    if (!seqused_k_.empty()) a.varlen.seqused_k = make_index(dev ? device_->seqused_k() : seqused_k_.data(), n);
    if (spec_.varlen_bound_slack >= 0) {
      a.varlen.max_seqlen_q = spec_.max_q();
      a.varlen.max_seqlen_k = spec_.max_k();
    }
  }
  if (spec_.cache.enabled()) set_cache_args(memory, &a);
  return a;
}

Status Workload::reserve_workspace() {
  if (!device_) return Status::Ok();
  std::size_t fwd = 0, bwd = 0;
  if (Status s = forward_workspace_size(make_forward_args(Memory::device), &fwd); !s.ok()) return s;
  if (has(Tensor::dout))
    if (Status s = backward_workspace_size(make_backward_args(Memory::device), &bwd); !s.ok()) return s;
  return device_->allocate_workspace(std::max(fwd, bwd));
}

BackwardArgs Workload::make_backward_args(Memory memory) const {
  const ForwardArgs f = make_forward_args(memory);
  BackwardArgs a;
  static_cast<Options&>(a) = static_cast<const Options&>(f);
  a.overrides = spec_.backward_overrides;
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.bias = f.bias;
  a.out = f.out;
  a.lse = f.lse;
  a.dout = view(Tensor::dout, memory);
  a.dq = view(Tensor::dq, memory);
  a.dk = view(Tensor::dk, memory);
  a.dv = view(Tensor::dv, memory);
  a.dbias = view(Tensor::dbias, memory);
  a.deterministic = spec_.deterministic;
  return a;
}

ForwardArgs Workload::host_forward_args() const {
  ForwardArgs a = make_forward_args(Memory::host);
  a.overrides = {};
  return a;
}

BackwardArgs Workload::host_backward_args() const {
  BackwardArgs a = make_backward_args(Memory::host);
  a.overrides = {};
  return a;
}

void Workload::fill_inputs(std::uint64_t seed) {
  for (Tensor t : {Tensor::q, Tensor::k, Tensor::v, Tensor::bias, Tensor::dout, Tensor::k_new, Tensor::v_new}) {
    Buffer& b = host(t);
    if (!b.view.defined()) continue;
    // Stride-0 views write the same element repeatedly; fill the underlying bytes instead.
    const std::int64_t n = std::int64_t(b.bytes.size() / dtype_size(b.view.dtype));
    const std::uint64_t tseed = mix(seed * 131 + std::uint64_t(t));
#pragma omp parallel for schedule(static)
    for (std::int64_t e = 0; e < n; ++e) detail::store_float(b.bytes.data(), b.view.dtype, e, normal(tseed, std::uint64_t(e)));
  }
  if (spec_.cache.enabled()) poison_unused_slots();
  if (device_) copy_inputs_to_device();
}

void Workload::poison_outputs() {
  for (Tensor t : {Tensor::out, Tensor::lse, Tensor::dq, Tensor::dk, Tensor::dv, Tensor::dbias}) {
    Buffer& b = host(t);
    if (!b.view.defined()) continue;
    const std::int64_t n = std::int64_t(b.bytes.size() / dtype_size(b.view.dtype));
#pragma omp parallel for schedule(static)
    for (std::int64_t e = 0; e < n; ++e)
      detail::store_float(b.bytes.data(), b.view.dtype, e, std::numeric_limits<float>::quiet_NaN());
    if (device_) device_->upload(int(t), b.bytes.data(), b.bytes.size());
  }
}

std::vector<double> Workload::to_double(Tensor t) const {
  const Buffer& b = host(t);
  std::vector<double> out(std::size_t(b.view.numel()));
  for_each_element(b.view, [&](std::int64_t off, std::int64_t e) {
    out[std::size_t(e)] = detail::load_double(b.bytes.data(), b.view.dtype, off);
  });
  return out;
}

std::vector<double> Workload::to_double_reduced(Tensor t) const {
  const Buffer& b = host(t);
  TensorRef v = b.view;
  for (int d = 0; d < v.rank; ++d)
    if (v.strides[d] == 0) v.sizes[d] = 1;
  std::vector<double> out(std::size_t(v.numel()));
  for_each_element(v, [&](std::int64_t off, std::int64_t e) {
    out[std::size_t(e)] = detail::load_double(b.bytes.data(), v.dtype, off);
  });
  return out;
}

void Workload::set_values(Tensor t, const std::vector<double>& values) {
  Buffer& b = host(t);
  for_each_element(b.view, [&](std::int64_t off, std::int64_t e) {
    detail::store_double(b.bytes.data(), b.view.dtype, off, values[std::size_t(e)]);
  });
}

Status time_call(bool on_device, const std::function<Status()>& fn, double* ms) {
  if (on_device) return Workload::Device::time_call(fn, ms);
  const auto start = std::chrono::steady_clock::now();
  const Status s = fn();
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return s;
}

Status time_graph(const std::function<Status(void* stream)>& call, int iters, std::vector<double>* ms) {
  return Workload::Device::time_graph(call, iters, ms);
}

double device_memory_in_use() { return Workload::Device::memory_in_use(); }

Status Workload::to_device() {
  if (device_) return Status::Ok();
  std::unique_ptr<Device> dev;
  if (Status s = Device::create(&dev); !s.ok()) return s;
  std::size_t needed = 0;
  for (const Buffer& b : buffers_) needed += b.bytes.size();
  for (const auto* a : {&seqstart_q_, &seqstart_k_, &seqused_k_, &cache_seqlens_, &block_table_})
    needed += a->size() * sizeof(std::int32_t);
  if (Status s = Device::check_free(needed); !s.ok()) return s;
  for (int t = 0; t < int(Tensor::count); ++t)
    if (buffers_[t].view.defined())
      if (Status s = dev->allocate(t, buffers_[t].bytes.size()); !s.ok()) return s;
  if (Status s = dev->set_varlen(seqstart_q_, seqstart_k_, seqused_k_); !s.ok()) return s;
  if (Status s = dev->set_cache(cache_seqlens_, block_table_); !s.ok()) return s;
  device_ = std::move(dev);
  if (Status s = copy_inputs_to_device(); !s.ok()) return s;
  for (Tensor t : {Tensor::out, Tensor::lse, Tensor::dq, Tensor::dk, Tensor::dv, Tensor::dbias})
    if (has(t))
      if (Status s = device_->upload(int(t), host(t).bytes.data(), host(t).bytes.size()); !s.ok()) return s;
  return Status::Ok();
}

Status Workload::copy_inputs_to_device() {
  if (!device_) return Status::Ok();
  for (Tensor t : {Tensor::q, Tensor::k, Tensor::v, Tensor::bias, Tensor::dout, Tensor::k_new, Tensor::v_new})
    if (has(t))
      if (Status s = device_->upload(int(t), host(t).bytes.data(), host(t).bytes.size()); !s.ok()) return s;
  return Status::Ok();
}

Status Workload::copy_outputs_to_host() {
  if (!device_) return Status::Ok();
  for (Tensor t : {Tensor::out, Tensor::lse, Tensor::dq, Tensor::dk, Tensor::dv, Tensor::dbias})
    if (has(t))
      if (Status s = device_->download(int(t), host(t).bytes.data(), host(t).bytes.size()); !s.ok()) return s;
  if (spec_.cache.enabled())
    for (Tensor t : {Tensor::k, Tensor::v})
      if (Status s = device_->download(int(t), host(t).bytes.data(), host(t).bytes.size()); !s.ok()) return s;
  return Status::Ok();
}

std::size_t Workload::host_bytes() const {
  std::size_t n = 0;
  for (const Buffer& b : buffers_) n += b.bytes.size();
  return n;
}

std::size_t Workload::device_bytes() const { return device_ ? host_bytes() : 0; }

ErrorStats compare(const std::vector<double>& x, const std::vector<double>& ref) {
  ErrorStats st;
  double diff2 = 0, ref2 = 0;
  for (std::size_t e = 0; e < ref.size() && e < x.size(); ++e) {
    const double r = ref[e], v = x[e];
    if (std::isnan(r)) continue;
    ++st.compared;
    if (std::isinf(r) || std::isinf(v) || std::isnan(v)) {
      if (v != r) ++st.bad;
      continue;
    }
    const double d = std::abs(v - r);
    st.max_abs = std::max(st.max_abs, d);
    diff2 += d * d;
    ref2 += r * r;
  }
  if (x.size() != ref.size()) st.bad += std::int64_t(std::max(x.size(), ref.size()) - std::min(x.size(), ref.size()));
  st.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return st;
}

double output_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-5;
    case DType::f16: return 3e-3;
    case DType::bf16: return 2e-2;
  }
  return 0;
}

std::string format_bytes(double bytes) {
  std::ostringstream s;
  s.precision(3);
  if (bytes >= 1 << 30) s << bytes / double(1 << 30) << " GiB";
  else if (bytes >= 1 << 20) s << bytes / double(1 << 20) << " MiB";
  else if (bytes >= 1 << 10) s << bytes / double(1 << 10) << " KiB";
  else s << bytes << " B";
  return s.str();
}

}  // namespace memattn::tools
