// sm_90a's warpgroup MMA (wgmma) with both operands in shared memory: the tile layouts it reads and
// the issue / complete steps. Used by the family-90 rows' GEMM policies (wide_gemms.hpp,
// one_pass_gemms.hpp); only kernels compiled for sm_90a may call them.
//
// Tiles: the canonical 128-byte-swizzled GMMA layouts, the same bytes as SwizzledTiles's
// 64-column tiles (8 x 64 atoms, stacked along the rows first), so that cp.async and st.shared
// fill them as before. A K-major tile (rows x contiguous columns) is an operand whose reduction
// runs along its columns; read the other way round (its columns as the M or N mode) it is an
// MN-major operand, whose 64 x 8 atoms are stacked along the reduction first (TransposedTile).
// Data written by cp.async or st.shared reaches wgmma (the async proxy) through
// publish_smem_writes before the barrier that precedes the GEMM.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace memattn::cuda::sm90 {

using namespace cute;

// kSwizzleBytes: 128 (64-column atoms), or 64 (32-column atoms) where a warpgroup's share of a
// GEMM's N along these columns is not whole 64-column atoms (a wgmma operand is whole atoms: D = 192
// split over two warpgroups is 96 columns each).
template <class Element, int kRows, int kCols, int kSwizzleBytes = 128>
using KMajorTile = decltype(tile_to_shape(
    std::conditional_t<kSwizzleBytes == 128, GMMA::Layout_K_SW128_Atom<Element>, GMMA::Layout_K_SW64_Atom<Element>>{},
    Shape<Int<kRows>, Int<kCols>>{}));

// The bytes of KMajorTile<Element, kCols, kRows, kSwizzleBytes> seen as kRows x kCols (its transpose).
template <class Element, int kRows, int kCols, int kSwizzleBytes = 128>
using TransposedTile = decltype(tile_to_shape(
    std::conditional_t<kSwizzleBytes == 128, GMMA::Layout_MN_SW128_Atom<Element>, GMMA::Layout_MN_SW64_Atom<Element>>{},
    Shape<Int<kRows>, Int<kCols>>{}, Step<_2, _1>{}));

// A tiled MMA of kGroups warpgroups side by side along N, each one 64 x (kN / kGroups) atom with
// operands of the given majors.
template <class Element, int kN, int kGroups, GMMA::Major kMajorA, GMMA::Major kMajorB>
using WarpgroupsAlongN = decltype(make_tiled_mma(
    SM90::GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kN / kGroups>, _16>, kMajorA, kMajorB>(),
    Layout<Shape<_1, Int<kGroups>, _1>>{}));

// kGroups warpgroups stacked along M, each one 64 x kN atom (the tile's M is 64 x kGroups).
template <class Element, int kN, int kGroups, GMMA::Major kMajorA, GMMA::Major kMajorB>
using WarpgroupsAlongM = decltype(make_tiled_mma(
    SM90::GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kN>, _16>, kMajorA, kMajorB>(),
    Layout<Shape<Int<kGroups>, _1, _1>>{}));

// acc += A B^T over every k-block of the tiles, issued to the tensor cores; gmma_complete waits.
template <class TiledMma, class SmemA, class SmemB, class Acc>
__device__ __forceinline__ void gmma_issue(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc, int tid) {
  auto thr = mma.get_thread_slice(tid);
  Tensor a = thr.partition_fragment_A(sA);  // shared-memory descriptors, not values
  Tensor b = thr.partition_fragment_B(sB);
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  cute::gemm(mma, a, b, acc);
  warpgroup_commit_batch();
}

template <class Acc>
__device__ __forceinline__ void gmma_complete(Acc& acc) {
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
}

// acc += A B^T, returning when the warpgroup's MMAs are done.
template <class TiledMma, class SmemA, class SmemB, class Acc>
__device__ __forceinline__ void gmma(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc, int tid) {
  gmma_issue(mma, sA, sB, acc, tid);
  gmma_complete(acc);
}

// The accumulator of S = Q K^T (a 64 x N wgmma fragment, ((2, 2, N / 8), 1, 1)) reused as the
// register A operand of O += P V: the two 8-column groups of each 16 keys hold exactly one k-block's
// A fragment (rows g and g + 8, columns 2t.. and 2t + 8..), so the modes become ((2, 2, 2), 1,
// N / 16). The values convert to 16 bits in place (convert_fragment) before the view.
template <class AccLayout>
__device__ __forceinline__ constexpr auto gmma_acc_as_a_operand(AccLayout acc) {
  static_assert(decltype(rank<0>(acc))::value == 3 && decltype(size<1>(acc))::value == 1 &&
                decltype(size<2>(acc))::value == 1);
  auto groups = logical_divide(coalesce(layout<0, 2>(acc)), cute::Layout<_2>{});  // (2, N / 16)
  return make_layout(make_layout(layout<0, 0>(acc), layout<0, 1>(acc), layout<0>(groups)), layout<1>(acc),
                     layout<1>(groups));
}

// This thread's shared-memory writes (cp.async landed, st.shared) seen by later wgmma reads once
// a barrier follows.
__device__ __forceinline__ void publish_smem_writes() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// The scores' accumulator (a 64 x N wgmma fragment, ((2, 2, N / 8), 1, 1): value c + 2 r + 4 j at
// row g + 8 r, key 8 j + 2 t + c) seen as the register A operand of a TF32 P V, ((2, 2), 1, N / 8):
// value (r, h) of k-block j at row g + 8 r, k-index t + 4 h, which is the accumulator's value
// h + 2 r + 4 j (key 2 t + h): the B operand holds the keys in that order (Tf32x3KeyOrder, the
// fp32 forward's V^T: sm90/fwd/tf32x3_split.hpp).
template <class AccLayout>
__device__ __forceinline__ constexpr auto gmma_tf32_acc_as_a_operand(AccLayout acc) {
  (void)acc;  // its type is the argument
  static_assert(decltype(rank<0>(acc))::value == 3 && decltype(size<1>(acc))::value == 1 &&
                decltype(size<2>(acc))::value == 1);
  constexpr int kBlocks = decltype(size<0, 2>(acc))::value;
  return Layout<Shape<Shape<_2, _2>, _1, Int<kBlocks>>, Stride<Stride<_2, _1>, _0, _4>>{};
}

}  // namespace memattn::cuda::sm90
