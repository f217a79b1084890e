// Compile-time shape of an sm80 forward kernel: tiles, warps, shared-memory layouts, the tiled
// MMA and the copies between global memory, shared memory and registers.
#pragma once

#include <cute/tensor.hpp>

#include <type_traits>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/tf32x3.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

// Element float: fp32 inputs on TF32 tensor cores, three products per fp32 product (tf32x3.hpp).
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, Loads kLoads_>
struct FwdTraits {
  using Element = Element_;
  static constexpr bool kTf32x3 = std::is_same_v<Element, float>;
  static_assert(kTf32x3 || std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, cute::half_t>);
  // Head dims are padded to the bucket kHeadDim (D and Dv both); the padding is zero-filled.
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // queries per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per iteration
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr Loads kLoads = kLoads_;
  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0 && kBlockM % (16 * kWarps) == 0);

  // Shared memory: rows of 128 (or 64) bytes with an XOR swizzle over 16-byte chunks, so that
  // ldmatrix and cp.async see no bank conflicts.
  static constexpr int kChunkBits = sizeof(Element) == 4 ? 2 : 3;  // log2 of the elements in 16 bytes
  static constexpr int kChunkElems = 1 << kChunkBits;
  static constexpr int kSmemRowElems = kTf32x3 || kHeadDim % 64 == 0 ? 8 * kChunkElems : 4 * kChunkElems;
  static constexpr int kSwizzleBits = kSmemRowElems == 8 * kChunkElems ? 3 : 2;
  using SmemLayoutAtom = decltype(composition(Swizzle<kSwizzleBits, kChunkBits, 3>{},
                                              Layout<Shape<_8, Int<kSmemRowElems>>, Stride<Int<kSmemRowElems>, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V read as the B operand of P V: the same bytes viewed as [head dim x keys] (fp32: the keys of
  // each group of 8 in the order P's registers hold them, tf32x3.hpp).
  using KeyOrder = std::conditional_t<kTf32x3, Tf32x3KeyOrder<kBlockN>, Layout<Int<kBlockN>>>;
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, decltype(shape(KeyOrder{}))>{},
                                  make_stride(Int<kBlockN>{}, stride(KeyOrder{})))));

  // Warps stack along the queries; each MMA atom is m16n8k16 (m16n8k8 for TF32) with fp32
  // accumulation.
  using MmaOp = std::conditional_t<
      kTf32x3, SM80_16x8x8_F32TF32TF32F32_TN,
      std::conditional_t<std::is_same_v<Element, cute::bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                         SM80_16x8x16_F32F16F16F32_TN>>;
  using TiledMma = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarps>, _1, _1>>,
                            Tile<Int<16 * kWarps>, _16, Int<kTf32x3 ? 8 : 16>>>;
  using SmemToRegAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;  // ldmatrix
  // V (read through its transposed view): ldmatrix.trans (16-bit), or one 32-bit load per element
  // (fp32; ldmatrix.trans moves 16-bit elements).
  using SmemToRegAtomTransposed =
      std::conditional_t<kTf32x3, Copy_Atom<UniversalCopy<Element>, Element>, Copy_Atom<SM75_U16x8_LDSM_T, Element>>;
  using RegToSmemAtom = Copy_Atom<DefaultCopy, Element>;

  // Global <-> shared tile copies: kLoadElems contiguous elements per thread and access.
  static constexpr int kLoadElems = kLoads == Loads::vector16 ? kChunkElems : 1;
  static constexpr int kThreadsPerRow = kSmemRowElems / kLoadElems;
  static_assert(kThreads % kThreadsPerRow == 0);
  using GmemThreads =
      Layout<Shape<Int<kThreads / kThreadsPerRow>, Int<kThreadsPerRow>>, Stride<Int<kThreadsPerRow>, _1>>;
  using LoadAtom = std::conditional_t<kLoads == Loads::vector16,
                                      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>,
                                      Copy_Atom<UniversalCopy<Element>, Element>>;
  using StoreAtom = std::conditional_t<kLoads == Loads::vector16, Copy_Atom<UniversalCopy<uint128_t>, Element>,
                                       Copy_Atom<UniversalCopy<Element>, Element>>;
  using LoadCopy = decltype(make_tiled_copy(LoadAtom{}, GmemThreads{}, Layout<Shape<_1, Int<kLoadElems>>>{}));
  using StoreCopy = decltype(make_tiled_copy(StoreAtom{}, GmemThreads{}, Layout<Shape<_1, Int<kLoadElems>>>{}));

  static constexpr int kSmemElemsQ = int(cosize_v<SmemLayoutQ>);
  static constexpr int kSmemElemsKV = int(cosize_v<SmemLayoutKV>);
};

}  // namespace memattn::cuda::sm80
