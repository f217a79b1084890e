// Compile-time shape of the one-pass backward (one_pass_bwd_kernel.hpp): a CTA owns kBlockN
// keys and steps through the queries kBlockM at a time; its warps form a different grid for each
// of the three GEMM shapes, so that no warp reads a whole operand tile from shared memory:
//   S = Q K^T, dP = dO V^T   (queries x keys)     kWarpsSdp  = queries x keys warps
//   dV += P^T dO, dK += dS^T Q (keys x head dim)  kWarpsDkv  = keys x head-dim warps
//   dQ = dS K                (queries x head dim) kWarpsDq   = queries x head-dim warps
// P and dS go through shared memory between them (FlashAttention-2's backward layout).
#pragma once

#include <cute/tensor.hpp>

#include <type_traits>

#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/swizzled_tiles.hpp"
#include "cuda/common/tf32x3.hpp"
#include "cuda/sm90/one_pass_gemms.hpp"

namespace memattn::cuda {

using namespace cute;

// kHeadSplit > 1 (sm_90, a cluster of CTAs): each CTA of the cluster owns kHeadDim of the
// kHeadSplit x kHeadDim head dims of the same keys (D = 512 as two halves of 256, D = 1024 as four
// quarters): its share of K, V, Q, dO and of dK, dV, dQ. S and dP are summed over the cluster
// through distributed shared memory (sm90::PartialSums), so each
// CTA's traffic per FLOP is that of the row of its share's head dim.
// kGemms picks the tensor-core instructions (MmaSyncGemms below, or sm90::OnePassGmmaGemms: wgmma
// from shared memory, family-90 rows); the accumulators hold the same rows per thread either way.
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kHeadSplit_ = 1,
          GemmKind kGemms = GemmKind::mma_sync>
struct OnePassBwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;  // per CTA: D and Dv both padded to kHeadDim * kHeadSplit
  static constexpr int kHeadSplit = kHeadSplit_;  // CTAs of a cluster that share the head dim
  static_assert(kHeadSplit == 1 || kHeadSplit == 2 || kHeadSplit == 4);
  static constexpr int kBlockM = kBlockM_;    // queries per step
  static constexpr int kBlockN = kBlockN_;    // keys per CTA
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr Loads kLoads = Loads::vector16;
  using Tiles = SwizzledTiles<Element, kThreads>;
  // Eight warps fill an SM's register file with one CTA; four leave room for two CTAs, so that
  // one CTA's barriers and elementwise phases overlap the other's GEMMs.
  static constexpr int kMinBlocksPerSm = 8 / kWarps;

  // Warp grids (rows x columns of each GEMM's output); every warp's share is a multiple of 16 x 16.
  // With 8 warps the dK/dV grid splits the longer side of keys x head dim four ways, so that each
  // warp's share (and what it reads per FLOP) stays as square as it can: 32 x 64 at D = 128 with
  // 128 keys and at D = 256 with 64 keys.
  // With 32 keys (D = 512) the grid is one row of warps, each 32 keys x 64 head-dim columns: a
  // 2 x 4 grid would have both rows of warps read the same dO and Q columns.
  static_assert(kWarps == 4 || kWarps == 8);
  using WarpsSdp = std::conditional_t<kWarps == 8, Shape<_2, _4, _1>, Shape<_2, _2, _1>>;
  using WarpsDkv = std::conditional_t<
      kWarps == 4, Shape<_2, _2, _1>,
      std::conditional_t<(kBlockN >= kHeadDim), Shape<_4, _2, _1>,
                         std::conditional_t<(kBlockN <= 32), Shape<_1, _8, _1>, Shape<_2, _4, _1>>>>;
  // S and dP: each warp's share of an MMA step is 16 keys wide, or 8 when the CTA's keys are too
  // few for that (32 keys over 4 warps at D = 512; its B operand then loads with ldmatrix x2).
  static constexpr int kWarpsSdpN = decltype(size<1>(WarpsSdp{}))::value;
  static constexpr int kSdpStepN = kBlockN % (16 * kWarpsSdpN) == 0 ? 16 * kWarpsSdpN : 8 * kWarpsSdpN;
  static_assert(kBlockM % 32 == 0 && kBlockN % kSdpStepN == 0 && kBlockN % 32 == 0 && kHeadDim % 64 == 0);
  // With a 32 x 32 score tile and a wide head (D = 512) the WarpsSdp grid leaves each warp one
  // 16 x 8 accumulator over the whole head dim: it reads 24 KB of Q and K per 0.26 MFLOP, and
  // its 32 MMAs form one dependency chain (ncu: shared memory 73% busy, S and dP ~45% of its
  // wavefronts). Instead the head dim is split kSdpSlices ways; each slice's warps compute the
  // whole tile over their columns (MmaSdpSlice: 32 x 16 per warp, four accumulators), and the
  // partial sums meet in shared memory, where each warp adds up its WarpsSdp fragment.
  static constexpr int kSdpSlices = (kBlockM == 32 && kBlockN == 32 && kHeadDim >= 512) ? 4 : 1;
  static constexpr int kSdpSliceCols = kHeadDim / kSdpSlices;
  static_assert(kSdpSlices == 1 || kBlockN == 16 * (kWarps / kSdpSlices));
  // dQ = dS K is computed and added to the workspace in column chunks of this width: above 128 a
  // whole row of dQ next to the dK/dV accumulators would not fit in the registers, except at
  // D = 192, which 128 does not divide (one chunk: 236 registers on wgmma with 64 keys). With 32
  // keys (D = 512) the grid is one row of warps over 256-column chunks: each warp reads 8 KB of dS
  // and K per step instead of 12 (2 x 4 over 128-column chunks), in two chunks instead of four.
  static constexpr int kDqCols = kHeadDim < 128 ? kHeadDim : kBlockN <= 32 ? 256 : kHeadDim % 128 == 0 ? 128 : kHeadDim;
  static_assert(kHeadDim % kDqCols == 0);
  // The dQ GEMM's grid (queries x dQ columns of a chunk), as square per warp as it can be: a
  // 128 x 64 chunk (D = 64) as 4 x 2 warps of 32 x 32, which read 16 KB of dS and K per warp and
  // step instead of 20 (2 x 4: 64 x 16 each).
  using WarpsDq = std::conditional_t<(kWarps == 8 && kBlockN <= 32), Shape<_1, _8, _1>,
                                     std::conditional_t<(kWarps == 8 && kBlockM >= 2 * kDqCols), Shape<_4, _2, _1>,
                                                        WarpsSdp>>;

  using MmaOp = typename Tiles::MmaOp;
  static constexpr bool kTf32x3 = Tiles::kTf32x3;  // fp32 as 3xTF32 products (mma.sync only)
  static_assert(!kTf32x3 || (kGemms == GemmKind::mma_sync && kSdpSlices == 1 && kHeadSplit == 1));
  using MmaSdpSlice = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<_1, Int<kWarps / kSdpSlices>, _1>>,
                               Tile<_16, Int<16 * (kWarps / kSdpSlices)>, _16>>;

  // The GEMMs on mma.sync: the warp grids above, operands through ldmatrix (ldmatrix.trans for
  // the transposed views; fp32: 32-bit loads), two k16 slices in flight (gemm_smem_2slice, or
  // gemm_smem_2slice_tf32x3 for fp32).
  struct MmaSyncGemms {
    using MmaK = Int<Tiles::kMmaK>;
    template <class Warps>
    using TiledMmaOf = TiledMMA<MMA_Atom<MmaOp>, Layout<Warps>,
                                Tile<Int<16 * decltype(size<0>(Warps{}))::value>,
                                     Int<16 * decltype(size<1>(Warps{}))::value>, MmaK>>;
    using MmaSdp = TiledMMA<MMA_Atom<MmaOp>, Layout<WarpsSdp>,
                            Tile<Int<16 * decltype(size<0>(WarpsSdp{}))::value>, Int<kSdpStepN>, MmaK>>;
    using MmaDkv = TiledMmaOf<WarpsDkv>;
    using MmaDq = TiledMmaOf<WarpsDq>;

    // Shared memory (SwizzledTiles: no bank conflicts for ldmatrix, ldmatrix.trans or cp.async).
    // Every transposed view is the same bytes.
    template <int kRows, int kCols>
    using RowMajorTile = typename Tiles::template RowMajorTile<kRows, kCols>;
    template <class Tile, int kRows, int kCols>
    using Transposed = typename Tiles::template Transposed<Tile, kRows, kCols>;
    using SmemLayoutQ = RowMajorTile<kBlockM, kHeadDim>;                // Q, dO
    using SmemLayoutQt = Transposed<SmemLayoutQ, kHeadDim, kBlockM>;    // B operands of dK, dV
    using SmemLayoutKV = RowMajorTile<kBlockN, kHeadDim>;               // K, V
    using SmemLayoutKt = Transposed<SmemLayoutKV, kHeadDim, kBlockN>;   // B operand of dQ
    using SmemLayoutP = RowMajorTile<kBlockM, kBlockN>;                 // P, dS
    using SmemLayoutPt = Transposed<SmemLayoutP, kBlockN, kBlockM>;     // A operands of dV, dK

    using Ldsm = typename Tiles::SmemToRegAtom;
    using LdsmT = typename Tiles::SmemToRegAtomTransposed;
    // The B operand (K, V) of S and dP.
    using SdpBAtom = std::conditional_t<kSdpStepN == 8 * kWarpsSdpN, typename Tiles::SmemToRegAtomX2, Ldsm>;

    template <class AtomA, class AtomB, class TiledMma, class SmemA, class SmemB, class Acc, class Work = NoWork>
    __device__ __forceinline__ static void smem_gemm(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc,
                                                     int tid, const Work& after_slice = {}) {
      if constexpr (kTf32x3) gemm_smem_2slice_tf32x3<AtomA, AtomB>(mma, sA, sB, acc, tid, after_slice);
      else gemm_smem_2slice<AtomA, AtomB>(mma, sA, sB, acc, tid, after_slice);
    }

    // S = Q K^T, then dP = dO V^T; after_s(kk) and after_dp(kk) after each of their kSlices k16
    // slices.
    template <int kSlices, class SmemQ, class SmemK, class Acc, class WorkS, class WorkDp>
    __device__ __forceinline__ static void scores(const MmaSdp& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc_s,
                                                  const SmemQ& sdO, const SmemK& sV, Acc& acc_dp, int tid,
                                                  const WorkS& after_s, const WorkDp& after_dp) {
      smem_gemm<Ldsm, SdpBAtom>(mma, sQ, sK, acc_s, tid, after_s);
      smem_gemm<Ldsm, SdpBAtom>(mma, sdO, sV, acc_dp, tid, after_dp);
    }
    // dV += P^T dO, then dK += dS^T Q.
    template <class SmemPt, class SmemQt, class Acc>
    __device__ __forceinline__ static void key_grads(const MmaDkv& mma, const SmemPt& sPt, const SmemQt& sdOt,
                                                     Acc& acc_dv, const SmemPt& sdSt, const SmemQt& sQt, Acc& acc_dk,
                                                     int tid) {
      smem_gemm<LdsmT, LdsmT>(mma, sPt, sdOt, acc_dv, tid);
      smem_gemm<LdsmT, LdsmT>(mma, sdSt, sQt, acc_dk, tid);
    }
    // A chunk of dQ = dS K.
    template <class SmemA, class SmemB, class Acc>
    __device__ __forceinline__ static void query_grads(const MmaDq& mma, const SmemA& sA, const SmemB& sB, Acc& acc,
                                                       int tid) {
      smem_gemm<Ldsm, LdsmT>(mma, sA, sB, acc, tid);
    }
    __device__ __forceinline__ static void publish_smem_writes() {}  // ldmatrix reads what the barrier published
    static constexpr bool kBulkDq = false;  // dQ leaves by the warps' atomics
    static constexpr bool kKeyRows = false;  // S and dP with the queries as rows
    static constexpr bool kOwnKeyGradOperands = false;  // every warp's dK/dV reads P^T and dS^T of all keys
    __device__ __forceinline__ static void sync_warpgroup() {}
  };
  static_assert(kGemms == GemmKind::mma_sync || (kSdpSlices == 1 && kHeadSplit == 1),
                "the wgmma rows compute S and dP in one slice, on one CTA");
  using Gemms = std::conditional_t<
      kGemms == GemmKind::wgmma, sm90::OnePassGmmaGemms<Element, kBlockM, kBlockN, kHeadDim, kDqCols>,
      std::conditional_t<kGemms == GemmKind::wgmma_key_rows,
                         sm90::OnePassGmmaKeyRowsGemms<Element, kBlockM, kBlockN, kHeadDim, kDqCols>, MmaSyncGemms>>;
  using MmaSdp = typename Gemms::MmaSdp;
  using MmaDkv = typename Gemms::MmaDkv;
  using MmaDq = typename Gemms::MmaDq;
  using SmemLayoutQ = typename Gemms::SmemLayoutQ;
  using SmemLayoutQt = typename Gemms::SmemLayoutQt;
  using SmemLayoutKV = typename Gemms::SmemLayoutKV;
  using SmemLayoutKt = typename Gemms::SmemLayoutKt;
  using SmemLayoutP = typename Gemms::SmemLayoutP;
  using SmemLayoutPt = typename Gemms::SmemLayoutPt;

  using SmemToRegAtom = typename Tiles::SmemToRegAtom;  // sdp_split_head_dim's operands
  using RegToSmemAtom = typename Tiles::RegToSmemAtom;  // P and dS, two neighbouring columns per store
  using LoadCopy = typename Tiles::LoadCopy;
  using StoreCopy = typename Tiles::StoreCopy;

  static constexpr int kSmemElemsQ = int(cosize_v<SmemLayoutQ>);
  static constexpr int kSmemElemsKV = int(cosize_v<SmemLayoutKV>);
  static constexpr int kSmemElemsP = int(cosize_v<SmemLayoutP>);
};

}  // namespace memattn::cuda
