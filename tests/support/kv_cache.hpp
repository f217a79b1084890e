// KV cache calls for the tests (tests/cpu/test_kv_cache.cpp, tests/cuda/test_cuda_kv_cache.cpp):
// the same logical keys stored in a contiguous cache, one with batch_idx, or a paged one (pages
// shuffled), slots that no position uses NaN; a call checked against the float64 reference read
// before the append, and the cache after it against the expected append. Backends run a call
// through a Runner (the CUDA test mirrors the buffers to the device and back).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "memattn/memattn.hpp"

namespace memattn::testing {

enum class Layout { contiguous, batch_idx, paged };

struct Buffer {
  DType dtype = DType::f32;
  std::vector<unsigned char> bytes;
  void* data() { return bytes.data(); }
  std::size_t size() const { return bytes.size() / dtype_size(dtype); }
  void set(std::size_t i, float x);
  float get(std::size_t i) const;
};

Buffer filled(DType dtype, std::size_t n, float value);

// One cache call's sizes, the keys each sequence holds, the new keys, the mask.
struct Shape {
  std::int64_t B = 3, Mq = 1, Hq = 4, Hk = 2, D = 24, Dv = 16, m_new = 0, capacity = 40;
  std::vector<std::int32_t> held = {5, 0, 37};
  DType dtype = DType::f32;
  Mask mask = Mask::causal(Alignment::bottom_right);
};

// A call's host buffers: q, the cache (contiguous rows or pages), new keys, outputs (NaN), indices.
struct Call {
  Shape shape;
  Layout layout = Layout::contiguous;
  std::int64_t page_size = 0, num_pages = 0, pages_per_seq = 1;
  Buffer q, k_cache, v_cache, k_new, v_new, out, lse;
  std::vector<std::int32_t> seqlens, batch_idx, block_table;
  // The plan that ran it (describe_plan's text), where the runner records one: the CUDA backend
  // runs pages shorter than a sequence's capacity on other rows than strided caches.
  std::string plan;

  ForwardArgs args(Backend backend = Backend::cpu);
};

// The logical contents shared by the layouts: q, each sequence's keys and values, the new ones.
struct Contents {
  Shape shape;
  Buffer q, keys, values, k_new, v_new;  // keys: [B, capacity, Hk, D]
};

Contents draw(const Shape& s);  // fresh random values (the running test's next seed)
// `c` in a layout: paged in pages of `page_size`, shuffled, two spare pages; batch_idx: the
// sequences in reversed cache rows, one spare row.
Call store(const Contents& c, Layout layout, std::int64_t page_size = 0);

double tolerance(DType dtype);
// Relative error against the reference (DESIGN.md's limits), every element finite (-inf where the
// reference has it).
void expect_close(const Buffer& got, const std::vector<double>& ref, double tol, const char* what);
// The cache of `after`: that of `before`, changed exactly at the new keys' slots.
void expect_appended(const Call& before, const Call& after);

// Runs a call's forward on its args (a backend's way) and leaves the results in the call's buffers.
using Runner = std::function<Status(Call& call, const ForwardArgs& args)>;
Status run_on_host(Call& call, const ForwardArgs& args);

// One layout: the reference first, then the call; outputs and cache checked. The call's state after.
Call run_and_check(const Contents& c, Layout layout, std::int64_t page_size, Backend backend,
                   const Runner& run = run_on_host);
// Every layout (contiguous; batch_idx; paged by `page_sizes`) on one backend: each checked, and each
// output equal bit for bit to the contiguous cache's.
void check_layouts(const Shape& shape, Backend backend, const std::vector<std::int64_t>& page_sizes,
                   const Runner& run = run_on_host);

}  // namespace memattn::testing
