// Compile-time shape of the wide-head forward (wide_fwd_kernel.hpp): head dims above 256
// with the output accumulator in registers, split over the warps along the head dim.
//
// A CTA owns kBlockM query rows and walks the key tiles of kBlockN keys. Its warps form two grids:
//   S = Q K^T   (queries x keys)      kWarpsS: 4 x 2, every warp reduces over the whole head dim
//   O += P V    (queries x head dim)  1 x kWarps: every warp owns all rows of kHeadDim / kWarps columns
// so that the fp32 output (kBlockM x kHeadDim) takes 128 registers per thread at 64 x 512 with 8
// warps. P crosses from one grid to the other through shared memory, and so do the per-row
// maxima (two warps share each score row) and the rescale factors.
//
// kHeadSplit = 2 (sm_90, a cluster of two CTAs): each CTA of the pair owns kHeadDim of the
// 2 x kHeadDim head dims of the same query rows (D = 1024 as two halves of 512): its half of Q,
// K and V, and its half of the output columns. The two partial S tiles are added through
// distributed shared memory (WideFwdSharedStorage's exchange slots), so that the head dim costs no
// extra FLOPs and each CTA's K/V traffic per FLOP is the D = 512 row's.
//
// kMath picks the tensor-core instructions of both GEMMs: mma.sync with ldmatrix operands
// (WideMmaSyncGemms, below), or sm_90a's wgmma reading both operands from shared memory
// (sm90::WideGmmaGemms: family-90 rows). Either gives the same accumulator rows per thread, so
// the kernel's softmax, masking and exchange are shared.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/swizzled_tiles.hpp"
#include "cuda/sm90/wide_gemms.hpp"

namespace memattn::cuda {

using namespace cute;

// The wide forward's GEMMs on mma.sync: S on a 4 x 2 warp grid (16 query rows by 32 keys each,
// reducing over the whole head dim), O with every warp on all rows of its kHeadDim / kWarps
// columns; operands through ldmatrix, two k16 slices in flight (gemm_smem_2slice).
template <class Element, int kBlockM, int kBlockN, int kHeadDim, int kWarps, class Tiles>
struct WideMmaSyncGemms {
  static constexpr int kWarpsSRows = 4, kWarpsSKeys = kWarps / kWarpsSRows;
  // Each warp's share of an MMA step is 16 wide along N, so that ldmatrix x4 loads its B operand.
  static_assert(kWarps == 8 && kBlockM == 16 * kWarpsSRows && kBlockN % (16 * kWarpsSKeys) == 0);
  static_assert(kHeadDim % (16 * kWarps) == 0);
  using MmaOp = typename Tiles::MmaOp;
  using MmaS = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarpsSRows>, Int<kWarpsSKeys>, _1>>,
                        Tile<Int<16 * kWarpsSRows>, Int<16 * kWarpsSKeys>, _16>>;
  using MmaO = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<_1, Int<kWarps>, _1>>, Tile<_16, Int<16 * kWarps>, _16>>;

  template <int kRows, int kCols>
  using RowMajorTile = typename Tiles::template RowMajorTile<kRows, kCols>;
  using SmemLayoutQ = RowMajorTile<kBlockM, kHeadDim>;
  using SmemLayoutKV = RowMajorTile<kBlockN, kHeadDim>;
  using SmemLayoutVt = typename Tiles::template Transposed<SmemLayoutKV, kHeadDim, kBlockN>;  // V as P V's B operand
  using SmemLayoutP = RowMajorTile<kBlockM, kBlockN>;

  template <class SmemQ, class SmemK, class Acc>
  __device__ __forceinline__ static void scores(const MmaS& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc, int tid) {
    gemm_smem_2slice<typename Tiles::SmemToRegAtom, typename Tiles::SmemToRegAtom>(mma, sQ, sK, acc, tid);
  }
  template <class SmemP, class SmemVt, class Acc>
  __device__ __forceinline__ static void output(const MmaO& mma, const SmemP& sP, const SmemVt& sVt, Acc& acc,
                                                int tid) {
    gemm_smem_2slice<typename Tiles::SmemToRegAtom, typename Tiles::SmemToRegAtomTransposed>(mma, sP, sVt, acc, tid);
  }
  template <class Acc>
  __device__ __forceinline__ static void output_done(Acc&) {}  // output() returns with the MMAs issued in order
  __device__ __forceinline__ static void publish_smem_writes() {}  // ldmatrix reads what the barrier published
};

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kHeadSplit_ = 1,
          GemmKind kMath = GemmKind::mma_sync>
struct WideFwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;  // per CTA: D and Dv both padded to kHeadDim * kHeadSplit
  static constexpr int kHeadSplit = kHeadSplit_;  // CTAs of a cluster that share the head dim
  static constexpr int kBlockM = kBlockM_;    // queries per CTA
  static constexpr int kBlockN = kBlockN_;    // keys per tile
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr Loads kLoads = Loads::vector16;
  using Tiles = SwizzledTiles<Element, kThreads>;

  // S: 4 warps (16 rows each) along the queries, kWarpsSKeys groups along the keys; O: every warp
  // all kBlockM rows (mma.sync), or every warpgroup all rows of half the head dim (wgmma).
  static constexpr int kWarpsSRows = 4, kWarpsSKeys = kWarps / kWarpsSRows;
  static_assert(kWarps == 8 && kHeadDim % 64 == 0);
  using Gemms = std::conditional_t<kMath == GemmKind::wgmma, sm90::WideGmmaGemms<Element, kBlockM, kBlockN, kHeadDim>,
                                   WideMmaSyncGemms<Element, kBlockM, kBlockN, kHeadDim, kWarps, Tiles>>;
  using MmaS = typename Gemms::MmaS;
  using MmaO = typename Gemms::MmaO;

  // Shared memory: no bank conflicts for ldmatrix, ldmatrix.trans or cp.async; wgmma's canonical
  // layouts for the wgmma rows.
  using SmemLayoutQ = typename Gemms::SmemLayoutQ;
  using SmemLayoutKV = typename Gemms::SmemLayoutKV;
  using SmemLayoutVt = typename Gemms::SmemLayoutVt;
  using SmemLayoutP = typename Gemms::SmemLayoutP;

  using RegToSmemAtom = typename Tiles::RegToSmemAtom;  // P and O, two neighbouring columns per store
  using LoadCopy = typename Tiles::LoadCopy;
  using StoreCopy = typename Tiles::StoreCopy;

  static constexpr int kSmemElemsQ = int(cosize_v<SmemLayoutQ>);
  static constexpr int kSmemElemsKV = int(cosize_v<SmemLayoutKV>);
  static constexpr int kSmemElemsP = int(cosize_v<SmemLayoutP>);
  static_assert(kHeadSplit == 1 || kHeadSplit == 2);
};

// The wide forward's shared memory: Q, K, V and P tiles, then the row statistics: each key half's
// row maxima, the rescale factors, each key half's row sums ([key half][row] and [row]) ...
template <class Traits>
struct WideFwdTiles {
  using Element = typename Traits::Element;
  Element q[Traits::kSmemElemsQ];
  Element k[Traits::kSmemElemsKV];
  Element v[Traits::kSmemElemsKV];
  Element p[Traits::kSmemElemsP];
  float max_part[Traits::kWarpsSKeys * Traits::kBlockM];
  float rescale[Traits::kBlockM];
  float sum_part[Traits::kWarpsSKeys * Traits::kBlockM];
};

// ... then, with kHeadSplit > 1, one fp32 score tile for the partial sums the other CTA of the
// pair pushes, at a 16-byte boundary, and its two mbarriers (sm90::ExchangeSlots: full, empty).
template <class Traits, bool = (Traits::kHeadSplit > 1)>
struct WideFwdSharedStorage : WideFwdTiles<Traits> {
  static_assert(sizeof(WideFwdTiles<Traits>) % 16 == 0);
};
template <class Traits>
struct WideFwdSharedStorage<Traits, true> : WideFwdTiles<Traits> {
  alignas(16) float exchange_slots[Traits::kBlockM * Traits::kBlockN];
  std::uint64_t exchange_barriers[2];
};

}  // namespace memattn::cuda
