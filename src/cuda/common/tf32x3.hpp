// fp32 products on TF32 tensor cores at close to fp32 accuracy (3xTF32). Each fp32 operand x is
// split into big = x rounded to TF32 (10 mantissa bits) and small = x - big (exact in fp32, then
// rounded to TF32 itself); a b = big_a big_b + big_a small_b + small_a big_b + small_a small_b, and
// the last term (at most 2^-24 |a b|) is dropped. The small products go first.
//
// Where the sums go. The tensor cores round their fp32 sums toward zero, so each MMA into an
// accumulator loses up to an ulp of it, always in the same direction. Accumulated straight into
// the output over the whole key loop, those losses grew with the keys: 7.6e-6 relative error at
// 1024 keys, 2.9e-5 at 4096 (over DESIGN's fp32 limit of 1e-5), where FMAs give 1.2e-6. So every
// sum runs in a fresh accumulator over a few k-blocks and is added to the running one with a
// rounded FADD: P V over one key tile (gemm_tf32x3_columns), Q K^T over kTf32x3KBlocksPerSum
// k-blocks of the head dim (gemm_tf32x3). H200, B x S = 16384, 16 heads, forward, relative error
// at 200 and 4096 keys and TFLOP/s at 4096, by k-blocks per Q K^T sum:
//   1: 5.2e-7, 5.6e-7, 36 (D = 128) / 40 (D = 64); 2: 5.5e-7, 6.0e-7, 41 / 43;
//   4: 6.6e-7, 7.2e-7, 43 / 44; 8: 8.9e-7, 9.8e-7, 44 / 43; FMAs (ieee): 4.4e-7, 1.2e-6, 16.
//
// The m16n8k8 TF32 atom's A operand holds (row g, key t) and (row g, key t + 4) where the
// accumulator of S = Q K^T holds (row g, keys 2t, 2t + 1). P reuses S's registers as the A
// operand of P V: within each group of 8 keys, logical key t is physical key 2t and t + 4 is
// 2t + 1, and V's shared-memory view (Tf32x3KeyOrder) reads its rows in that order, so the
// contraction runs over the same keys with no shuffles.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <utility>

#include "cuda/common/fragments.hpp"

namespace memattn::cuda {

using namespace cute;

// k-blocks (of 8) of the head dim per Q K^T sum: the measurements above.
inline constexpr int kTf32x3KBlocksPerSum = 2;

__device__ __forceinline__ std::uint32_t round_to_tf32(float x) {
  std::uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
  return y;
}

template <class Frag, class Big, class Small>
__device__ __forceinline__ void split_tf32(const Frag& x, Big& big, Small& small) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) {
    const std::uint32_t hi = round_to_tf32(x(i));
    big(i) = tfloat32_t::bitcast(hi);
    small(i) = tfloat32_t::bitcast(round_to_tf32(x(i) - __uint_as_float(hi)));
  }
}

// acc += A B^T over k-blocks k0 .. k0 + kBlocks - 1: a (V, M, K) and b (V, N, K) fp32 fragments in
// the TiledMMA's A and B layouts, acc (V, M, N). A is split once, B one column block at a time.
template <int kBlocks, class TiledMma, class FragA, class FragB, class Acc>
__device__ __forceinline__ void gemm_tf32x3(const TiledMma& mma, const FragA& a, const FragB& b, int k0, Acc& acc) {
  using Split = decltype(make_fragment_like<tfloat32_t>(a(_, _, 0)));
  Split a_big[kBlocks], a_small[kBlocks];
  CUTE_UNROLL
  for (int g = 0; g < kBlocks; ++g) split_tf32(a(_, _, k0 + g), a_big[g], a_small[g]);
  CUTE_UNROLL
  for (int n = 0; n < size<2>(acc); ++n) {
    CUTE_UNROLL
    for (int m = 0; m < size<1>(acc); ++m) {
      auto sum = make_fragment_like(acc(_, m, n));
      clear(sum);
      CUTE_UNROLL
      for (int g = 0; g < kBlocks; ++g) {
        auto b_big = make_fragment_like<tfloat32_t>(b(_, n, 0)), b_small = make_fragment_like<tfloat32_t>(b(_, n, 0));
        split_tf32(b(_, n, k0 + g), b_big, b_small);
        gemm(mma, a_small[g](_, m), b_big, sum);
        gemm(mma, a_big[g](_, m), b_small, sum);
        gemm(mma, a_big[g](_, m), b_big, sum);
      }
      CUTE_UNROLL
      for (int v = 0; v < size(sum); ++v) acc(v, m, n) += sum(v);
    }
  }
}

// acc += A B^T over every k-block of a and b, in sums of kTf32x3KBlocksPerSum k-blocks; load(k)
// fills k-block k of both first.
template <class TiledMma, class FragA, class FragB, class Load, class Acc>
__device__ __forceinline__ void gemm_tf32x3_all(const TiledMma& mma, const FragA& a, const FragB& b, Load&& load,
                                                Acc& acc) {
  constexpr int kBlocks = kTf32x3KBlocksPerSum;
  static_assert(decltype(size<2>(a))::value % kBlocks == 0);
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); k += kBlocks) {
    CUTE_UNROLL
    for (int g = 0; g < kBlocks; ++g) load(k + g);
    gemm_tf32x3<kBlocks>(mma, a, b, k, acc);
  }
}

// acc += A B^T over every k-block, load(k) filling k-block k of a and b first: the MMA's own
// operands (16-bit) one k-block at a time, or 3xTF32 (fp32 Traits).
template <class Traits, class TiledMma, class FragA, class FragB, class Load, class Acc>
__device__ __forceinline__ void gemm_loaded(const TiledMma& mma, const FragA& a, const FragB& b, Load&& load, Acc& acc) {
  if constexpr (Traits::kTf32x3) {
    gemm_tf32x3_all(mma, a, b, load, acc);
  } else {
    CUTE_UNROLL
    for (int k = 0; k < size<2>(a); ++k) {
      load(k);
      gemm(mma, a(_, _, k), b(_, _, k), acc);
    }
  }
}

// gemm_smem_2slice (fragments.hpp) for fp32 operands: acc += A B^T with both in shared memory,
// each k16 slice (two k8 blocks, smem_slices) a 3xTF32 sum of its own (gemm_tf32x3) added to acc,
// so that each element sums as the forward's S = Q K^T does (gemm_tf32x3_all): the backward's
// recomputed scores are the forward's, bit for bit, where the forward's LSE must match them.
// (A one-slice buffer, loaded just before its MMAs, ran within 1% at D = 64 and 128 on the H100.)
template <class AtomA, class AtomB, class TiledMma, class SmemA, class SmemB, class Acc, class Work = NoWork>
__device__ __forceinline__ void gemm_smem_2slice_tf32x3(const TiledMma& mma, const SmemA& sA, const SmemB& sB,
                                                        Acc& acc, int tid, const Work& after_slice = {}) {
  static_assert(kTf32x3KBlocksPerSum == 2, "a slice is the k16 of gemm_smem_2slice's callers");
  smem_slices<kTf32x3KBlocksPerSum, AtomA, AtomB>(
      mma, sA, sB, tid,
      [&](const auto& rA, const auto& rB, int k) { gemm_tf32x3<kTf32x3KBlocksPerSum>(mma, rA, rB, k, acc); },
      after_slice);
}

// P's two TF32 parts (P V's A operand, (V, M, K)), split once per key tile.
template <class FragP>
struct SplitP {
  decltype(make_fragment_like<tfloat32_t>(std::declval<FragP>())) big, small;
  __device__ __forceinline__ explicit SplitP(const FragP& p)
      : big(make_fragment_like<tfloat32_t>(p)), small(make_fragment_like<tfloat32_t>(p)) {
    split_tf32(p, big, small);
  }
};

// acc += P V over one key tile, one column block of acc at a time: sB is V's shared-memory view
// partitioned for the MMA (partition_B: (MMA, MMA_N, MMA_K)), read one 32-bit load per value.
template <class TiledMma, class FragP, class SmemB, class Acc>
__device__ __forceinline__ void gemm_tf32x3_columns(const TiledMma& mma, const SplitP<FragP>& split, const SmemB& sB,
                                                    Acc& acc) {
  const auto& p_big = split.big;
  const auto& p_small = split.small;
  CUTE_UNROLL
  for (int n = 0; n < size<2>(acc); ++n) {
    auto sum = make_fragment_like(acc(_, _, n));  // (V, M)
    clear(sum);
    CUTE_UNROLL
    for (int k = 0; k < size<2>(p_big); ++k) {
      Tensor b = make_fragment_like(sB(_, n, k));
      copy(sB(_, n, k), b);
      auto b_big = make_fragment_like<tfloat32_t>(b), b_small = make_fragment_like<tfloat32_t>(b);
      split_tf32(b, b_big, b_small);
      CUTE_UNROLL
      for (int m = 0; m < size<1>(sum); ++m) {
        gemm(mma, p_small(_, m, k), b_big, sum(_, m));
        gemm(mma, p_big(_, m, k), b_small, sum(_, m));
        gemm(mma, p_big(_, m, k), b_big, sum(_, m));
      }
    }
    CUTE_UNROLL
    for (int i = 0; i < size(sum); ++i) acc(_, _, n)(i) += sum(i);
  }
}

// The accumulator of S ((2 columns, 2 row halves), MMA_M, MMA_N) as P V's A operand
// ((2 row halves, 2 logical key halves), MMA_M, MMA_K = MMA_N), keys in Tf32x3KeyOrder.
template <class Layout>
__device__ __forceinline__ constexpr auto tf32_acc_as_a_operand(Layout acc) {
  return make_layout(make_layout(get<0, 1>(acc), get<0, 0>(acc)), get<1>(acc), get<2>(acc));
}

// Logical key j of each group of 8 -> physical key 2 (j % 4) + j / 4, over kKeys keys.
template <int kKeys>
using Tf32x3KeyOrder = Layout<Shape<Shape<_4, _2, Int<kKeys / 8>>>, Stride<Stride<_2, _1, _8>>>;

// The GEMM operands' register fragments for Traits: the MMA's own (16-bit), or fp32 ones that the
// 3xTF32 GEMMs split into TF32 parts.
template <class Traits, class Frag>
__device__ __forceinline__ auto operand_fragment(Frag frag) {
  if constexpr (Traits::kTf32x3) return make_fragment_like<float>(frag);
  else return frag;
}

// The probabilities (S's accumulator layout) seen as P V's A operand.
template <class Traits, class Layout>
__device__ __forceinline__ constexpr auto p_as_a_operand(Layout acc) {
  if constexpr (Traits::kTf32x3) return tf32_acc_as_a_operand(acc);
  else return acc_as_a_operand(acc);
}

}  // namespace memattn::cuda
