// Buffers for the API fuzz target: each tensor argument gets memory of exactly the extent its
// view addresses (so AddressSanitizer's redzones sit right after the last addressable element),
// inputs filled with values, outputs poisoned, and byte snapshots to tell what a call wrote.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memattn/types.hpp"

namespace memattn::fuzz {

// The arguments of the input being run, in words, printed with a failure (a reproducer's recipe).
inline std::string& fuzz_context() {
  static std::string text;
  return text;
}

// Aborts with a message: libFuzzer saves the input that got here.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "\nFUZZ CHECK FAILED: %s\n%s\n", what.c_str(), fuzz_context().c_str());
  std::abort();
}
#define FUZZ_CHECK(cond, msg)                                                                    \
  do {                                                                                           \
    if (!(cond)) ::memattn::fuzz::fail(std::string(#cond) + " (" __FILE__ ":" + std::to_string(__LINE__) + "): " + (msg)); \
  } while (0)

// Bytes per element of a dtype; an invalid enum value (which the library must refuse) gets 8,
// the largest, so that even a library that misread it stays inside the buffer.
inline std::size_t item_bytes(DType dtype) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f32: return 4;
    default: return 8;
  }
}

inline bool valid_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f64;
}

// Elements addressed by a view: the largest offset + 1, or 0 without elements. False when the
// rank is outside [1, 4], a size or stride is negative, or the extent exceeds `limit` (then the
// view cannot be backed by memory and the fuzz target only asks for validation).
inline bool view_extent(const TensorRef& t, std::int64_t limit, std::int64_t* extent) {
  if (t.rank < 1 || t.rank > 4) return false;
  __int128 last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) return false;
    if (t.sizes[d] == 0) {
      *extent = 0;
      return true;
    }
  }
  for (int d = 0; d < t.rank; ++d) {  // each term < 2^126: checked after each, the sum cannot overflow
    last += __int128(t.sizes[d] - 1) * t.strides[d];
    if (last + 1 > limit) return false;
  }
  *extent = std::int64_t(last) + 1;
  return true;
}

// Calls f(index, offset) for every element of a view that view_extent accepted.
inline void for_each_element(const TensorRef& t, const std::function<void(const std::int64_t*, std::int64_t)>& f) {
  std::int64_t idx[4] = {0, 0, 0, 0};
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return;
  for (;;) {
    std::int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides[d];
    f(idx, off);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.sizes[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// True when no two elements of a view share an address, counting the dimensions marked `shared`
// once (dbias's broadcast dimensions receive one summed value).
inline bool distinct_addresses(TensorRef t, const bool* shared) {
  for (int d = 0; d < t.rank; ++d)
    if (shared && shared[d] && t.sizes[d] > 0) t.sizes[d] = 1;
  std::vector<std::int64_t> offsets;
  for_each_element(t, [&](const std::int64_t*, std::int64_t off) { offsets.push_back(off); });
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end();
}

// One tensor argument and the memory behind it.
struct Buffer {
  std::string name;
  bool output = false;
  TensorRef view;        // as handed to the library
  bool backed = false;   // the memory covers every element the view addresses
  std::unique_ptr<unsigned char[]> memory;
  std::size_t bytes = 0;
  std::vector<unsigned char> snapshot;

  // Allocates `pad_elements` before the view's first element plus its extent, exactly (no
  // rounding up), and points the view there; a view that cannot be backed points at a 1-byte
  // block instead (validation must refuse it, or the fuzz target never runs it).
  void allocate(std::int64_t limit, std::int64_t pad_elements, bool null_data) {
    std::int64_t extent = 0;
    backed = view_extent(view, limit, &extent);
    const std::size_t item = item_bytes(view.dtype);
    bytes = backed ? std::size_t(pad_elements + extent) * item : 1;
    memory.reset(new unsigned char[bytes]);
    view.data = null_data ? nullptr : memory.get() + (backed ? std::size_t(pad_elements) * item : 0);
  }
  void take_snapshot() { snapshot.assign(memory.get(), memory.get() + bytes); }
  bool unchanged() const { return std::equal(snapshot.begin(), snapshot.end(), memory.get()); }
  std::int64_t base_offset() const {  // element offset of view.data inside the memory
    return view.data ? (static_cast<unsigned char*>(view.data) - memory.get()) / std::int64_t(item_bytes(view.dtype)) : 0;
  }
  // True when every byte outside the view's elements is as in the snapshot.
  bool unchanged_outside_view() const {
    if (!backed || !view.data) return unchanged();
    std::vector<bool> inside(bytes, false);
    const std::size_t item = item_bytes(view.dtype);
    const std::size_t base = std::size_t(base_offset()) * item;
    for_each_element(view, [&](const std::int64_t*, std::int64_t off) {
      for (std::size_t b = 0; b < item; ++b) inside[base + std::size_t(off) * item + b] = true;
    });
    for (std::size_t b = 0; b < bytes; ++b)
      if (!inside[b] && memory[b] != snapshot[b]) return false;
    return true;
  }
};

}  // namespace memattn::fuzz
