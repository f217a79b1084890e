// The wide-head forward's two GEMMs on sm_90a's warpgroup MMA (wgmma), both operands read from
// shared memory by the tensor cores (WideFwdTraits with GemmKind::wgmma; family-90 rows only).
//
// Why: with mma.sync every warp copies its operands into registers by ldmatrix. In the wide
// layout S = Q K^T is a 4 x 2 grid of 16 x 32 warp tiles that each read 16 query rows and 32 key
// rows over the whole head dim: ~11 FLOP per shared-memory byte, and the ldmatrix issue beside the
// MMAs. Here each warpgroup (4 warps) is one 64 x 32 tile of S (the two warpgroups split the
// keys, as the two key halves of warps did) and one 64 x kHeadDim / 2 slab of O, and the tensor
// cores read Q, K, P and V from shared memory themselves: ~22 FLOP per byte for S and ~52 for
// P V, with no operand registers. Row statistics, masking, the pair's exchange and the epilogue
// are the mma.sync kernel's: the accumulators hold the same rows per thread (a quad per row).
//
// Shared memory (gmma.hpp): K is the B operand of S in its rows-of-keys form (K-major); V is
// loaded the same way and read as P V's B operand with the head dim contiguous (MN-major).
#pragma once

#include <cute/tensor.hpp>

#include "cuda/sm90/gmma.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

template <class Element, int kBlockM, int kBlockN, int kHeadDim>
struct WideGmmaGemms {
  static constexpr int kWarpgroups = 2;  // split S's keys and O's head dim
  static_assert(kBlockM == 64, "one wgmma row block (64 queries) per CTA");
  static_assert(kBlockN % (8 * kWarpgroups) == 0 && kHeadDim % (8 * kWarpgroups) == 0 && kHeadDim / kWarpgroups <= 256);

  using SmemLayoutQ = KMajorTile<Element, kBlockM, kHeadDim>;
  using SmemLayoutKV = KMajorTile<Element, kBlockN, kHeadDim>;     // K, and V as loaded
  using SmemLayoutVt = TransposedTile<Element, kHeadDim, kBlockN>;  // V as P V's B operand
  using SmemLayoutP = KMajorTile<Element, kBlockM, kBlockN>;

  using MmaS = WarpgroupsAlongN<Element, kBlockN, kWarpgroups, GMMA::Major::K, GMMA::Major::K>;
  using MmaO = WarpgroupsAlongN<Element, kHeadDim, kWarpgroups, GMMA::Major::K, GMMA::Major::MN>;

  template <class SmemQ, class SmemK, class Acc>
  __device__ __forceinline__ static void scores(const MmaS& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc, int tid) {
    gmma(mma, sQ, sK, acc, tid);
  }
  // O += P V returns with the MMAs in flight, so that the warps work on the next scores beside
  // them; output_done() before anything reads the output or overwrites P or V.
  template <class SmemP, class SmemVt, class Acc>
  __device__ __forceinline__ static void output(const MmaO& mma, const SmemP& sP, const SmemVt& sVt, Acc& acc,
                                                int tid) {
    gmma_issue(mma, sP, sVt, acc, tid);
  }
  template <class Acc>
  __device__ __forceinline__ static void output_done(Acc& acc) {
    gmma_complete(acc);
  }
  __device__ __forceinline__ static void publish_smem_writes() { sm90::publish_smem_writes(); }
};

}  // namespace memattn::cuda::sm90
