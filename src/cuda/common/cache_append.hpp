// The KV cache's append inside the forward kernel (FwdParams::cache_k_new set): a decode step's
// few new keys and values written into the cache by the CTAs that attend to them, instead of by
// a kernel of their own before the forward (kv_cache.cu), which cost a graph replay ~4 us at
// B 1 / 8k keys. Each CTA writes the new rows inside its key range before it reads them (the
// CTA's barrier orders its threads' stores before their copies), and one CTA per (sequence,
// kv head) writes them all, so that rows no query sees (a left window) reach the cache too.
// Several CTAs may store the same values to the same slot; no CTA reads a slot that it has not
// itself written or that the call does not write.
#pragma once

#include <cute/config.hpp>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/paged_kv.hpp"

namespace memattn::cuda {

// A cache of one page per sequence, in PageLookup's terms: its row `row` holds every position.
struct OneCacheRow {
  std::int64_t row;
  __device__ void locate(int j, std::int64_t* page, int* slot) const {
    *page = row;
    *slot = j;
  }
};

// Positions [lo, hi) of sequence b's new rows (the last cache_new_keys of its k_len keys), of kv
// head hk, copied from k_new and v_new into their slots (`rows`: a PageLookup or a OneCacheRow) by
// the CTA's kThreads threads, 16 bytes at a time (the host fuses only 16-byte rows and pointers).
// Each thread loads kBatch vectors before it stores them: a store could alias a later load, so
// one at a time they would be as many trips to memory (one-warp CTAs took ~4 us a row that way).
template <class Element, int kThreads, class Rows>
__device__ void write_new_rows(const FwdParams& p, int b, int hk, std::int64_t k_len, std::int64_t lo, std::int64_t hi,
                               const Rows& rows) {
  constexpr int kPerVector = 16 / int(sizeof(Element));
  constexpr int kBatch = 4;
  const std::int64_t first = k_len - p.cache_new_keys;
  lo = lo > first ? lo : first;
  hi = hi < k_len ? hi : k_len;
  if (hi <= lo) return;
  const int key_vectors = p.head_dim / kPerVector, row_vectors = key_vectors + p.head_dim_v / kPerVector;
  const int total = int(hi - lo) * row_vectors;  // at most kMaxNewKeysInForward rows
  const Element* from_k = static_cast<const Element*>(p.cache_k_new) + b * p.k_new_batch_stride + hk * p.k_new_head_stride;
  const Element* from_v = static_cast<const Element*>(p.cache_v_new) + b * p.v_new_batch_stride + hk * p.v_new_head_stride;
  // The cache tensors are the forward's k and v, which it otherwise only reads.
  Element* to_k = static_cast<Element*>(const_cast<void*>(p.k)) + hk * p.k_head_stride;
  Element* to_v = static_cast<Element*>(const_cast<void*>(p.v)) + hk * p.v_head_stride;
  // Vector e: row lo + e / row_vectors, then K's vectors of the row and V's.
  const auto source = [&](int e) {
    const std::int64_t m = lo - first + e / row_vectors;
    const int c = e % row_vectors;
    return c < key_vectors ? from_k + m * p.k_new_row_stride + c * kPerVector
                           : from_v + m * p.v_new_row_stride + (c - key_vectors) * kPerVector;
  };
  const auto target = [&](int e) {
    std::int64_t page = 0;
    int slot = 0;
    rows.locate(int(lo + e / row_vectors), &page, &slot);
    const int c = e % row_vectors;
    return c < key_vectors ? to_k + page * p.k_batch_stride + slot * p.k_row_stride + c * kPerVector
                           : to_v + page * p.v_batch_stride + slot * p.v_row_stride + (c - key_vectors) * kPerVector;
  };
  for (int e0 = threadIdx.x; e0 < total; e0 += kThreads * kBatch) {
    uint4 v[kBatch];
    CUTE_UNROLL
    for (int i = 0; i < kBatch; ++i)
      if (e0 + i * kThreads < total) v[i] = *reinterpret_cast<const uint4*>(source(e0 + i * kThreads));
    CUTE_UNROLL
    for (int i = 0; i < kBatch; ++i)
      if (e0 + i * kThreads < total) *reinterpret_cast<uint4*>(target(e0 + i * kThreads)) = v[i];
  }
}

}  // namespace memattn::cuda
