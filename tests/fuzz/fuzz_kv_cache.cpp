// libFuzzer target over the forward's KV cache (ForwardArgs::kv_cache) on the CPU and reference
// backends: contiguous caches (with or without batch_idx) and paged ones, with lengths, cache
// rows, block-table entries and new keys drawn from the fuzz bytes, hostile values included
// (negative, past capacity, pages out of range, pages and rows shared between sequences).
//
// What must hold for every input, beyond "no crash, no sanitizer report":
//   - the call is accepted exactly when a naive model of the contract accepts it (kv_cache.cpp
//     checks pages one (sequence, page) entry at a time; the model maps every position in use to
//     its slot and looks for a written slot that another position uses);
//   - a refused call is invalid_argument naming a field, and writes no byte of the cache or out;
//   - an accepted one writes k_new/v_new at their slots and nothing else of the cache, and its
//     output matches the float64 reference read from the cache as it was before the call.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "fuzz/buffers.hpp"
#include "memattn/attention.hpp"
#include "memattn/reference.hpp"

namespace memattn::fuzz {
namespace {

enum class Layout { contiguous, batch_idx, paged };

struct Case {
  std::int64_t B = 0, Mq = 0, Hq = 1, Hk = 1, D = 1, Dv = 1, m_new = 0;
  std::int64_t rows = 0, page_size = 0, pages_per_seq = 1;  // cache: [rows, page_size, Hk, D]
  std::int64_t max_seqlen_k = kUnknownLength;
  Layout layout = Layout::contiguous;
  DType dtype = DType::f32;
  Mask mask;
  std::vector<std::int32_t> seqlens, batch_idx, table;
  std::vector<float> q, k, v, k_new, v_new, out, lse;  // values as floats, stored in `dtype` below
  std::vector<unsigned char> qb, kb, vb, knb, vnb, outb, lseb;
};

std::vector<unsigned char> encode(const std::vector<float>& x, DType dtype) {
  std::vector<unsigned char> bytes(x.size() * item_bytes(dtype));
  for (std::size_t i = 0; i < x.size(); ++i) detail::store_double(bytes.data(), dtype, std::int64_t(i), x[i]);
  return bytes;
}

void make_case(FuzzedDataProvider& f, Case* c) {
  c->B = f.ConsumeIntegralInRange<int>(0, 4);
  c->Mq = f.ConsumeIntegralInRange<int>(0, 3);
  c->Hk = f.ConsumeIntegralInRange<int>(1, 2);
  c->Hq = c->Hk * f.ConsumeIntegralInRange<int>(1, 2);
  c->D = f.ConsumeIntegralInRange<int>(1, 9);
  c->Dv = f.ConsumeIntegralInRange<int>(1, 9);
  c->m_new = f.ConsumeIntegralInRange<int>(0, 3);
  c->dtype = f.PickValueInArray({DType::f32, DType::bf16, DType::f16});
  c->layout = f.PickValueInArray({Layout::contiguous, Layout::batch_idx, Layout::paged});
  switch (f.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: c->mask = Mask::none(); break;
    case 1: c->mask = Mask::causal(); break;  // top-left: refused with a cache
    case 2: c->mask = Mask::window(f.ConsumeIntegralInRange<int>(0, 5), 0, Alignment::bottom_right); break;
    default: c->mask = Mask::causal(Alignment::bottom_right);
  }
  if (c->layout == Layout::paged) {
    c->page_size = f.ConsumeIntegralInRange<int>(1, 6);
    c->pages_per_seq = f.ConsumeIntegralInRange<int>(1, 4);
    c->rows = f.ConsumeIntegralInRange<int>(0, 10);
  } else {
    c->page_size = f.ConsumeIntegralInRange<int>(0, 12);
    c->rows = c->layout == Layout::batch_idx ? f.ConsumeIntegralInRange<int>(0, 5) : c->B;
    if (c->layout == Layout::contiguous && f.ConsumeIntegralInRange<int>(0, 15) == 0) c->rows = c->B + 1;
  }
  const std::int64_t capacity = c->page_size * c->pages_per_seq;
  if (f.ConsumeIntegralInRange<int>(0, 3) == 3) c->max_seqlen_k = f.ConsumeIntegralInRange<std::int64_t>(-1, capacity + 1);
  for (std::int64_t b = 0; b < c->B; ++b) {
    // Mostly lengths that fit, now and then one past the capacity or negative.
    const int kind = f.ConsumeIntegralInRange<int>(0, 15);
    const std::int64_t room = std::max<std::int64_t>(0, capacity - c->m_new);
    c->seqlens.push_back(std::int32_t(kind == 0 ? -1 : kind == 1 ? room + 1 : f.ConsumeIntegralInRange<std::int64_t>(0, room)));
    if (c->layout == Layout::batch_idx) c->batch_idx.push_back(f.ConsumeIntegralInRange<int>(-1, int(c->rows)));
    if (c->layout == Layout::paged)
      for (std::int64_t p = 0; p < c->pages_per_seq; ++p)
        c->table.push_back(f.ConsumeIntegralInRange<int>(-1, int(c->rows)));  // -1 and rows: out of range
  }
  const auto values = [&](std::int64_t n) {
    std::vector<float> x(std::size_t(std::max<std::int64_t>(n, 0)));
    for (float& e : x) e = float(f.ConsumeIntegralInRange<int>(-8, 8)) / 8.0f;
    return x;
  };
  c->q = values(c->B * c->Mq * c->Hq * c->D);
  c->k = values(c->rows * c->page_size * c->Hk * c->D);
  c->v = values(c->rows * c->page_size * c->Hk * c->Dv);
  c->k_new = values(c->B * c->m_new * c->Hk * c->D);
  c->v_new = values(c->B * c->m_new * c->Hk * c->Dv);
  c->qb = encode(c->q, c->dtype), c->kb = encode(c->k, c->dtype), c->vb = encode(c->v, c->dtype);
  c->knb = encode(c->k_new, c->dtype), c->vnb = encode(c->v_new, c->dtype);
  c->outb.assign(std::size_t(c->B * c->Mq * c->Hq * c->Dv) * item_bytes(c->dtype), 0xff);  // NaN
  c->lseb.assign(std::size_t(c->B * c->Hq * c->Mq) * 4, 0xff);
}

ForwardArgs args_of(Case& c, Backend backend) {
  ForwardArgs a;
  a.backend = backend;
  a.mask = c.mask;
  const auto ptr = [](std::vector<unsigned char>& b) -> void* { return b.empty() ? nullptr : b.data(); };
  a.q = make_tensor(ptr(c.qb), c.dtype, {c.B, c.Mq, c.Hq, c.D});
  a.k = make_tensor(ptr(c.kb), c.dtype, {c.rows, c.page_size, c.Hk, c.D});
  a.v = make_tensor(ptr(c.vb), c.dtype, {c.rows, c.page_size, c.Hk, c.Dv});
  a.out = make_tensor(ptr(c.outb), c.dtype, {c.B, c.Mq, c.Hq, c.Dv});
  a.lse = make_tensor(ptr(c.lseb), DType::f32, {c.B, c.Hq, c.Mq});
  // A sequence list of size 0 is given through a valid address (a null one would mean "absent").
  static const std::int32_t kNone = 0;
  a.kv_cache.seqlens = {c.seqlens.empty() ? &kNone : c.seqlens.data(), c.B, 1};
  if (c.layout == Layout::batch_idx) a.kv_cache.batch_idx = {c.batch_idx.empty() ? &kNone : c.batch_idx.data(), c.B, 1};
  if (c.layout == Layout::paged)
    a.kv_cache.block_table = {c.table.empty() ? &kNone : c.table.data(), c.B, c.pages_per_seq, c.pages_per_seq};
  a.kv_cache.max_seqlen_k = c.max_seqlen_k;
  if (c.m_new > 0) {
    a.kv_cache.k_new = make_tensor(ptr(c.knb), c.dtype, {c.B, c.m_new, c.Hk, c.D});
    a.kv_cache.v_new = make_tensor(ptr(c.vnb), c.dtype, {c.B, c.m_new, c.Hk, c.Dv});
  }
  return a;
}

// The page (cache row) of position j of sequence b, or -1 where the case gives none.
std::int64_t page_of(const Case& c, std::int64_t b, std::int64_t j) {
  if (c.layout == Layout::paged) return c.table[std::size_t(b * c.pages_per_seq + j / c.page_size)];
  return c.layout == Layout::batch_idx ? c.batch_idx[std::size_t(b)] : b;
}

// The contract, position by position: whether the call must be accepted.
bool model_accepts(const Case& c) {
  if (!c.mask.is_none() && c.mask.alignment != Alignment::bottom_right) return false;
  if (c.layout == Layout::contiguous && c.rows != c.B) return false;
  const std::int64_t capacity = c.page_size * c.pages_per_seq;
  // kv_cache.max_seqlen_k: between the new keys and the capacity, and at least every sequence's keys.
  // (Without sequences k_new has no element, so no address: no new keys.)
  const std::int64_t bound = c.max_seqlen_k, new_keys = c.B > 0 ? c.m_new : 0;
  if (bound != kUnknownLength && (bound < new_keys || bound > capacity)) return false;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<std::int64_t, bool>>> users;  // slot -> (b, written)
  for (std::int64_t b = 0; b < c.B; ++b) {
    const std::int64_t held = c.seqlens[std::size_t(b)];
    if (held < 0 || held + c.m_new > capacity) return false;
    if (bound != kUnknownLength && held + c.m_new > bound) return false;
    for (std::int64_t j = 0; j < held + c.m_new; ++j) {
      const std::int64_t page = page_of(c, b, j);
      if (page < 0 || page >= c.rows) return false;
      users[{page, j % c.page_size}].push_back({b, j >= held});
    }
  }
  for (const auto& [slot, list] : users)
    if (list.size() > 1)
      for (const auto& [b, written] : list)
        if (written) return false;
  return true;
}

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 3e-3 : 2e-2; }

void run(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  Case c;
  make_case(f, &c);
  const Backend backend = f.ConsumeBool() ? Backend::cpu : Backend::reference;
  fuzz_context() = "B " + std::to_string(c.B) + " Mq " + std::to_string(c.Mq) + " layout " +
                   std::to_string(int(c.layout)) + " rows " + std::to_string(c.rows) + " page " +
                   std::to_string(c.page_size) + " x " + std::to_string(c.pages_per_seq) + " new " +
                   std::to_string(c.m_new);
  const bool accept = model_accepts(c);
  ForwardArgs a = args_of(c, backend);
  const Status valid = validate(a);
  FUZZ_CHECK(valid.ok() == accept, "validate disagrees with the model: " + valid.to_string());

  reference::ForwardResult ref;
  if (accept) {
    const Status rs = reference::forward(a, &ref);
    FUZZ_CHECK(rs.ok(), rs.to_string());
  }
  const std::vector<unsigned char> k0 = c.kb, v0 = c.vb, out0 = c.outb;
  const Status s = forward(a);
  if (!accept) {
    FUZZ_CHECK(s.code() == StatusCode::invalid_argument && !s.message().empty(), s.to_string());
    FUZZ_CHECK(s.message() == valid.message(), "forward and validate refuse differently");
    FUZZ_CHECK(c.kb == k0 && c.vb == v0 && c.outb == out0, "a refused call wrote");
    return;
  }
  FUZZ_CHECK(s.ok(), s.to_string());
  // The cache: as before, with the new keys at their slots.
  std::vector<unsigned char> k1 = k0, v1 = v0;
  const std::size_t e = item_bytes(c.dtype);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t m = 0; m < c.m_new; ++m) {
      const std::int64_t j = c.seqlens[std::size_t(b)] + m;
      const std::int64_t slot = (page_of(c, b, j) * c.page_size + j % c.page_size) * c.Hk;
      const std::int64_t from = (b * c.m_new + m) * c.Hk;
      std::memcpy(k1.data() + std::size_t(slot * c.D) * e, c.knb.data() + std::size_t(from * c.D) * e,
                  std::size_t(c.Hk * c.D) * e);
      std::memcpy(v1.data() + std::size_t(slot * c.Dv) * e, c.vnb.data() + std::size_t(from * c.Dv) * e,
                  std::size_t(c.Hk * c.Dv) * e);
    }
  FUZZ_CHECK(c.kb == k1 && c.vb == v1, "the cache after the append");
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    const double x = detail::load_double(c.outb.data(), c.dtype, std::int64_t(i));
    FUZZ_CHECK(std::isfinite(x), "out element " + std::to_string(i) + " not finite");
    err += (x - ref.out[i]) * (x - ref.out[i]);
    norm += ref.out[i] * ref.out[i];
  }
  FUZZ_CHECK(std::sqrt(err) <= tolerance(c.dtype) * std::sqrt(norm) + 1e-6,
             "out against the reference: " + std::to_string(std::sqrt(err)) + " of " + std::to_string(std::sqrt(norm)));
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    float x;
    std::memcpy(&x, c.lseb.data() + 4 * i, 4);
    FUZZ_CHECK(std::isinf(ref.lse[i]) ? x == ref.lse[i] : std::fabs(x - ref.lse[i]) <= 1e-4 * (1 + std::fabs(ref.lse[i])),
               "lse element " + std::to_string(i));
  }
}

}  // namespace
}  // namespace memattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  memattn::fuzz::run(data, size);
  return 0;
}
