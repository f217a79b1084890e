// The one-pass backward's five GEMMs on sm_90a's warpgroup MMA (wgmma), every operand read from
// shared memory by the tensor cores (OnePassBwdTraits with GemmKind::wgmma; family-90 rows only).
//
// Why: with mma.sync each warp copies both operands of every GEMM into registers by ldmatrix
// (the D = 256 row: ~40% of the step's stall samples sit in the S / dP and dK / dV GEMMs, MIO
// throttle on ldmatrix.trans among them), and the operand registers are what the row spills for.
// Here the two warpgroups split S and dP (queries x keys) by keys and each dQ chunk (queries x
// kDqCols) by columns, so both hold the same query rows (a quad per row, as mma.sync's warps
// did); dV and dK (keys x head dim) are split by columns over 64 keys, by keys over 128 (each
// warpgroup then reads only the P^T and dS^T rows it wrote). The tensor cores read Q, K, V, dO, P
// and dS where they lie. The transposed operands (P^T, dS^T, dO^T, Q^T, K^T)
// are the same bytes read MN-major (gmma.hpp).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <type_traits>

#include "cuda/sm90/gmma.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// acc1 = A1 B1^T, then acc2 = A2 B2^T, each issued whole and completed after the caller's work
// for it (after1(kk), after2(kk) for each of kSlices k16 slices) has been issued beside it.
template <int kSlices, class TiledMma, class A1, class B1, class Acc, class A2, class B2, class Work1, class Work2>
__device__ __forceinline__ void two_gemms_with_work(const TiledMma& mma, const A1& a1, const B1& b1, Acc& acc1,
                                                    const A2& a2, const B2& b2, Acc& acc2, int tid,
                                                    const Work1& after1, const Work2& after2) {
  gmma_issue(mma, a1, b1, acc1, tid);
  CUTE_UNROLL
  for (int kk = 0; kk < kSlices; ++kk) after1(kk);
  gmma_complete(acc1);
  gmma_issue(mma, a2, b2, acc2, tid);
  CUTE_UNROLL
  for (int kk = 0; kk < kSlices; ++kk) after2(kk);
  gmma_complete(acc2);
}

// What both wgmma GEMM sets below share: dQ = dS K with both operands in shared memory, its
// bulk reduction, and the fence that shows the threads' shared-memory stores to the tensor cores.
struct OnePassGmmaCommon {
  // A step's dQ leaves by one bulk reduction of the staged tile (bulk_reduce.hpp), issued by one
  // thread, instead of the warps' atomics beside the S and dP GEMMs.
  static constexpr bool kBulkDq = true;
  template <class MmaDq, class SmemA, class SmemB, class Acc>
  __device__ __forceinline__ static void query_grads(const MmaDq& mma, const SmemA& sA, const SmemB& sB, Acc& acc,
                                                     int tid) {
    gmma(mma, sA, sB, acc, tid);
  }
  __device__ __forceinline__ static void publish_smem_writes() { sm90::publish_smem_writes(); }
};

template <class Element, int kBlockM, int kBlockN, int kHeadDim, int kDqCols>
struct OnePassGmmaGemms : OnePassGmmaCommon {
  static constexpr int kWarpgroups = 2;
  static_assert(kBlockM == 64 || kBlockM == 128, "one or two wgmma row blocks of queries (S, dQ)");
  static_assert(kBlockN == 64 || kBlockN == 64 * kWarpgroups, "keys: one row block, or one per warpgroup");
  static_assert(kHeadDim / kWarpgroups <= 256 && kDqCols % (8 * kWarpgroups) == 0);
  // The head-dim tiles swizzle 64-byte spans where a warpgroup's columns of dK, dV or a dQ chunk
  // are not whole 64-column atoms (D = 192: 96 each).
  static constexpr int kSwizzleBytes =
      (kHeadDim / kWarpgroups) % 64 == 0 && (kDqCols / kWarpgroups) % 64 == 0 ? 128 : 64;

  using SmemLayoutQ = KMajorTile<Element, kBlockM, kHeadDim, kSwizzleBytes>;       // Q, dO
  using SmemLayoutQt = TransposedTile<Element, kHeadDim, kBlockM, kSwizzleBytes>;  // B operands of dK, dV
  using SmemLayoutKV = KMajorTile<Element, kBlockN, kHeadDim, kSwizzleBytes>;      // K, V
  using SmemLayoutKt = TransposedTile<Element, kHeadDim, kBlockN, kSwizzleBytes>;  // B operand of dQ
  using SmemLayoutP = KMajorTile<Element, kBlockM, kBlockN>;        // P, dS
  using SmemLayoutPt = TransposedTile<Element, kBlockN, kBlockM>;   // A operands of dV, dK

  using MmaSdp = WarpgroupsAlongN<Element, kBlockN, kWarpgroups, GMMA::Major::K, GMMA::Major::K>;
  // dV and dK (keys x head dim): with a row block of keys per warpgroup each takes its own keys
  // over the whole head dim (one N = kHeadDim wgmma reads its share of P^T and dS^T once), else
  // the warpgroups split the head dim.
  using MmaDkv = std::conditional_t<
      kBlockN == 64, WarpgroupsAlongN<Element, kHeadDim, kWarpgroups, GMMA::Major::MN, GMMA::Major::MN>,
      WarpgroupsAlongM<Element, kHeadDim, kWarpgroups, GMMA::Major::MN, GMMA::Major::MN>>;
  using MmaDq = WarpgroupsAlongN<Element, kDqCols, kWarpgroups, GMMA::Major::K, GMMA::Major::MN>;
  static constexpr bool kKeyRows = false;  // S and dP with the queries as rows
  // With a row block of keys per warpgroup, dV and dK read only the rows of P^T and dS^T that the
  // warpgroup's own threads stored (S's columns are split the same way), so a barrier of its 128
  // threads publishes them; the CTA's barrier before the dQ GEMM (which reads all of dS) follows.
  static constexpr bool kOwnKeyGradOperands = kBlockN == 64 * kWarpgroups;
  static constexpr int kKeyGradsBarrier = 1;  // named barriers 1 and 2 (cutlass::arch::NamedBarrier's numbering)
  __device__ __forceinline__ static void sync_warpgroup() {
    cutlass::arch::NamedBarrier::sync(128, kKeyGradsBarrier + int(threadIdx.x) / 128);
  }

  // S = Q K^T, then dP = dO V^T. The mma.sync GEMMs call after_s(kk) and after_dp(kk) after each
  // of their kSlices k16 slices (work for the warps beside the tensor cores); here each GEMM's
  // work runs while the whole GEMM is in flight. Issuing dP right behind S (after_dp once S is
  // done) measured 1.5-3% slower.
  template <int kSlices, class SmemQ, class SmemK, class Acc, class WorkS, class WorkDp>
  __device__ __forceinline__ static void scores(const MmaSdp& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc_s,
                                                const SmemQ& sdO, const SmemK& sV, Acc& acc_dp, int tid,
                                                const WorkS& after_s, const WorkDp& after_dp) {
    two_gemms_with_work<kSlices>(mma, sQ, sK, acc_s, sdO, sV, acc_dp, tid, after_s, after_dp);
  }
  // dV += P^T dO, then dK += dS^T Q (issued together: slower, as for S and dP).
  template <class SmemPt, class SmemQt, class Acc>
  __device__ __forceinline__ static void key_grads(const MmaDkv& mma, const SmemPt& sPt, const SmemQt& sdOt,
                                                   Acc& acc_dv, const SmemPt& sdSt, const SmemQt& sQt, Acc& acc_dk,
                                                   int tid) {
    gmma(mma, sPt, sdOt, acc_dv, tid);
    gmma(mma, sdSt, sQt, acc_dk, tid);
  }
};

// The same five GEMMs with the keys as the rows of S^T = K Q^T and dP^T = V dO^T (128 keys: each
// warpgroup's 64): P^T and dS^T are then, in the registers that computed them, the A operands of
// the warpgroup's own dV += P^T dO and dK += dS^T Q (wgmma with A from registers), so P never goes
// through shared memory and dK/dV wait for no barrier. dS^T is stored once (keys x queries), and
// dQ = dS K reads it MN-major. The elementwise work runs on key rows (ScoreRows::keys).
template <class Element, int kBlockM, int kBlockN, int kHeadDim, int kDqCols>
struct OnePassGmmaKeyRowsGemms : OnePassGmmaCommon {
  static constexpr int kWarpgroups = 2;
  static_assert(kBlockM == 64 || kBlockM == 128, "the queries: the N of S^T and dP^T, the M of dQ");
  static_assert(kBlockN == 64 * kWarpgroups, "a row block of keys per warpgroup");
  static_assert(kHeadDim <= 256 && kDqCols % (8 * kWarpgroups) == 0);

  using SmemLayoutQ = KMajorTile<Element, kBlockM, kHeadDim>;       // Q, dO: B operands of S^T, dP^T
  using SmemLayoutQt = TransposedTile<Element, kHeadDim, kBlockM>;  // B operands of dK, dV
  using SmemLayoutKV = KMajorTile<Element, kBlockN, kHeadDim>;      // K, V: A operands of S^T, dP^T
  using SmemLayoutKt = TransposedTile<Element, kHeadDim, kBlockN>;  // B operand of dQ
  using SmemLayoutPt = KMajorTile<Element, kBlockN, kBlockM>;       // dS^T as stored (keys x queries)
  using SmemLayoutP = TransposedTile<Element, kBlockM, kBlockN>;    // its bytes as dQ's A operand (dS)

  using MmaSdp = WarpgroupsAlongM<Element, kBlockM, kWarpgroups, GMMA::Major::K, GMMA::Major::K>;
  using MmaDkv = decltype(make_tiled_mma(
      SM90::GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, _16>, GMMA::Major::K,
                                 GMMA::Major::MN>(),
      Layout<Shape<Int<kWarpgroups>, _1, _1>>{}));
  using MmaDq = WarpgroupsAlongN<Element, kDqCols, kWarpgroups, GMMA::Major::MN, GMMA::Major::MN>;
  static constexpr bool kKeyRows = true;

  // S^T = K Q^T, then dP^T = V dO^T (the mainloop passes Q, K, dO, V as for query rows).
  template <int kSlices, class SmemQ, class SmemK, class Acc, class WorkS, class WorkDp>
  __device__ __forceinline__ static void scores(const MmaSdp& mma, const SmemQ& sQ, const SmemK& sK, Acc& acc_s,
                                                const SmemQ& sdO, const SmemK& sV, Acc& acc_dp, int tid,
                                                const WorkS& after_s, const WorkDp& after_dp) {
    two_gemms_with_work<kSlices>(mma, sK, sQ, acc_s, sV, sdO, acc_dp, tid, after_s, after_dp);
  }
  // P^T or dS^T (16-bit, in the S^T accumulator's layout) seen as the A operand of dV or dK.
  template <class Frag>
  __device__ __forceinline__ static auto a_operand(Frag& frag) {
    return cute::make_tensor(frag.data(), gmma_acc_as_a_operand(frag.layout()));
  }
  // dV += P^T dO, then dK += dS^T Q, with P^T and dS^T from registers, issued as one batch.
  template <class Frag, class SmemQt, class Acc>
  __device__ __forceinline__ static void key_grads_from_registers(const MmaDkv& mma, Frag& p_frag, const SmemQt& sdOt,
                                                                  Acc& acc_dv, Frag& ds_frag, const SmemQt& sQt,
                                                                  Acc& acc_dk, int tid) {
    auto thr = mma.get_thread_slice(tid);
    Tensor a_p = a_operand(p_frag);
    Tensor a_ds = a_operand(ds_frag);
    Tensor b_do = thr.partition_fragment_B(sdOt);
    Tensor b_q = thr.partition_fragment_B(sQt);
    warpgroup_fence_operand(a_p);
    warpgroup_fence_operand(a_ds);
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(acc_dk);
    warpgroup_arrive();
    cute::gemm(mma, a_p, b_do, acc_dv);
    cute::gemm(mma, a_ds, b_q, acc_dk);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    key_grads_done(p_frag, acc_dv, ds_frag, acc_dk);
  }
  // One of them (dV += P^T dO or dK += dS^T Q) issued as a batch of its own, left in flight:
  // key_grads_done after the wait that completes it (until then the fragment's registers stay as
  // they are).
  template <class Frag, class SmemQt, class Acc>
  __device__ __forceinline__ static void issue_key_grad_from_registers(const MmaDkv& mma, Frag& frag, const SmemQt& sBt,
                                                                       Acc& acc, int tid) {
    Tensor a = a_operand(frag);
    Tensor b = mma.get_thread_slice(tid).partition_fragment_B(sBt);
    warpgroup_fence_operand(a);
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    cute::gemm(mma, a, b, acc);
    warpgroup_commit_batch();
  }
  template <class Frag, class Acc>
  __device__ __forceinline__ static void key_grads_done(Frag& p_frag, Acc& acc_dv, Frag& ds_frag, Acc& acc_dk) {
    Tensor a_p = a_operand(p_frag);
    Tensor a_ds = a_operand(ds_frag);
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(a_p);
    warpgroup_fence_operand(a_ds);
  }
};

}  // namespace memattn::cuda::sm90
