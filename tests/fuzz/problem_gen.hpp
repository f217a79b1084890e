// Turns fuzz bytes into one attention call's arguments: shapes, strides, dtypes, pointers,
// variable lengths, mask, bias, dropout, scale and workspace, mostly valid and small, sometimes
// hostile (negative, huge or overflowing sizes and strides, invalid enum values, null pointers,
// malformed sequence offsets), for the API fuzz target (fuzz_api.cpp).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/buffers.hpp"
#include "memattn/attention.hpp"

namespace memattn::fuzz {

// The largest tensor (in elements) the target backs with memory, and the most work
// (B * Hq * Mq * Mk * (D + Dv)) it runs: beyond either, calls stop at validation.
constexpr std::int64_t kMaxElements = 1 << 14;
constexpr double kMaxWork = double(1 << 16);

// Sizes, strides and window bounds that must be refused or that stress overflow checks.
constexpr std::int64_t kHostile[] = {-1,
                                     -2,
                                     -65536,
                                     std::numeric_limits<std::int64_t>::min(),
                                     std::numeric_limits<std::int64_t>::max(),
                                     std::numeric_limits<std::int64_t>::max() - 1,
                                     std::int64_t(1) << 31,
                                     (std::int64_t(1) << 31) - 1,
                                     std::int64_t(1) << 32,
                                     std::int64_t(1) << 40,
                                     std::int64_t(1) << 62,
                                     3037000500,  // just above sqrt(2^63): its square overflows
                                     65536,
                                     65537};

inline std::int64_t hostile(FuzzedDataProvider& f) { return f.PickValueInArray(kHostile); }

// A small count, sometimes one that crosses the CPU path's 64-row and 64-key tiles.
inline std::int64_t length(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return 0;
    case 9: return f.ConsumeIntegralInRange<std::int64_t>(60, 140);
    default: return f.ConsumeIntegralInRange<std::int64_t>(1, 9);
  }
}

// One value in 32 replaced by a hostile one.
inline std::int64_t maybe_hostile(FuzzedDataProvider& f, std::int64_t v) {
  return f.ConsumeIntegralInRange<int>(0, 31) == 31 ? hostile(f) : v;
}

struct Dims {
  std::int64_t B, Mq, Mk, Hq, Hk, D, Dv;
};

inline std::int64_t head_dim(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange<int>(0, 15)) {
    case 15: return 0;                                                // refused: D = 0
    case 14: return f.ConsumeIntegralInRange<std::int64_t>(500, 1100);  // the short-tile path (D + Dv > 1024)
    default: return f.ConsumeIntegralInRange<std::int64_t>(1, 72);
  }
}

inline Dims make_dims(FuzzedDataProvider& f) {
  Dims d{};
  d.B = maybe_hostile(f, f.ConsumeIntegralInRange<std::int64_t>(0, 3));
  d.Mq = maybe_hostile(f, length(f));
  d.Mk = maybe_hostile(f, length(f));
  d.Hk = f.ConsumeIntegralInRange<std::int64_t>(0, 3);
  const std::int64_t group = f.ConsumeIntegralInRange<std::int64_t>(1, 3);
  d.Hq = d.Hk * group + (f.ConsumeIntegralInRange<int>(0, 15) == 15 ? 1 : 0);  // sometimes not a multiple
  d.Hq = maybe_hostile(f, d.Hq);
  d.Hk = maybe_hostile(f, d.Hk);
  d.D = maybe_hostile(f, head_dim(f));
  d.Dv = f.ConsumeBool() ? d.D : maybe_hostile(f, head_dim(f));
  return d;
}

inline DType pick_dtype(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange<int>(0, 31)) {
    case 31: return static_cast<DType>(f.PickValueInArray({4, -1, 255, std::numeric_limits<int>::max()}));
    case 30:
    case 29:
    case 28: return DType::f64;  // the reference backend's dtype
    default: return f.PickValueInArray({DType::f32, DType::f16, DType::bf16});
  }
}

// Mostly `like`, sometimes another dtype (a mismatch the library must refuse, or bias's f32).
inline DType dtype_like(FuzzedDataProvider& f, DType like) {
  return f.ConsumeIntegralInRange<int>(0, 31) == 31 ? pick_dtype(f) : like;
}

// a * b + c of non-negative values, saturated at INT64_MAX (huge strides are what the library
// must refuse; this code must not overflow making them).
inline std::int64_t saturating(std::int64_t a, std::int64_t b, std::int64_t c = 0) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return std::numeric_limits<std::int64_t>::max();
  return r;
}

// Strides for a view of the given sizes: the layouts a caller may hand over (contiguous, padded,
// permuted, broadcast with stride 0, overlapping) and malformed ones (last stride not 1, negative
// or huge strides).
inline void make_strides(FuzzedDataProvider& f, TensorRef* t) {
  const int r = t->rank;
  std::int64_t inner = 1;
  const int mode = f.ConsumeIntegralInRange<int>(0, 15);
  if (mode == 10 || mode == 11) {  // permuted: dims 0..r-2 in a random physical order, last innermost
    int order[4] = {0, 1, 2, 3};
    for (int i = r - 2; i > 0; --i) std::swap(order[i], order[f.ConsumeIntegralInRange<int>(0, i)]);
    t->strides[r - 1] = 1;
    inner = std::max<std::int64_t>(t->sizes[r - 1], 1);  // sizes may be negative: refused later
    for (int i = r - 2; i >= 0; --i) {
      t->strides[order[i]] = inner;
      inner = saturating(inner, std::max<std::int64_t>(t->sizes[order[i]], 1));
    }
    return;
  }
  for (int d = r - 1; d >= 0; --d) {  // row-major, padded after each row in modes 8 and 9
    t->strides[d] = inner;
    const std::int64_t pad = (mode == 8 || mode == 9) && d > 0 ? f.ConsumeIntegralInRange<std::int64_t>(0, 3) : 0;
    inner = saturating(inner, std::max<std::int64_t>(t->sizes[d], 1), pad);
  }
  switch (mode) {
    case 12:  // broadcast: stride 0 on some dimensions (an input's expand; an output must be refused)
      for (int d = 0; d < r - 1; ++d)
        if (f.ConsumeBool()) t->strides[d] = 0;
      break;
    case 13: {  // overlapping rows
      const int d = f.ConsumeIntegralInRange<int>(0, std::max(r - 2, 0));
      if (r > 1) t->strides[d] = f.ConsumeIntegralInRange<std::int64_t>(0, std::max<std::int64_t>(t->strides[d] - 1, 0));
      break;
    }
    case 14:  // the last dimension not contiguous
      t->strides[r - 1] = f.PickValueInArray<std::int64_t>({0, 2, -1});
      break;
    case 15: {  // one stride anything
      const int d = f.ConsumeIntegralInRange<int>(0, r - 1);
      t->strides[d] = f.ConsumeBool() ? hostile(f) : f.ConsumeIntegralInRange<std::int64_t>(-3, 300);
      break;
    }
    default: break;
  }
}

// A tensor argument of rank 3 or 4: sizes (sometimes one of them wrong), strides, dtype, and
// malformed ranks and null pointers now and then; allocated and pointed at its memory.
inline void make_tensor_arg(FuzzedDataProvider& f, Buffer* b, const char* name, bool output, DType dtype,
                            std::initializer_list<std::int64_t> sizes) {
  b->name = name;
  b->output = output;
  TensorRef& t = b->view;
  t = TensorRef{};
  t.dtype = dtype;
  t.rank = int(sizes.size());
  std::copy(sizes.begin(), sizes.end(), t.sizes);
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31) {  // one size off: a mismatch to refuse
    const int d = f.ConsumeIntegralInRange<int>(0, t.rank - 1);
    t.sizes[d] = f.ConsumeBool() ? hostile(f) : f.ConsumeIntegralInRange<std::int64_t>(0, 10);
  }
  make_strides(f, &t);
  if (f.ConsumeIntegralInRange<int>(0, 63) == 63)
    t.rank = f.PickValueInArray({0, 1, 2, 3, 4, 5, -1, std::numeric_limits<int>::max()});
  const bool null_data = f.ConsumeIntegralInRange<int>(0, 31) == 31;
  // An element offset before the view's first element varies the data pointer's alignment.
  b->allocate(kMaxElements, f.ConsumeIntegralInRange<std::int64_t>(0, 3), null_data);
}

// A 1-D int32 argument (a varlen view) and its memory: the values at index i * stride, and a
// value in every gap that would be read by a library ignoring the stride.
struct Index {
  std::unique_ptr<std::int32_t[]> memory;
  std::int64_t count = 0;  // int32 elements of memory
  IndexRef view;
  bool backed = false;

  void make(const std::vector<std::int32_t>& values, std::int64_t size, std::int64_t stride, bool null_data) {
    view = IndexRef{nullptr, size, stride};
    // Backed: a size the library could accept; any stride >= 0 for fewer than two elements.
    backed = size >= 0 && stride >= 0 && size <= 1024 && (size < 2 || stride <= 64);
    count = !backed ? 1 : size > 0 ? (size - 1) * stride + 1 : 0;  // size 0: no element to read
    // (size 1 with any stride: one element)
    memory.reset(new std::int32_t[std::size_t(count)]);
    for (std::int64_t e = 0; e < count; ++e) memory[std::size_t(e)] = std::numeric_limits<std::int32_t>::min() + 7;
    if (backed)
      for (std::int64_t i = 0; i < size; ++i)
        memory[std::size_t(i * stride)] = i < std::int64_t(values.size()) ? values[std::size_t(i)] : -3;
    view.data = null_data ? nullptr : memory.get();
  }
};

// Variable lengths: the sequences (used by the target's oracle) and their three views.
struct VarlenGen {
  bool enabled = false;
  std::vector<std::int32_t> seqstart_q, seqstart_k, seqused_k;  // as meant (before view mutations)
  Index q, k, used;
  bool has_used = false;
  std::int64_t max_seqlen_q = kUnknownLength, max_seqlen_k = kUnknownLength;  // the bounds given
  std::int64_t total_q = 0, total_k = 0;  // packed rows of q and of k/v
  bool backed() const { return q.backed && k.backed && (!has_used || used.backed); }
};

// Sequence offsets: rows before the first sequence and after the last stay outside every
// sequence; now and then a value is corrupted (decreasing, negative, past the packed rows).
inline void make_varlen(FuzzedDataProvider& f, VarlenGen* g) {
  g->enabled = true;
  const int n = f.ConsumeIntegralInRange<int>(0, 4);
  std::int32_t sq = std::int32_t(f.ConsumeIntegralInRange<int>(0, 2)), sk = std::int32_t(f.ConsumeIntegralInRange<int>(0, 2));
  g->seqstart_q = {sq};
  g->seqstart_k = {sk};
  for (int s = 0; s < n; ++s) {
    const std::int32_t lq = std::int32_t(std::min<std::int64_t>(length(f), 70));
    const std::int32_t lk = std::int32_t(std::min<std::int64_t>(length(f), 70));
    g->seqstart_q.push_back(sq += lq);
    g->seqstart_k.push_back(sk += lk);
    g->seqused_k.push_back(std::int32_t(f.ConsumeIntegralInRange<int>(0, lk)));
  }
  g->total_q = sq + f.ConsumeIntegralInRange<int>(0, 2);
  g->total_k = sk + f.ConsumeIntegralInRange<int>(0, 2);
  g->has_used = f.ConsumeBool();
  const auto corrupt = [&](std::vector<std::int32_t>* v) {
    if (v->empty() || f.ConsumeIntegralInRange<int>(0, 15) != 15) return;
    (*v)[std::size_t(f.ConsumeIntegralInRange<std::size_t>(0, v->size() - 1))] = f.PickValueInArray<std::int32_t>(
        {-1, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(), 0, 1000});
  };
  corrupt(&g->seqstart_q);
  corrupt(&g->seqstart_k);
  corrupt(&g->seqused_k);
  // The views: sizes n + 1, n + 1 and n, strides 1 or wider; sometimes a size, stride or pointer
  // is wrong, or a view missing.
  const auto view = [&](Index* x, const std::vector<std::int32_t>& values) {
    std::int64_t size = std::int64_t(values.size()), stride = f.ConsumeIntegralInRange<int>(0, 7) == 7 ? 3 : 1;
    switch (f.ConsumeIntegralInRange<int>(0, 47)) {
      case 47: size = f.PickValueInArray<std::int64_t>({0, -1, size - 1, size + 1, std::int64_t(1) << 40}); break;
      case 46: stride = f.PickValueInArray<std::int64_t>({0, -1, std::int64_t(1) << 62}); break;
      default: break;
    }
    x->make(values, size, stride, f.ConsumeIntegralInRange<int>(0, 47) == 47);
  };
  view(&g->q, g->seqstart_q);
  view(&g->k, g->seqstart_k);
  view(&g->used, g->seqused_k);
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31) g->q.make({}, 0, 1, true);  // seqstart_q missing
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31) g->k.make({}, 0, 1, true);  // seqstart_k missing
  // Length bounds, now and then: around the longest lengths, below them, or not a length at all.
  const auto bound = [&](std::int64_t longest) {
    if (f.ConsumeIntegralInRange<int>(0, 3) != 3) return kUnknownLength;
    return longest + f.PickValueInArray<std::int64_t>({-1, 0, 0, 5, std::numeric_limits<std::int32_t>::max()});
  };
  std::int64_t longest_q = 0, longest_k = 0;
  for (std::size_t s = 0; s + 1 < g->seqstart_q.size(); ++s) {
    longest_q = std::max<std::int64_t>(longest_q, std::int64_t(g->seqstart_q[s + 1]) - g->seqstart_q[s]);
    longest_k = std::max<std::int64_t>(longest_k, std::int64_t(g->seqstart_k[s + 1]) - g->seqstart_k[s]);
  }
  g->max_seqlen_q = bound(longest_q);
  g->max_seqlen_k = bound(longest_k);
  if (f.ConsumeIntegralInRange<int>(0, 63) == 63) g->max_seqlen_q = -7;
}

inline void apply_varlen(const VarlenGen& g, Options* o) {
  if (!g.enabled) return;
  o->varlen.seqstart_q = g.q.view;
  o->varlen.seqstart_k = g.k.view;
  if (g.has_used) o->varlen.seqused_k = g.used.view;
  o->varlen.max_seqlen_q = g.max_seqlen_q;
  o->varlen.max_seqlen_k = g.max_seqlen_k;
}

// Mask, dropout, scale, backend, precision and overrides: mostly valid, sometimes not.
inline std::int64_t window(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
    case 1:
    case 2: return kUnbounded;
    case 3: return hostile(f);
    default: return f.ConsumeIntegralInRange<std::int64_t>(0, 70);
  }
}

inline void make_options(FuzzedDataProvider& f, Options* o) {
  o->mask.window_left = window(f);
  o->mask.window_right = window(f);
  o->mask.alignment = f.ConsumeIntegralInRange<int>(0, 63) == 63
                          ? static_cast<Alignment>(f.PickValueInArray({2, -1, 1000}))
                          : (f.ConsumeBool() ? Alignment::bottom_right : Alignment::top_left);
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
    case 1:
    case 2: o->dropout.p = 0.0; break;
    case 3: o->dropout.p = f.PickValueInArray({1.0, 1.5, -0.1, -0.0, kNaN, kInf, -kInf, 1e-300, 0.999999, 0.9999999999}); break;
    default: o->dropout.p = f.ConsumeProbability<double>() * 0.95; break;
  }
  o->dropout.seed = f.ConsumeIntegral<std::uint64_t>();
  o->dropout.offset = f.ConsumeIntegralInRange<int>(0, 15) == 15 ? f.ConsumeIntegral<std::uint64_t>()
                                                                : f.ConsumeIntegralInRange<std::uint64_t>(0, 1000);
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
    case 1:
    case 2: o->scale.reset(); break;
    case 3:
      o->scale = f.PickValueInArray({0.0, -0.0, kNaN, kInf, -kInf, 1e308, -1e308, 1e-308, 5e-324, 1e30, 3.5e38});
      break;
    default: o->scale = (f.ConsumeProbability<double>() - 0.5) * 8.0; break;
  }
  switch (f.ConsumeIntegralInRange<int>(0, 31)) {
    case 31: o->backend = static_cast<Backend>(f.PickValueInArray({4, -1, 1000})); break;  // not a Backend
    case 30:
    case 15: o->backend = Backend::cuda; break;  // a CPU-only build refuses it
    case 0:
    case 1:
    case 2:
    case 3: o->backend = Backend::automatic; break;
    case 5:
    case 6:
    case 7:
    case 8:
    case 9: o->backend = Backend::reference; break;
    default: o->backend = Backend::cpu; break;
  }
  switch (f.ConsumeIntegralInRange<int>(0, 15)) {
    case 15: o->precision = static_cast<Precision>(f.PickValueInArray({3, -1, 1000})); break;  // not a Precision
    case 14: o->precision = Precision::tf32x3; break;
    case 13: o->precision = Precision::ieee; break;
    default: o->precision = Precision::automatic; break;
  }
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31)
    o->overrides.kernel = f.PickValueInArray<std::string>({"fwd_sm80_bf16_d64_m128n64w4_vec_plain", "bwd_sm80_x", "x", " "});
  o->overrides.l2_sized_groups = f.ConsumeBool();
  o->overrides.split_last_wave = f.ConsumeBool();
}

}  // namespace memattn::fuzz
