// Compile-time shape of the sm80 one-pass backward (bwd_fused_kernel.hpp): a CTA owns kBlockN
// keys and steps through the queries kBlockM at a time; its warps form a different grid for each
// of the three GEMM shapes, so that no warp reads a whole operand tile from shared memory:
//   S = Q K^T, dP = dO V^T   (queries x keys)     kWarpsSdp  = queries x keys warps
//   dV += P^T dO, dK += dS^T Q (keys x head dim)  kWarpsDkv  = keys x head-dim warps
//   dQ = dS K                (queries x head dim) kWarpsDq   = queries x head-dim warps
// P and dS go through shared memory between them (FlashAttention-2's backward layout).
#pragma once

#include <cute/tensor.hpp>

#include <type_traits>

#include "cuda/sm80/fwd_traits.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_>
struct FusedBwdTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, cute::half_t>);
  static constexpr int kHeadDim = kHeadDim_;  // D and Dv both padded to it (zero-filled)
  static constexpr int kBlockM = kBlockM_;    // queries per step
  static constexpr int kBlockN = kBlockN_;    // keys per CTA
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr Loads kLoads = Loads::vector16;
  // Eight warps fill an SM's register file with one CTA; four leave room for two CTAs, so that
  // one CTA's barriers and elementwise phases overlap the other's GEMMs.
  static constexpr int kMinBlocksPerSm = 8 / kWarps;

  // Warp grids (rows x columns of each GEMM's output); every warp's share is a multiple of 16 x 16.
  // With 8 warps the dK/dV grid splits the longer side of keys x head dim four ways, so that each
  // warp's share (and what it reads per FLOP) stays as square as it can: 32 x 64 at D = 128 with
  // 128 keys and at D = 256 with 64 keys.
  static_assert(kWarps == 4 || kWarps == 8);
  using WarpsSdp = std::conditional_t<kWarps == 8, Shape<_2, _4, _1>, Shape<_2, _2, _1>>;
  using WarpsDkv = std::conditional_t<kWarps == 4, Shape<_2, _2, _1>,
                                      std::conditional_t<(kBlockN >= kHeadDim), Shape<_4, _2, _1>, Shape<_2, _4, _1>>>;
  using WarpsDq = WarpsSdp;
  static_assert(kBlockM % 32 == 0 && kBlockN % (16 * (kWarps / 2)) == 0 && kHeadDim % 64 == 0);
  // dQ = dS K is computed and added to the workspace in column chunks of this width: above 128 a
  // whole row of dQ next to the dK/dV accumulators would not fit in the registers.
  static constexpr int kDqCols = kHeadDim < 128 ? kHeadDim : 128;
  static_assert(kHeadDim % kDqCols == 0);

  using MmaOp = std::conditional_t<std::is_same_v<Element, cute::bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                                   SM80_16x8x16_F32F16F16F32_TN>;
  template <class Warps>
  using TiledMmaOf = TiledMMA<MMA_Atom<MmaOp>, Layout<Warps>,
                              Tile<Int<16 * decltype(size<0>(Warps{}))::value>, Int<16 * decltype(size<1>(Warps{}))::value>, _16>>;
  using MmaSdp = TiledMmaOf<WarpsSdp>;
  using MmaDkv = TiledMmaOf<WarpsDkv>;
  using MmaDq = TiledMmaOf<WarpsDq>;

  // Shared memory: rows of 64 elements with an XOR swizzle over 16-byte chunks (no bank conflicts
  // for ldmatrix, ldmatrix.trans or cp.async). Every transposed view is the same bytes.
  using SmemLayoutAtom =
      decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
  template <int kRows, int kCols>
  using RowMajorTile = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kRows>, Int<kCols>>{}));
  template <class Tile, int kRows, int kCols>
  using Transposed = decltype(composition(Tile{}, make_layout(Shape<Int<kRows>, Int<kCols>>{}, GenRowMajor{})));
  using SmemLayoutQ = RowMajorTile<kBlockM, kHeadDim>;                // Q, dO
  using SmemLayoutQt = Transposed<SmemLayoutQ, kHeadDim, kBlockM>;    // B operands of dK, dV
  using SmemLayoutKV = RowMajorTile<kBlockN, kHeadDim>;               // K, V
  using SmemLayoutKt = Transposed<SmemLayoutKV, kHeadDim, kBlockN>;   // B operand of dQ
  using SmemLayoutP = RowMajorTile<kBlockM, kBlockN>;                 // P, dS
  using SmemLayoutPt = Transposed<SmemLayoutP, kBlockN, kBlockM>;     // A operands of dV, dK

  using SmemToRegAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemToRegAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  // P and dS leave the accumulators two neighbouring columns (32 bits) per store.
  using RegToSmemAtom = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;

  // Global <-> shared: 16 bytes per thread and access, 8 threads per 64-element row.
  static constexpr int kLoadElems = 8;
  static constexpr int kThreadsPerRow = 64 / kLoadElems;
  using GmemThreads =
      Layout<Shape<Int<kThreads / kThreadsPerRow>, Int<kThreadsPerRow>>, Stride<Int<kThreadsPerRow>, _1>>;
  using LoadCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>{},
                                            GmemThreads{}, Layout<Shape<_1, Int<kLoadElems>>>{}));
  using StoreCopy = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, Element>{}, GmemThreads{},
                                             Layout<Shape<_1, Int<kLoadElems>>>{}));

  static constexpr int kSmemElemsQ = int(cosize_v<SmemLayoutQ>);
  static constexpr int kSmemElemsKV = int(cosize_v<SmemLayoutKV>);
  static constexpr int kSmemElemsP = int(cosize_v<SmemLayoutP>);
};

}  // namespace memattn::cuda::sm80
