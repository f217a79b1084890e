// The bias of a (query tile, key tile) in shared memory: its layout, and the cp.async copies that
// fill it (16 bytes at a time; the forward's rolled loop, and the backward's unrolled one). The
// rows with a bias tile (kBiasTile) read the bias from there instead of once per score from global
// memory.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/cp_async.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"

namespace memattn::cuda {

using namespace cute;

// One (query tile, key tile) of bias in shared memory, in the bias's dtype (fp32 or 16-bit): rows
// of kPitch bytes, sized for fp32 plus 16 bytes, so that the 8 rows an m16n8 fragment read spans
// start 4 banks apart (no bank conflicts for 16-bit bias, 2-way for fp32).
template <int kRows, int kCols>
struct BiasTileShape {
  static constexpr int kPitch = kCols * 4 + 16;
  static constexpr int kBytes = kRows * kPitch;
};

// The bias tile at the end of a kernel's shared storage (its `bias` member) in the kBiasTile rows,
// whose storage says kTileBias; null in the others, whose storage has none.
template <class Storage>
__device__ __forceinline__ char* bias_tile_of(Storage& storage) {
  if constexpr (Storage::kTileBias) return storage.bias;
  else return nullptr;
}

// Where transform_scores(_rows) reads the bias: global memory per element (tile null), or a
// BiasTileShape tile of query rows x key columns.
struct SharedBias {
  char* tile = nullptr;  // the tile's (0, 0)
  int pitch = 0;         // bytes per row
};

// The bias of element (r, c) (query row, key column) of a SharedBias tile.
template <class Element>
__device__ __forceinline__ float shared_bias_at(const FwdParams& p, const SharedBias& t, int r, int c) {
  const char* row = t.tile + r * t.pitch;
  return p.bias_is_f32 ? reinterpret_cast<const float*>(row)[c] : float(reinterpret_cast<const Element*>(row)[c]);
}

// Issues the cp.async copies of the bias of query rows m0.. and keys n0.. of sequence b, head h
// into a BiasTileShape<kRows, kCols> tile (rows past q_len and keys past k_len read as zero), for
// a bias of kElemBytes-byte elements. Needs bias_col_stride == 1 and 16-byte aligned rows (the
// dispatcher checks). A thread copies the same 16-byte column chunk of every kThreads /
// kChunksPerRow-th row, so its column bounds and first address are worked out once per tile and
// each copy only steps the address: with the row, column, bounds and 64-bit address rebuilt per
// copy, each copy cost ~25 instructions (4-8 copies per thread and tile). The element size is a
// template argument so that all of it is shifts.
template <int kRows, int kCols, int kThreads, int kElemBytes>
__device__ __forceinline__ void load_bias_tile_of(const FwdParams& p, int b, int h, std::int64_t m0, std::int64_t n0,
                                                  std::int64_t q_len, std::int64_t k_len, char* dst) {
  using Shape = BiasTileShape<kRows, kCols>;
  constexpr int kElemsPerChunk = 16 / kElemBytes, kChunksPerRow = kCols / kElemsPerChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow;
  static_assert(kCols % kElemsPerChunk == 0 && kThreads % kChunksPerRow == 0);  // a column chunk per thread
  const int r0 = int(threadIdx.x) / kChunksPerRow;
  // A copy of no bytes reads nothing: its source is the row's address whatever the bounds.
  const char* src = static_cast<const char*>(p.bias) +
                    (std::int64_t(b) * p.bias_batch_stride + std::int64_t(h) * p.bias_head_stride +
                     (m0 + r0) * p.bias_row_stride + n0 + int(threadIdx.x) % kChunksPerRow * kElemsPerChunk) *
                        kElemBytes;
  // Not unrolled: the registers of unrolled copies made the 168-register forward bias row spill.
#pragma unroll 1
  for (int r = r0; r < kRows; r += kRowStep) {
    // The column and its bounds come again from an opaque thread index at each copy (a few
    // instructions) instead of staying live through the loop: at the forward's call the
    // registers are full (kept live, they spilled 40 bytes in the key loop).
    const int k = opaque_thread<kThreads>() % kChunksPerRow;
    const std::int64_t j = n0 + k * kElemsPerChunk;
    const int bytes = m0 + r < q_len && j < k_len ? int(min(std::int64_t(16), (k_len - j) * kElemBytes)) : 0;
    cp_async_zfill16(dst + r * Shape::kPitch + k * 16, src, bytes);
    src += std::int64_t(kRowStep) * p.bias_row_stride * kElemBytes;
  }
}

template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_bias_tile(const FwdParams& p, int b, int h, std::int64_t m0, std::int64_t n0,
                                               std::int64_t q_len, std::int64_t k_len, char* dst) {
  if (p.bias_is_f32) load_bias_tile_of<kRows, kCols, kThreads, 4>(p, b, h, m0, n0, q_len, k_len, dst);
  else load_bias_tile_of<kRows, kCols, kThreads, 2>(p, b, h, m0, n0, q_len, k_len, dst);
}

// load_bias_tile with its copies unrolled, for kernels with registers to spare (the backward's):
// a copy costs a 64-bit add and the cp.async at a constant shared-memory offset (~24 instructions
// in the loop above), and a tile inside the sequence, the uniform common case, tests no bounds.
// When kRows is not a multiple of the rows one round of copies covers (a 32 x 32 tile of 256
// threads), the threads past the tile's last row skip the last round.
template <int kRows, int kCols, int kThreads, int kElemBytes>
__device__ __forceinline__ void load_bias_tile_unrolled_of(const FwdParams& p, int b, int h, std::int64_t m0,
                                                           std::int64_t n0, std::int64_t q_len, std::int64_t k_len,
                                                           char* dst) {
  using Shape = BiasTileShape<kRows, kCols>;
  constexpr int kElemsPerChunk = 16 / kElemBytes, kChunksPerRow = kCols / kElemsPerChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow, kCopies = (kRows + kRowStep - 1) / kRowStep;
  constexpr bool kRagged = kRows % kRowStep != 0;
  static_assert(kCols % kElemsPerChunk == 0 && kThreads % kChunksPerRow == 0);
  const int t = opaque_thread<kThreads>();
  const int r0 = t / kChunksPerRow, k = t % kChunksPerRow;
  const std::int64_t row_bytes = p.bias_row_stride * kElemBytes, step = kRowStep * row_bytes;
  // The tile's origin (the same in every thread: uniform registers) plus the thread's offset.
  const char* tile = static_cast<const char*>(p.bias) +
                     (std::int64_t(b) * p.bias_batch_stride + std::int64_t(h) * p.bias_head_stride +
                      m0 * p.bias_row_stride + n0) *
                         kElemBytes;
  const char* src = tile + (r0 * row_bytes + k * 16);
  dst += r0 * Shape::kPitch + k * 16;
  const auto in_tile = [&](int i) { return !kRagged || r0 + i * kRowStep < kRows; };
  if (m0 + kRows <= q_len && n0 + kCols <= k_len) {
    CUTE_UNROLL
    for (int i = 0; i < kCopies; ++i)
      if (in_tile(i)) cp_async16(dst + i * kRowStep * Shape::kPitch, src + i * step);
    return;
  }
  // A copy of no bytes reads nothing: its source is the row's address whatever the bounds.
  const std::int64_t j = n0 + k * kElemsPerChunk;
  const int col_bytes = j < k_len ? int(min(std::int64_t(16), (k_len - j) * kElemBytes)) : 0;
  const std::int64_t rows_in = q_len - m0 - r0;
  CUTE_UNROLL
  for (int i = 0; i < kCopies; ++i)
    if (in_tile(i))
      cp_async_zfill16(dst + i * kRowStep * Shape::kPitch, src + i * step, i * kRowStep < rows_in ? col_bytes : 0);
}

template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_bias_tile_unrolled(const FwdParams& p, int b, int h, std::int64_t m0,
                                                        std::int64_t n0, std::int64_t q_len, std::int64_t k_len,
                                                        char* dst) {
  if (p.bias_is_f32) load_bias_tile_unrolled_of<kRows, kCols, kThreads, 4>(p, b, h, m0, n0, q_len, k_len, dst);
  else load_bias_tile_unrolled_of<kRows, kCols, kThreads, 2>(p, b, h, m0, n0, q_len, k_len, dst);
}

}  // namespace memattn::cuda
