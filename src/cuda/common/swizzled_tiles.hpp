// The shared-memory and copy vocabulary of the kernels whose head dims are multiples of 64
// (the one-pass backward, the wide-head forward): tiles of 128-byte rows (64 16-bit or 32 fp32
// elements) with an XOR swizzle over 16-byte chunks, so that ldmatrix, ldmatrix.trans and cp.async
// see no bank conflicts; the tensor-core MMA of the element type (m16n8k16, or m16n8k8 TF32 for
// fp32, which the GEMMs run as 3xTF32: tf32x3.hpp); and 16-byte copies between global and shared
// memory.
#pragma once

#include <cute/tensor.hpp>

#include <type_traits>

namespace memattn::cuda {

using namespace cute;

// The tensor-core instructions of a kernel whose GEMMs read both operands from shared memory:
// mma.sync through ldmatrix (sm80 and newer), or sm_90a's warpgroup MMA (family-90 rows only).
enum class GemmKind { mma_sync, wgmma, wgmma_key_rows };

template <class Element, int kThreads>
struct SwizzledTiles {
  static constexpr bool kTf32x3 = std::is_same_v<Element, float>;
  static_assert(kTf32x3 || std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, cute::half_t>);
  using MmaOp = std::conditional_t<
      kTf32x3, SM80_16x8x8_F32TF32TF32F32_TN,
      std::conditional_t<std::is_same_v<Element, cute::bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                         SM80_16x8x16_F32F16F16F32_TN>>;
  static constexpr int kMmaK = kTf32x3 ? 8 : 16;  // the MMA atom's depth

  static constexpr int kChunkBits = kTf32x3 ? 2 : 3;  // log2 of the elements in 16 bytes
  static constexpr int kRowElems = 8 << kChunkBits;  // a 128-byte row
  using SmemLayoutAtom = decltype(composition(Swizzle<3, kChunkBits, 3>{},
                                              Layout<Shape<_8, Int<kRowElems>>, Stride<Int<kRowElems>, _1>>{}));
  // Tiles only 32 columns wide (the one-pass backward's P and dS with 32 keys) swizzle 32-element rows.
  using SmemLayoutAtom32 = decltype(composition(Swizzle<2, 3, 3>{}, Layout<Shape<_8, _32>, Stride<_32, _1>>{}));
  template <int kRows, int kCols>
  using RowMajorTile = decltype(tile_to_shape(
      std::conditional_t<kCols % kRowElems == 0, SmemLayoutAtom, SmemLayoutAtom32>{}, Shape<Int<kRows>, Int<kCols>>{}));
  // The same bytes seen as [kRows x kCols] of the transposed tile (an operand read transposed).
  template <class Tile, int kRows, int kCols>
  using Transposed = decltype(composition(Tile{}, make_layout(Shape<Int<kRows>, Int<kCols>>{}, GenRowMajor{})));

  // ldmatrix moves 16-bit pairs: for fp32 each pair is one element, which an m16n8k8 TF32 operand
  // read along its rows takes as it comes; read transposed (ldmatrix.trans moves 16-bit elements)
  // an fp32 operand takes one 32-bit load per element.
  using SmemToRegAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemToRegAtomX2 = Copy_Atom<SM75_U32x2_LDSM_N, Element>;  // B operands 8 wide per warp
  using SmemToRegAtomTransposed =
      std::conditional_t<kTf32x3, Copy_Atom<UniversalCopy<Element>, Element>, Copy_Atom<SM75_U16x8_LDSM_T, Element>>;
  // Accumulators leave for shared memory two neighbouring columns per store.
  using RegToSmemAtom = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<16 * sizeof(Element)>, Element>;

  // Global <-> shared: 16 bytes per thread and access, a 64-element row per 8 (fp32: 16) threads.
  static constexpr int kLoadElems = 1 << kChunkBits;
  static constexpr int kThreadsPerRow = 64 / kLoadElems;
  using GmemThreads =
      Layout<Shape<Int<kThreads / kThreadsPerRow>, Int<kThreadsPerRow>>, Stride<Int<kThreadsPerRow>, _1>>;
  using LoadCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>{},
                                            GmemThreads{}, Layout<Shape<_1, Int<kLoadElems>>>{}));
  using StoreCopy = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, Element>{}, GmemThreads{},
                                             Layout<Shape<_1, Int<kLoadElems>>>{}));
};

}  // namespace memattn::cuda
