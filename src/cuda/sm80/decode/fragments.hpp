// The decoding kernel's tiles and fragments (kernel.hpp). Both GEMMs run transposed, so that the
// few query rows (at most 8) are the MMA's n dimension instead of 16 rows of m of which most would
// be padding:
//
//   S^T (16 keys x 8 rows)  = K (16 keys x D) . Q^T (D x 8 rows)
//   O^T (D x 8 rows)       += V^T (D x 16 keys) . P^T (16 keys x 8 rows)
//
// Lane (g, t) = (lane / 4, lane % 4) of an m16n8k16 MMA holds A at rows g and g + 8, columns
// 2t, 2t + 1, 2t + 8, 2t + 9; B at k 2t, 2t + 1, 2t + 8, 2t + 9 and column g; C at rows g, g + 8
// and columns 2t, 2t + 1 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
//
// - K and V tiles sit in shared memory as rows of 16-byte chunks, chunk c of row r at slot
//   c ^ (r % 8) of its group of eight: the CTA's copies write whole rows (8 threads, 8 slots) and
//   each ldmatrix phase reads one chunk of 8 rows (8 slots), both without bank conflicts.
// - K's fragments of S^T by ldmatrix; V^T's of O^T by ldmatrix.trans from the same row layout.
// - P^T: S^T's accumulator has lane (g, t) at key g and rows 2t, 2t + 1; P^T as B needs key
//   2t, 2t + 1 at row g: an 8 x 8 transpose of each packed half (movmatrix).
#pragma once

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/mma_sm80.hpp>

#include <cstdint>
#include <type_traits>

#include <cutlass/numeric_types.h>

namespace memattn::cuda::sm80::decode {

constexpr int kChunk = 8;  // 16-bit elements in a 16-byte chunk

// The slot of chunk c of row r in a tile of kChunks chunks a row.
template <int kChunks>
__device__ __forceinline__ int slot(int r, int c) {
  return r * kChunks + (c ^ (r % 8));
}

// Four 8 x 8 matrices of 16-bit elements, lane l giving the address of row l % 8 of matrix l / 8
// (cute's ldmatrix atoms; .trans for V^T).
__device__ __forceinline__ void ldmatrix_x4(const uint4* row, std::uint32_t (&a)[4]) {
  cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(row), a[0], a[1], a[2], a[3]);
}

__device__ __forceinline__ void ldmatrix_x4_trans(const uint4* row, std::uint32_t (&a)[4]) {
  cute::SM75_U16x8_LDSM_T::copy(*reinterpret_cast<const cute::uint128_t*>(row), a[0], a[1], a[2], a[3]);
}

// The warp's 8 x 8 matrix of 16-bit pairs, transposed.
__device__ __forceinline__ std::uint32_t transpose8x8(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

template <class Element>
__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>)
    cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1, d[0], d[1], d[2],
                                              d[3]);
  else
    cute::SM80_16x8x16_F32F16F16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1, d[0], d[1], d[2],
                                            d[3]);
}

}  // namespace memattn::cuda::sm80::decode
