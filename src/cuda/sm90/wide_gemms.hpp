// The wide-head forward's two GEMMs on sm_90a's warpgroup MMA (wgmma), both operands read from
// shared memory by the tensor cores (WideFwdTraits with WideMath::wgmma; family-90 rows only).
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
// Shared memory: the canonical 128-byte-swizzled GMMA tiles (the same bytes as SwizzledTiles's
// 64-column tiles). K is the B operand of S in its rows-of-keys form (K-major); V is loaded into
// the same arrangement and read as P V's B operand with the head dim contiguous (MN-major): the
// MN-major view tiles its 64 x 8 atoms keys first, so that each atom is one K-major atom of the
// load, transposed. Data written by cp.async or st.shared is made visible to wgmma (the async
// proxy) by publish_smem_writes before the barrier that precedes the GEMM.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace memattn::cuda::sm90 {

using namespace cute;

template <class Element, int kBlockM, int kBlockN, int kHeadDim>
struct WideGmmaGemms {
  static constexpr int kWarpgroups = 2;  // split S's keys and O's head dim
  static constexpr int kKeysPerGroup = kBlockN / kWarpgroups, kColsPerGroup = kHeadDim / kWarpgroups;
  static_assert(kBlockM == 64, "one wgmma row block (64 queries) per CTA");
  static_assert(kKeysPerGroup % 8 == 0 && kColsPerGroup % 8 == 0 && kColsPerGroup <= 256);

  using AtomK = GMMA::Layout_K_SW128_Atom<Element>;    // 8 rows x 64 contiguous columns
  using AtomMN = GMMA::Layout_MN_SW128_Atom<Element>;  // 64 contiguous rows x 8 columns
  using SmemLayoutQ = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutVt = decltype(tile_to_shape(AtomMN{}, Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{}));
  using SmemLayoutP = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));

  using MmaS = decltype(make_tiled_mma(
      SM90::GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kKeysPerGroup>, _16>>(),
      Layout<Shape<_1, Int<kWarpgroups>, _1>>{}));
  using MmaO = decltype(make_tiled_mma(
      SM90::GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kColsPerGroup>, _16>,
                                 GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_1, Int<kWarpgroups>, _1>>{}));

  // acc += A B^T over every k-block of the tiles, issued to the tensor cores; complete() waits.
  template <class TiledMma, class SmemA, class SmemB, class Acc>
  __device__ __forceinline__ static void issue(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc, int tid) {
    auto thr = mma.get_thread_slice(tid);
    Tensor a = thr.partition_fragment_A(sA);  // shared-memory descriptors, not values
    Tensor b = thr.partition_fragment_B(sB);
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    cute::gemm(mma, a, b, acc);
    warpgroup_commit_batch();
  }
  template <class Acc>
  __device__ __forceinline__ static void complete(Acc& acc) {
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
  }
  template <class SmemQ, class SmemK, class Acc>
  __device__ __forceinline__ static void scores(const MmaS& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc, int tid) {
    issue(mma, sQ, sK, acc, tid);
    complete(acc);
  }
  // O += P V returns with the MMAs in flight, so that the warps work on the next scores beside
  // them; output_done() before anything reads the output or overwrites P or V.
  template <class SmemP, class SmemVt, class Acc>
  __device__ __forceinline__ static void output(const MmaO& mma, const SmemP& sP, const SmemVt& sVt, Acc& acc, int tid) {
    issue(mma, sP, sVt, acc, tid);
  }
  template <class Acc>
  __device__ __forceinline__ static void output_done(Acc& acc) {
    complete(acc);
  }
  // This thread's shared-memory writes (cp.async landed, st.shared) seen by later wgmma reads once
  // a barrier follows.
  __device__ __forceinline__ static void publish_smem_writes() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
};

}  // namespace memattn::cuda::sm90
