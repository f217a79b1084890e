// KV cache calls for the tests (kv_cache.hpp).
#include "support/kv_cache.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/numeric.hpp"
#include "support/seed.hpp"

namespace memattn::testing {

static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void Buffer::set(std::size_t i, float x) {
  if (dtype == DType::f32) {
    std::memcpy(bytes.data() + 4 * i, &x, 4);
  } else {
    const std::uint16_t h = dtype == DType::bf16 ? detail::float_to_bf16(x) : detail::float_to_half(x);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
}

float Buffer::get(std::size_t i) const {
  if (dtype == DType::f32) {
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    return x;
  }
  std::uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return dtype == DType::bf16 ? detail::bits_float(std::uint32_t(h) << 16) : detail::half_to_float(h);
}

Buffer filled(DType dtype, std::size_t n, float value) {
  Buffer b{dtype, std::vector<unsigned char>(n * dtype_size(dtype))};
  for (std::size_t i = 0; i < n; ++i) b.set(i, value);
  return b;
}

static Buffer random(DType dtype, std::size_t n, std::mt19937_64& rng) {
  Buffer b = filled(dtype, n, 0.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

ForwardArgs Call::args(Backend backend) {
  const Shape& s = shape;
  ForwardArgs a;
  a.backend = backend;
  a.mask = s.mask;
  a.q = make_tensor(q.data(), s.dtype, {s.B, s.Mq, s.Hq, s.D});
  const std::int64_t rows = layout == Layout::paged ? num_pages : std::int64_t(k_cache.size()) / (page_size * s.Hk * s.D);
  a.k = make_tensor(k_cache.data(), s.dtype, {rows, page_size, s.Hk, s.D});
  a.v = make_tensor(v_cache.data(), s.dtype, {rows, page_size, s.Hk, s.Dv});
  a.out = make_tensor(out.data(), s.dtype, {s.B, s.Mq, s.Hq, s.Dv});
  a.lse = make_tensor(lse.data(), DType::f32, {s.B, s.Hq, s.Mq});
  a.kv_cache.seqlens = make_index(seqlens.data(), s.B);
  if (layout == Layout::batch_idx) a.kv_cache.batch_idx = make_index(batch_idx.data(), s.B);
  if (layout == Layout::paged) a.kv_cache.block_table = {block_table.data(), s.B, pages_per_seq, pages_per_seq};
  if (s.m_new > 0) {
    a.kv_cache.k_new = make_tensor(k_new.data(), s.dtype, {s.B, s.m_new, s.Hk, s.D});
    a.kv_cache.v_new = make_tensor(v_new.data(), s.dtype, {s.B, s.m_new, s.Hk, s.Dv});
  }
  return a;
}

Contents draw(const Shape& s) {
  std::mt19937_64 rng(testing::next_seed());
  const auto n = [](std::initializer_list<std::int64_t> d) {
    return std::size_t(std::accumulate(d.begin(), d.end(), std::int64_t(1), std::multiplies<>()));
  };
  return {s,
          random(s.dtype, n({s.B, s.Mq, s.Hq, s.D}), rng),
          random(s.dtype, n({s.B, s.capacity, s.Hk, s.D}), rng),
          random(s.dtype, n({s.B, s.capacity, s.Hk, s.Dv}), rng),
          random(s.dtype, n({s.B, s.m_new, s.Hk, s.D}), rng),
          random(s.dtype, n({s.B, s.m_new, s.Hk, s.Dv}), rng)};
}

// Stores `c` in a layout: positions [0, held) of each sequence hold its keys, every other slot NaN.
// Paged: pages of page_size in a shuffled order, with two spare pages; batch_idx: the sequences in
// reversed cache rows, with one spare row.
Call store(const Contents& c, Layout layout, std::int64_t page_size) {
  const Shape& s = c.shape;
  Call call;
  call.shape = s;
  call.layout = layout;
  call.q = c.q;
  call.k_new = c.k_new;
  call.v_new = c.v_new;
  call.seqlens = s.held;
  std::vector<std::int64_t> page_of;  // [B * pages_per_seq]
  if (layout == Layout::paged) {
    call.page_size = page_size;
    call.pages_per_seq = (s.capacity + page_size - 1) / page_size;
    call.num_pages = s.B * call.pages_per_seq + 2;
    std::vector<std::int32_t> order(std::size_t(call.num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(testing::next_seed()));
    call.block_table.assign(order.begin(), order.begin() + s.B * call.pages_per_seq);
    page_of.assign(call.block_table.begin(), call.block_table.end());
  } else {
    call.page_size = s.capacity;
    call.num_pages = layout == Layout::batch_idx ? s.B + 1 : s.B;
    for (std::int64_t b = 0; b < s.B; ++b) {
      const std::int64_t row = layout == Layout::batch_idx ? s.B - 1 - b : b;
      page_of.push_back(row);
      if (layout == Layout::batch_idx) call.batch_idx.push_back(std::int32_t(row));
    }
  }
  const std::size_t slots = std::size_t(call.num_pages * call.page_size * s.Hk);
  call.k_cache = filled(s.dtype, slots * std::size_t(s.D), kNaN);
  call.v_cache = filled(s.dtype, slots * std::size_t(s.Dv), kNaN);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t j = 0; j < s.held[std::size_t(b)]; ++j) {
      const std::int64_t page = page_of[std::size_t(b * call.pages_per_seq + j / call.page_size)];
      const std::int64_t slot = (page * call.page_size + j % call.page_size) * s.Hk;
      for (std::int64_t h = 0; h < s.Hk; ++h) {
        for (std::int64_t e = 0; e < s.D; ++e)
          call.k_cache.set(std::size_t((slot + h) * s.D + e), c.keys.get(std::size_t(((b * s.capacity + j) * s.Hk + h) * s.D + e)));
        for (std::int64_t e = 0; e < s.Dv; ++e)
          call.v_cache.set(std::size_t((slot + h) * s.Dv + e), c.values.get(std::size_t(((b * s.capacity + j) * s.Hk + h) * s.Dv + e)));
      }
    }
  call.out = filled(s.dtype, std::size_t(s.B * s.Mq * s.Hq * s.Dv), kNaN);
  call.lse = filled(DType::f32, std::size_t(s.B * s.Hq * s.Mq), kNaN);
  return call;
}

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 3e-3 : 2e-2; }

// Relative error of `got` against the reference; every element finite (-inf LSE where the
// reference has it).
void expect_close(const Buffer& got, const std::vector<double>& ref, double tol, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double x = got.get(i);
    if (std::isinf(ref[i])) {
      ASSERT_EQ(x, ref[i]) << what << " element " << i;
      continue;
    }
    ASSERT_TRUE(std::isfinite(x)) << what << " element " << i << " = " << x;
    err += (x - ref[i]) * (x - ref[i]);
    norm += ref[i] * ref[i];
  }
  EXPECT_LE(std::sqrt(err), tol * std::sqrt(norm) + 1e-30) << what;
}

// The cache after the call: as before, except the new keys' slots, which hold k_new and v_new.
void expect_appended(const Call& before, const Call& after) {
  const Shape& s = before.shape;
  Buffer k = before.k_cache, v = before.v_cache;
  const std::size_t bytes = dtype_size(s.dtype);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t m = 0; m < s.m_new; ++m) {
      const std::int64_t j = s.held[std::size_t(b)] + m;
      const std::int64_t page = before.layout == Layout::paged
                                    ? before.block_table[std::size_t(b * before.pages_per_seq + j / before.page_size)]
                                    : before.layout == Layout::batch_idx ? before.batch_idx[std::size_t(b)] : b;
      const std::int64_t slot = (page * before.page_size + j % before.page_size) * s.Hk;
      const std::int64_t from = (b * s.m_new + m) * s.Hk;
      std::memcpy(k.bytes.data() + std::size_t(slot * s.D) * bytes, before.k_new.bytes.data() + std::size_t(from * s.D) * bytes,
                  std::size_t(s.Hk * s.D) * bytes);
      std::memcpy(v.bytes.data() + std::size_t(slot * s.Dv) * bytes, before.v_new.bytes.data() + std::size_t(from * s.Dv) * bytes,
                  std::size_t(s.Hk * s.Dv) * bytes);
    }
  EXPECT_TRUE(k.bytes == after.k_cache.bytes) << "k cache after the append";
  EXPECT_TRUE(v.bytes == after.v_cache.bytes) << "v cache after the append";
}

Status run_on_host(Call&, const ForwardArgs& args) { return forward(args); }

Call run_and_check(const Contents& c, Layout layout, std::int64_t page_size, Backend backend, const Runner& run) {
  Call call = store(c, layout, page_size);
  const Call before = call;
  reference::ForwardResult ref;
  const ForwardArgs a = call.args(backend);
  const Status rs = reference::forward(call.args(Backend::reference), &ref);
  EXPECT_TRUE(rs.ok()) << rs.to_string();
  const Status s = run(call, a);
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!s.ok() || !rs.ok()) return call;
  expect_close(call.out, ref.out, tolerance(c.shape.dtype), "out");
  expect_close(call.lse, ref.lse, 1e-5, "lse");
  expect_appended(before, call);
  return call;
}

void check_layouts(const Shape& shape, Backend backend, const std::vector<std::int64_t>& page_sizes, const Runner& run) {
  const Contents c = draw(shape);
  const Call contiguous = run_and_check(c, Layout::contiguous, 0, backend, run);
  std::vector<std::pair<Layout, std::int64_t>> layouts = {{Layout::batch_idx, 0}};
  for (std::int64_t page : page_sizes) layouts.push_back({Layout::paged, page});
  for (const auto& [layout, page] : layouts) {
    SCOPED_TRACE("layout " + std::to_string(int(layout)) + ", page size " + std::to_string(page));
    const Call other = run_and_check(c, layout, page, backend, run);
    // A kernel reads the same values in the same order whatever the layout; a layout that runs
    // on another kernel has matched the reference above.
    if (other.plan != contiguous.plan) continue;
    EXPECT_TRUE(other.out.bytes == contiguous.out.bytes) << "out differs from the contiguous cache's";
    EXPECT_TRUE(other.lse.bytes == contiguous.lse.bytes) << "lse differs from the contiguous cache's";
  }
}

}  // namespace memattn::testing
