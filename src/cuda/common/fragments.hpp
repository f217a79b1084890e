// Register-fragment plumbing for m16n8k16 kernels: predicated tile copies, and the two views of
// an accumulator fragment that softmax and the second GEMM need.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace memattn::cuda {

using namespace cute;

// Zeroes one copy unit. A 16-byte unit in shared memory is one 16-byte shared store (the copy
// atom moves it whole, so its bytes are contiguous and aligned): cute's clear writes element by
// element, and through a swizzled-pointer tensor (the wgmma rows' tiles) each element became a
// generic store with its own swizzle arithmetic, ~440 stores in the D = 768 wgmma row.
template <class Unit>
__device__ __forceinline__ void clear_unit(Unit&& unit) {
  using U = std::decay_t<Unit>;
  constexpr int kBytes = int(decltype(size(unit))::value) * int(sizeof(typename U::value_type));
  if constexpr (kBytes == 16 && is_smem<typename U::iterator>::value) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(&unit(0)));
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(address), "r"(0) : "memory");
  } else {
    clear(unit);
  }
}

// Copies a partitioned tile (CPY, CPY_M, CPY_K) from src to dst where its coordinates (an identity
// tensor partitioned the same way) are inside [0, rows) x [0, cols); elsewhere dst is zeroed, so
// ragged tiles compute as if padded with zeros. A copy unit is whole: with vector copies `cols`
// must be a multiple of the vector width.
// A thread whose last unit is in range (coordinates grow along both modes) copies without
// predicates: inside a sequence that is every tile, and the per-unit predicates, zero stores and
// their bookkeeping were ~8% of the forward's key-loop instructions (sm_90 SASS, D = 128).
template <class TiledCopy, class Src, class Dst, class Coord>
__device__ __forceinline__ void copy_predicated(const TiledCopy& tiled_copy, const Src& src, Dst&& dst, const Coord& coord,
                                                int rows, int cols) {
  constexpr int kLastM = decltype(size<1>(dst))::value - 1, kLastK = decltype(size<2>(dst))::value - 1;
  if (get<0>(coord(0, kLastM, kLastK)) < rows && get<1>(coord(0, kLastM, kLastK)) < cols) {
    copy(tiled_copy, src, dst);
    return;
  }
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    const bool row_ok = get<0>(coord(0, m, 0)) < rows;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(dst); ++k) {
      if (row_ok && get<1>(coord(0, m, k)) < cols) copy(tiled_copy, src(_, m, k), dst(_, m, k));
      else clear_unit(dst(_, m, k));
    }
  }
}

// The same for stores: only in-range units are written.
template <class TiledCopy, class Src, class Dst, class Coord>
__device__ __forceinline__ void store_predicated(const TiledCopy& tiled_copy, const Src& src, Dst&& dst, const Coord& coord,
                                                 int rows, int cols) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    if (get<0>(coord(0, m, 0)) >= rows) continue;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(src); ++k)
      if (get<1>(coord(0, m, k)) < cols) copy(tiled_copy, src(_, m, k), dst(_, m, k));
  }
}

// Accumulator layout ((2, 2), MMA_M, MMA_N) of an m16n8 fragment seen as (rows, cols):
// value v of an atom sits at row half v / 2 and column v % 2, so rows = (v / 2, MMA_M) and
// cols = (v % 2, MMA_N). Every thread then holds 2 * MMA_M rows of 2 * MMA_N columns. A wgmma
// (sm_90) 64 x N fragment is ((2, 2, N / 8), MMA_M, MMA_N): the same two rows of a quad, with
// N / 8 column pairs, so cols = (2, N / 8, MMA_N).
template <class Layout>
__device__ __forceinline__ constexpr auto rowcol_layout(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3);
  if constexpr (decltype(rank<0>(acc))::value == 3) {
    static_assert(decltype(size<0, 0>(acc))::value == 2 && decltype(size<0, 1>(acc))::value == 2);
    return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),
                       make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
  } else {
    static_assert(decltype(size<0>(acc))::value == 4);
    auto split = logical_divide(acc, Shape<_2>{});  // ((col 2, row 2), MMA_M, MMA_N)
    return make_layout(make_layout(get<0, 1>(split), get<1>(split)), make_layout(get<0, 0>(split), get<2>(split)));
  }
}

template <class Tensor>
__device__ __forceinline__ auto rowcol(Tensor&& t) {
  return cute::make_tensor(t.data(), rowcol_layout(t.layout()));
}

// The accumulator of S = Q K^T reused as the A operand of O += P V: two neighbouring n8 column
// tiles of C hold exactly the k16 values of one A fragment, so ((2, 2), MMA_M, MMA_N) becomes
// ((2, 2, 2), MMA_M, MMA_N / 2).
template <class Layout>
__device__ __forceinline__ constexpr auto acc_as_a_operand(Layout acc) {
  auto split = logical_divide(acc, Shape<X, X, _2>{});  // ((2, 2), MMA_M, (2, MMA_N / 2))
  return make_layout(make_layout(get<0>(split), get<2, 0>(split)), get<1>(split), get<2, 1>(split));
}

// Elementwise conversion of a register fragment (fp32 -> bf16/fp16, rounding to nearest).
template <class To, class Tensor>
__device__ __forceinline__ auto convert_fragment(const Tensor& t) {
  auto out = cute::make_tensor<To>(t.layout());
  CUTE_UNROLL
  for (int i = 0; i < size(t); ++i) out(i) = To(t(i));
  return out;
}

// One tile GEMM with shared-memory operands through ldmatrix (Traits gives the copy atoms):
// acc += A B^T.
template <class Traits, class TiledMma, class SmemA, class SmemB, class Acc>
__device__ __forceinline__ void gemm_smem(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc) {
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  Tensor rA = thr_mma.partition_fragment_A(sA);
  Tensor rB = thr_mma.partition_fragment_B(sB);
  auto a_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
  auto b_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
  auto a_thr = a_copy.get_thread_slice(threadIdx.x);
  auto b_thr = b_copy.get_thread_slice(threadIdx.x);
  Tensor sA_s2r = a_thr.partition_S(sA);
  Tensor sB_s2r = b_thr.partition_S(sB);
  Tensor rA_view = a_thr.retile_D(rA);
  Tensor rB_view = b_thr.retile_D(rB);
  CUTE_UNROLL
  for (int kk = 0; kk < size<2>(rA); ++kk) {
    copy(a_copy, sA_s2r(_, _, kk), rA_view(_, _, kk));
    copy(b_copy, sB_s2r(_, _, kk), rB_view(_, _, kk));
    gemm(mma, rA(_, _, kk), rB(_, _, kk), acc);
  }
}

// gemm_smem_2slice's default: nothing between the slices.
struct NoWork {
  __device__ void operator()(int) const {}
};

// Both operands of a GEMM from shared memory, each through its own copy atom (ldmatrix, or
// ldmatrix.trans for a transposed view), k16 slice by k16 slice (kBlocks MMA k-blocks each) into a
// two-slice register buffer of the atoms' element type: reusing the buffer keeps the compiler from
// hoisting every slice's loads ahead of the MMAs, which in kernels with large accumulators costs
// spills. mma_slice(rA, rB, k) issues the MMAs of the slice whose k-blocks start at k in the
// buffers ((V, M, 2 kBlocks) and (V, N, 2 kBlocks)); after_slice(kk) runs after slice kk's: other
// work for the warp to issue while the tensor cores run them. tid: the thread index (an opaque
// copy keeps the addresses derived from it from being hoisted out of a caller's loop).
template <int kBlocks, class AtomA, class AtomB, class TiledMma, class SmemA, class SmemB, class MmaSlice, class Work>
__device__ __forceinline__ void smem_slices(const TiledMma& mma, const SmemA& sA, const SmemB& sB, int tid,
                                            const MmaSlice& mma_slice, const Work& after_slice) {
  constexpr int kSliceK = 16;
  auto thr_mma = mma.get_thread_slice(tid);
  const auto slices_a = make_shape(size<0>(sA), Int<2 * kSliceK>{});
  const auto slices_b = make_shape(size<0>(sB), Int<2 * kSliceK>{});
  Tensor rA = make_fragment_like<typename AtomA::ValType>(
      thr_mma.partition_fragment_A(local_tile(sA, slices_a, make_coord(0, 0))));  // (V, M, 2 kBlocks)
  Tensor rB = make_fragment_like<typename AtomB::ValType>(
      thr_mma.partition_fragment_B(local_tile(sB, slices_b, make_coord(0, 0))));
  auto a_copy = make_tiled_copy_A(AtomA{}, mma);
  auto b_copy = make_tiled_copy_B(AtomB{}, mma);
  auto a_thr = a_copy.get_thread_slice(tid);
  auto b_thr = b_copy.get_thread_slice(tid);
  Tensor sA_s2r = a_thr.partition_S(sA);  // (CPY, CPY_M, K / (16 / kBlocks))
  Tensor sB_s2r = b_thr.partition_S(sB);
  Tensor rA_view = a_thr.retile_D(rA);
  Tensor rB_view = b_thr.retile_D(rB);
  constexpr int kSlices = decltype(size<2>(sA_s2r))::value / kBlocks;
  const auto load = [&](int kk) {
    CUTE_UNROLL
    for (int g = 0; g < kBlocks; ++g) {
      copy(a_copy, sA_s2r(_, _, kk * kBlocks + g), rA_view(_, _, (kk % 2) * kBlocks + g));
      copy(b_copy, sB_s2r(_, _, kk * kBlocks + g), rB_view(_, _, (kk % 2) * kBlocks + g));
    }
  };
  load(0);
  CUTE_UNROLL
  for (int kk = 0; kk < kSlices; ++kk) {
    if (kk + 1 < kSlices) load(kk + 1);
    mma_slice(rA, rB, (kk % 2) * kBlocks);
    after_slice(kk);
  }
}

// acc += A B^T with both operands in shared memory (smem_slices, one m16n8k16 k-block a slice).
template <class AtomA, class AtomB, class TiledMma, class SmemA, class SmemB, class Acc, class Work = NoWork>
__device__ __forceinline__ void gemm_smem_2slice(const TiledMma& mma, const SmemA& sA, const SmemB& sB, Acc& acc,
                                                 int tid, const Work& after_slice = {}) {
  smem_slices<1, AtomA, AtomB>(
      mma, sA, sB, tid, [&](const auto& rA, const auto& rB, int k) { gemm(mma, rA(_, _, k), rB(_, _, k), acc); },
      after_slice);
}

// acc += A B with A a register fragment (an accumulator reused as the A operand) and B read
// transposed from shared memory (ldmatrix.trans).
template <class Traits, class TiledMma, class RegA, class SmemBt, class Acc>
__device__ __forceinline__ void gemm_reg_smem(const TiledMma& mma, const RegA& rA, const SmemBt& sBt, Acc& acc) {
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  Tensor rB = thr_mma.partition_fragment_B(sBt);
  auto bt_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
  auto bt_thr = bt_copy.get_thread_slice(threadIdx.x);
  Tensor sB_s2r = bt_thr.partition_S(sBt);
  Tensor rB_view = bt_thr.retile_D(rB);
  CUTE_UNROLL
  for (int kk = 0; kk < size<2>(rA); ++kk) {
    copy(bt_copy, sB_s2r(_, _, kk), rB_view(_, _, kk));
    gemm(mma, rA(_, _, kk), rB(_, _, kk), acc);
  }
}

}  // namespace memattn::cuda
