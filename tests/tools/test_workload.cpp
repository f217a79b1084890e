// The tests' and the CLI's workloads (tools/workload/workload.cpp): inputs are fresh random
// normals (never zeros) drawn from the seed alone, outputs poisoned with NaN, compare() counts
// unwritten elements and wrong infinities, and the tolerances are DESIGN.md §3's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::tools {
namespace {

constexpr Tensor kInputs[] = {Tensor::q, Tensor::k, Tensor::v, Tensor::bias, Tensor::dout};
constexpr Tensor kOutputs[] = {Tensor::out, Tensor::lse, Tensor::dq, Tensor::dk, Tensor::dv, Tensor::dbias};

ProblemSpec spec(DType dtype) {
  ProblemSpec s;
  s.batch = 2;
  s.seqlen_q = 70;
  s.seqlen_k = 90;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = 40;
  s.head_dim_v = 24;
  s.dtype = dtype;
  s.bias = bias_pattern(BiasKind::dense);
  s.padding = 2;
  s.backend = Backend::cpu;
  return s;
}

// Every element of the buffer's memory (padding included), as double.
std::vector<double> memory_of(const Buffer& b) {
  const std::size_t n = b.bytes.size() / dtype_size(b.view.dtype);
  std::vector<double> out(n);
  for (std::size_t e = 0; e < n; ++e) {
    switch (b.view.dtype) {
      case DType::f32: out[e] = reinterpret_cast<const float*>(b.bytes.data())[e]; break;
      case DType::f64: out[e] = reinterpret_cast<const double*>(b.bytes.data())[e]; break;
      default: {
        std::uint16_t h;
        std::memcpy(&h, b.bytes.data() + 2 * e, 2);
        // NaN in both 16-bit formats: exponent all ones, mantissa non-zero.
        const bool nan = b.view.dtype == DType::f16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        out[e] = nan ? std::numeric_limits<double>::quiet_NaN() : (h & 0x7fff) == 0 ? 0.0 : 1.0;  // zero or not
      }
    }
  }
  return out;
}

TEST(Workload, InputsAreFreshRandomNormalsNeverZeros) {
  const std::uint64_t seed = memattn::testing::next_seed();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    Workload w(spec(dtype)), same(spec(dtype)), other(spec(dtype));
    w.fill_inputs(seed);
    same.fill_inputs(seed);
    other.fill_inputs(seed + 1);
    for (Tensor t : kInputs) {
      SCOPED_TRACE(to_string(t));
      ASSERT_TRUE(w.has(t));
      const std::vector<double> x = w.to_double(t);
      double sum = 0, sum2 = 0;
      std::int64_t zeros = 0, finite = 0;
      for (double v : x) {
        zeros += v == 0;
        finite += std::isfinite(v);
        sum += v;
        sum2 += v * v;
      }
      const double n = double(x.size());
      EXPECT_EQ(zeros, 0);
      EXPECT_EQ(finite, std::int64_t(x.size()));
      EXPECT_NEAR(sum / n, 0.0, 6 / std::sqrt(n)) << "mean of a standard normal";
      EXPECT_NEAR(sum2 / n, 1.0, 0.1) << "variance of a standard normal";
      EXPECT_EQ(w.host(t).bytes, same.host(t).bytes) << "the same seed draws the same inputs";
      const std::vector<double> y = other.to_double(t);
      std::int64_t equal = 0;
      for (std::size_t e = 0; e < x.size(); ++e) equal += x[e] == y[e];
      EXPECT_LT(equal, std::int64_t(x.size()) / 50) << "another seed draws other inputs";
    }
    const std::vector<double> q = w.to_double(Tensor::q), k = w.to_double(Tensor::k);
    std::int64_t equal = 0;
    for (std::size_t e = 0; e < std::min(q.size(), k.size()); ++e) equal += q[e] == k[e];
    EXPECT_LT(equal, std::int64_t(k.size()) / 50) << "each tensor draws its own stream";
  }
}

TEST(Workload, PoisonFillsEveryOutputWithNaN) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    Workload w(spec(dtype));
    w.fill_inputs(memattn::testing::next_seed());
    w.poison_outputs();
    for (Tensor t : kOutputs) {
      ASSERT_TRUE(w.has(t)) << to_string(t);
      const std::vector<double> memory = memory_of(w.host(t));
      ASSERT_FALSE(memory.empty());
      for (std::size_t e = 0; e < memory.size(); ++e) ASSERT_TRUE(std::isnan(memory[e])) << to_string(t) << " element " << e;
    }
    for (Tensor t : kInputs)
      for (double v : memory_of(w.host(t))) ASSERT_FALSE(std::isnan(v)) << "poison reached input " << to_string(t);
  }
}

TEST(Workload, CompareCountsUnwrittenElementsAndWrongInfinities) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const ErrorStats exact = compare({1, -2, 3}, {1, -2, 3});
  EXPECT_EQ(exact.bad, 0);
  EXPECT_EQ(exact.compared, 3);
  EXPECT_EQ(exact.rel_l2, 0.0);
  EXPECT_TRUE(exact.ok(0.0));
  const ErrorStats off = compare({3, 0}, {3, 4});  // ||(0, 4)|| / ||(3, 4)||
  EXPECT_DOUBLE_EQ(off.rel_l2, 0.8);
  EXPECT_DOUBLE_EQ(off.max_abs, 4.0);
  EXPECT_FALSE(off.ok(0.5));
  EXPECT_TRUE(off.ok(0.8));
  EXPECT_EQ(compare({nan, 2}, {1, 2}).bad, 1) << "NaN where the reference has a number: unwritten";
  EXPECT_EQ(compare({nan, 2}, {nan, 2}).compared, 1) << "NaN in the reference: not written, skipped";
  EXPECT_EQ(compare({-inf, 2}, {-inf, 2}).bad, 0) << "fully masked rows: LSE -inf both sides";
  EXPECT_EQ(compare({5, 2}, {-inf, 2}).bad, 1);
  EXPECT_EQ(compare({inf, 2}, {-inf, 2}).bad, 1);
  EXPECT_EQ(compare({1, 2}, {1, 2, 3}).bad, 1) << "a missing element";
  EXPECT_FALSE(compare({nan}, {1}).ok(1e9));
}

TEST(Workload, TolerancesAreTheDesignsLimits) {
  EXPECT_EQ(output_tolerance(DType::f32), 1e-5);
  EXPECT_EQ(output_tolerance(DType::f16), 3e-3);
  EXPECT_EQ(output_tolerance(DType::bf16), 2e-2);
}

TEST(Workload, BiasKindsRoundTripTheirNames) {
  for (BiasKind k : {BiasKind::none, BiasKind::dense, BiasKind::broadcast_batch, BiasKind::broadcast_heads, BiasKind::row}) {
    BiasKind parsed = BiasKind::none;
    ASSERT_TRUE(parse_bias_kind(to_string(k), &parsed)) << to_string(k);
    EXPECT_EQ(parsed, k);
  }
  BiasKind parsed;
  EXPECT_FALSE(parse_bias_kind("diagonal", &parsed));
  EXPECT_FALSE(bias_pattern(BiasKind::none).has_value());
  EXPECT_EQ(*bias_pattern(BiasKind::broadcast_heads), (BiasPattern{false, true, false, false}));
  EXPECT_EQ(describe_bias(BiasPattern{true, false, true, false}), "[1, Hq, 1, Mk]");
}

// set_values writes contiguous values into a padded tensor, rounded to its dtype; to_double reads
// them back in the same order, and to_double_reduced takes a stride-0 dimension once.
TEST(Workload, ValuesGoInAndComeOutInContiguousOrder) {
  ProblemSpec s = spec(DType::bf16);
  s.bias = BiasPattern{false, true, false, false};
  s.bias_expanded = true;
  Workload w(s);
  const std::int64_t n = w.host(Tensor::q).view.numel();
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t e = 0; e < n; ++e) values[std::size_t(e)] = double(e % 251) - 125.0;  // exact in bf16
  w.set_values(Tensor::q, values);
  EXPECT_EQ(w.to_double(Tensor::q), values);
  const TensorRef bias = w.host(Tensor::bias).view;
  EXPECT_EQ(bias.sizes[1], s.heads_q);
  EXPECT_EQ(bias.strides[1], 0);
  w.fill_inputs(memattn::testing::next_seed());
  const std::vector<double> full = w.to_double(Tensor::bias), reduced = w.to_double_reduced(Tensor::bias);
  ASSERT_EQ(std::int64_t(reduced.size()), bias.numel() / s.heads_q);
  const std::int64_t per_head = s.seqlen_q * s.seqlen_k;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h)
      for (std::int64_t e = 0; e < per_head; e += 97)
        ASSERT_EQ(full[std::size_t((b * s.heads_q + h) * per_head + e)], reduced[std::size_t(b * per_head + e)]);
}

// Issue 30 (#10): the CLI refuses problems that cannot fit from workload_bytes, computed before
// allocating; it must be exactly what the constructor allocates, and an overflow must be seen.
TEST(Workload, BytesBeforeAllocationMatchTheBuffers) {
  std::vector<ProblemSpec> specs;
  for (DType dt : {DType::f32, DType::f16}) specs.push_back(spec(dt));
  specs[0].bias = bias_pattern(BiasKind::broadcast_heads);
  specs[0].padding = 3;
  specs[1].bias = bias_pattern(BiasKind::dense);
  specs[1].bias_f32 = true;
  specs[1].kv_broadcast_batch = true;
  ProblemSpec v = spec(DType::bf16);
  v.varlen_q = {5, 0, 17};
  v.varlen_k = {9, 4, 1};
  v.bias = bias_pattern(BiasKind::row);
  v.with_dbias = false;
  v.with_lse = false;
  specs.push_back(v);
  for (const ProblemSpec& s : specs) {
    std::int64_t bytes = -1;
    ASSERT_TRUE(workload_bytes(s, &bytes)) << s.describe();
    EXPECT_EQ(bytes, std::int64_t(Workload(s).host_bytes())) << s.describe();
  }
  ProblemSpec huge = spec(DType::f32);
  huge.seqlen_k = std::int64_t(1) << 60;
  std::int64_t bytes = -1;
  EXPECT_FALSE(workload_bytes(huge, &bytes));
  huge = spec(DType::f32);
  huge.batch = std::numeric_limits<std::int64_t>::max();
  EXPECT_FALSE(workload_bytes(huge, &bytes));
  EXPECT_EQ(bytes, -1);
}

ProblemSpec cache_spec(CacheLayout layout, std::int64_t page_size) {
  ProblemSpec s = spec(DType::f32);
  s.batch = 3;
  s.seqlen_q = 4;
  s.seqlen_k = 0;  // the Workload sets it: cache_len + new_keys
  s.bias.reset();
  s.padding = 0;
  s.mask = Mask::causal(Alignment::bottom_right);
  s.cache = {layout, page_size, 30, 4};
  return s;
}

// A KV cache's workload: k and v are the cache tensors and there are no backward tensors; every
// cached position has a slot of its own, those slots hold numbers and every other slot NaN (so a
// kernel that reads one shows it); a paged cache's block table lists distinct pages, not in order.
TEST(Workload, KvCacheSlotsAndPages) {
  const std::uint64_t seed = memattn::testing::next_seed();
  for (const auto& [layout, page] : {std::pair{CacheLayout::paged, std::int64_t(7)}, std::pair{CacheLayout::paged, std::int64_t(1)},
                                     std::pair{CacheLayout::paged, std::int64_t(100)}, std::pair{CacheLayout::contiguous, std::int64_t(0)}}) {
    SCOPED_TRACE(std::string(to_string(layout)) + ", page size " + std::to_string(page));
    const ProblemSpec s = cache_spec(layout, page);
    Workload w(s);
    EXPECT_EQ(w.spec().seqlen_k, 34);
    for (Tensor t : {Tensor::dout, Tensor::dq, Tensor::dk, Tensor::dv}) EXPECT_FALSE(w.has(t)) << to_string(t);
    ASSERT_TRUE(w.has(Tensor::k_new) && w.has(Tensor::v_new));
    EXPECT_EQ(w.host(Tensor::k_new).view.sizes[1], 4);
    w.fill_inputs(seed);
    const TensorRef& k = w.host(Tensor::k).view;
    const std::int64_t rows = k.sizes[0], cols = k.sizes[1], width = k.sizes[2] * k.sizes[3];
    std::vector<int> held(std::size_t(rows * cols), 0);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t j = 0; j < 34; ++j) {
        const auto [p, r] = w.cache_slot(b, j);
        ASSERT_TRUE(p >= 0 && p < rows && r >= 0 && r < cols) << "sequence " << b << ", position " << j;
        EXPECT_EQ(held[std::size_t(p * cols + r)]++, 0) << "two positions share page " << p << ", row " << r;
        if (j >= 30) held[std::size_t(p * cols + r)] = -1;  // a new key's slot: NaN until the append
      }
    const std::vector<double> values = w.to_double(Tensor::k);
    for (std::int64_t slot = 0; slot < rows * cols; ++slot)
      for (std::int64_t e = 0; e < width; ++e)
        ASSERT_EQ(std::isnan(values[std::size_t(slot * width + e)]), held[std::size_t(slot)] != 1) << "slot " << slot;
    if (layout == CacheLayout::paged) {
      const std::vector<std::int32_t>& table = w.block_table();
      const std::int64_t pages_per_seq = (34 + page - 1) / page;
      ASSERT_EQ(std::int64_t(table.size()), s.batch * pages_per_seq);
      EXPECT_EQ(rows, s.batch * pages_per_seq + 1) << "one spare page";
      std::vector<std::int32_t> sorted = table;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a page listed twice";
      bool identity = true;
      for (std::size_t i = 0; i < table.size(); ++i) identity = identity && table[i] == std::int32_t(i);
      EXPECT_FALSE(identity);
    } else {
      EXPECT_EQ(rows, s.batch);
      EXPECT_EQ(cols, 34);
    }
    const Status valid = validate(w.forward_args());
    EXPECT_TRUE(valid.ok()) << valid.to_string();
    std::int64_t bytes = -1;
    ASSERT_TRUE(workload_bytes(s, &bytes));
    EXPECT_EQ(bytes, std::int64_t(w.host_bytes()));
  }
  // One sequence in one page: of two pages, the shuffle may list page 0, which is shifted.
  ProblemSpec one = cache_spec(CacheLayout::paged, 64);
  one.batch = 1;
  EXPECT_EQ(Workload(one).block_table(), (std::vector<std::int32_t>{1}));
}

TEST(Workload, KvCacheBytesBeforeAllocation) {
  ProblemSpec padded = cache_spec(CacheLayout::paged, 5);
  padded.padding = 3;
  padded.dtype = DType::bf16;
  ProblemSpec no_new = cache_spec(CacheLayout::contiguous, 0);
  no_new.cache.new_keys = 0;
  for (const ProblemSpec& s : {padded, no_new}) {
    std::int64_t bytes = -1;
    ASSERT_TRUE(workload_bytes(s, &bytes)) << s.describe();
    Workload w(s);
    EXPECT_EQ(bytes, std::int64_t(w.host_bytes())) << s.describe();
    EXPECT_EQ(w.has(Tensor::k_new), s.cache.new_keys > 0);
  }
  // Pages past what int32 block-table entries name, and lengths that overflow, are refused.
  ProblemSpec many = cache_spec(CacheLayout::paged, 1);
  many.cache.cache_len = std::int64_t(1) << 30;
  std::int64_t bytes = -1;
  EXPECT_FALSE(workload_bytes(many, &bytes));
  many.cache.cache_len = std::numeric_limits<std::int64_t>::max();
  EXPECT_FALSE(workload_bytes(many, &bytes));
  EXPECT_EQ(bytes, -1);
}

}  // namespace
}  // namespace memattn::tools
