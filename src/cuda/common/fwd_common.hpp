// Pieces the forward kernels of both families use: feature flags, typed pointers, rows that see no key.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda {

// How a kernel moves tiles between global and shared memory.
enum class Loads {
  vector16,  // 16-byte cp.async: rows and head dims must be multiples of 8 elements, 16-byte aligned
  element,   // one element per access: any head dim, stride and alignment
};

// Per-launch features, so the common case carries no bias or dropout code. kBiasTile (with kBias)
// reads the bias through a shared-memory tile loaded with 16-byte cp.async, instead of one global
// load per score; it needs a bias with unit column stride and 16-byte aligned rows and pointer.
// kDropoutPaired (with kDropout) shares each Philox call between the lanes of a warp that need its
// words (apply_dropout_rows_paired, dropout_keep_bits); MMA-fragment kernels only. kPagedKV reads
// K and V from a KV cache's pages (paged_kv.hpp), each sequence's key count from the cache.
enum Features : unsigned { kPlain = 0, kBias = 1, kDropout = 2, kBiasTile = 4, kDropoutPaired = 8, kPagedKV = 16 };

// Whether a kernel with these features reads the bias through a shared-memory tile.
constexpr bool tiles_bias(unsigned features) { return (features & kBias) != 0 && (features & kBiasTile) != 0; }

// The bias code a kernel compiles into its score transform: none; per-element reads from global
// memory (any strides); or reads from a SharedBias tile only. A row with a bias tile is only
// given a bias it can tile (the dispatcher's rule), so the per-element path would be dead code in
// its key loop, where it took instruction-cache room and registers.
enum class BiasCode { none, global, tile };
constexpr BiasCode bias_code(unsigned features) {
  return (features & kBias) == 0 ? BiasCode::none : tiles_bias(features) ? BiasCode::tile : BiasCode::global;
}

template <class Element>
__device__ __forceinline__ const Element* element_ptr(const void* base, std::int64_t offset) {
  return static_cast<const Element*>(base) + offset;
}

// Row `row` (of the tensor's row dimension: with variable lengths, the packed row) of head h in
// batch entry b of Q, K, V or the output O, from the tensors' (batch, row, head) strides. (One
// generic helper for these and the backward's do_at/dq_at/dk_at/dv_at changed the forward
// kernel's register allocation, through the order of the pointer additions; they stay spelled
// out so that the generated code is the one measured.)
template <class Element>
__device__ __forceinline__ const Element* q_at(const FwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return element_ptr<Element>(p.q, b * p.q_batch_stride + row * p.q_row_stride + h * p.q_head_stride);
}
template <class Element>
__device__ __forceinline__ const Element* k_at(const FwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return element_ptr<Element>(p.k, b * p.k_batch_stride + row * p.k_row_stride + h * p.k_head_stride);
}
template <class Element>
__device__ __forceinline__ const Element* v_at(const FwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return element_ptr<Element>(p.v, b * p.v_batch_stride + row * p.v_row_stride + h * p.v_head_stride);
}
template <class Element>
__device__ __forceinline__ Element* o_at(const FwdParams& p, std::int64_t b, std::int64_t row, std::int64_t h) {
  return static_cast<Element*>(p.out) + b * p.o_batch_stride + row * p.o_row_stride + h * p.o_head_stride;
}

// Two neighbouring 16-bit elements (lo at the lower address) as one 32-bit word, and back.
template <class Element>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  return std::uint32_t(Element(lo).raw()) | (std::uint32_t(Element(hi).raw()) << 16);
}
template <class Element>
__device__ __forceinline__ float2 unpack_pair(std::uint32_t w) {
  return make_float2(float(Element::bitcast(std::uint16_t(w & 0xffffu))), float(Element::bitcast(std::uint16_t(w >> 16))));
}

// The value unchanged, but opaque to the optimiser: what is derived from it is computed where it
// is used instead of being hoisted out of a loop and kept live (register pressure).
template <class T>
__device__ __forceinline__ T opaque(T v) {
  if constexpr (std::is_pointer_v<T>) {
    asm volatile("" : "+l"(v));
  } else if constexpr (sizeof(T) == 8) {
    asm volatile("" : "+l"(v));
  } else {
    static_assert(sizeof(T) == 4);
    asm volatile("" : "+r"(v));
  }
  return v;
}

// The thread index, opaque as above, with its range restated: with only `int` known the
// compiler divides it by the warp and tile sizes as a signed value (three instructions where
// one does), at every use.
template <int kThreads>
__device__ __forceinline__ int opaque_thread() {
  const int t = opaque(int(threadIdx.x));
  __builtin_assume(t >= 0 && t < kThreads);
  return t;
}

// Writes O = 0 and LSE = -inf for rows that see no key at all: `threads` threads, this one
// `thread` of them.
template <class Element>
__device__ void write_empty_rows(const FwdParams& p, const SequenceInfo& seq, int h, std::int64_t m0, int rows,
                                 int thread, int threads) {
  Element* out = static_cast<Element*>(p.out) + seq.batch * p.o_batch_stride + h * p.o_head_stride;
  for (int e = thread; e < rows * p.head_dim_v; e += threads) {
    const std::int64_t r = m0 + e / p.head_dim_v;
    out[(seq.q_begin + r) * p.o_row_stride + e % p.head_dim_v] = Element(0.0f);
  }
  if (p.lse)
    for (int r = thread; r < rows; r += threads)
      p.lse[seq.batch * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_begin + m0 + r) * p.lse_row_stride] =
          -INFINITY;
}

// The same by every thread of the CTA.
template <class Traits>
__device__ void write_empty_rows(const FwdParams& p, const SequenceInfo& seq, int h, std::int64_t m0, int rows) {
  write_empty_rows<typename Traits::Element>(p, seq, h, m0, rows, int(threadIdx.x), Traits::kThreads);
}

}  // namespace memattn::cuda
