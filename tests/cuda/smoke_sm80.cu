// sm80 smoke kernel: cp.async into swizzled shared memory, ldmatrix into registers, mma.sync
// m16n8k16 through a CuTe TiledMMA of 4 warps.
#include <cute/tensor.hpp>

#include "smoke.hpp"

namespace memattn::smoke {
namespace {

using namespace cute;
using Element = cute::bfloat16_t;

constexpr int kTileK = 64;

// 4 warps in a 2 x 2 grid, each m16n8k16 atom repeated to cover 32 x 32.
using TiledMma = decltype(make_tiled_mma(SM80_16x8x16_F32BF16BF16F32_TN{}, Layout<Shape<_2, _2, _1>>{},
                                         Tile<_32, _32, _16>{}));
// K-major 64 x 64 tile; the XOR swizzle keeps ldmatrix free of bank conflicts.
using SmemLayout = decltype(composition(Swizzle<3, 3, 3>{},
                                        tile_to_shape(Layout<Shape<_8, Int<kTileK>>, Stride<Int<kTileK>, _1>>{},
                                                      Shape<Int<kRows>, Int<kTileK>>{})));
// 128 threads, 8 bf16 (16 bytes) each per cp.async.
using G2SCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>{},
                                         Layout<Shape<_16, _8>, Stride<_8, _1>>{}, Layout<Shape<_1, _8>>{}));

__global__ void __launch_bounds__(128) gemm_kernel(const Element* a, const Element* b, float* c) {
  __shared__ alignas(128) Element smem_a[kRows * kTileK];
  __shared__ alignas(128) Element smem_b[kRows * kTileK];
  Tensor gA = make_tensor(make_gmem_ptr(a), make_layout(make_shape(Int<kRows>{}, Int<kDepth>{}), LayoutRight{}));
  Tensor gB = make_tensor(make_gmem_ptr(b), make_layout(make_shape(Int<kRows>{}, Int<kDepth>{}), LayoutRight{}));
  Tensor gC = make_tensor(make_gmem_ptr(c), make_layout(make_shape(Int<kRows>{}, Int<kRows>{}), LayoutRight{}));
  Tensor sA = make_tensor(make_smem_ptr(smem_a), SmemLayout{});
  Tensor sB = make_tensor(make_smem_ptr(smem_b), SmemLayout{});
  Tensor gA_tiles = local_tile(gA, Shape<Int<kRows>, Int<kTileK>>{}, make_coord(0, _));  // (64, 64, k)
  Tensor gB_tiles = local_tile(gB, Shape<Int<kRows>, Int<kTileK>>{}, make_coord(0, _));

  G2SCopy g2s;
  auto g2s_thr = g2s.get_thread_slice(threadIdx.x);
  TiledMma mma;
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  Tensor acc = partition_fragment_C(mma, Shape<Int<kRows>, Int<kRows>>{});
  clear(acc);
  Tensor rA = thr_mma.partition_fragment_A(sA);
  Tensor rB = thr_mma.partition_fragment_B(sB);
  auto s2r_a = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_b = make_tiled_copy_B(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma);
  auto s2r_a_thr = s2r_a.get_thread_slice(threadIdx.x);
  auto s2r_b_thr = s2r_b.get_thread_slice(threadIdx.x);
  Tensor sA_s2r = s2r_a_thr.partition_S(sA);
  Tensor rA_s2r = s2r_a_thr.retile_D(rA);
  Tensor sB_s2r = s2r_b_thr.partition_S(sB);
  Tensor rB_s2r = s2r_b_thr.retile_D(rB);

  for (int kt = 0; kt < kDepth / kTileK; ++kt) {
    copy(g2s, g2s_thr.partition_S(gA_tiles(_, _, kt)), g2s_thr.partition_D(sA));
    copy(g2s, g2s_thr.partition_S(gB_tiles(_, _, kt)), g2s_thr.partition_D(sB));
    cp_async_fence();
    cp_async_wait<0>();
    __syncthreads();
    CUTE_UNROLL
    for (int k = 0; k < size<2>(rA); ++k) {
      copy(s2r_a, sA_s2r(_, _, k), rA_s2r(_, _, k));
      copy(s2r_b, sB_s2r(_, _, k), rB_s2r(_, _, k));
      gemm(mma, rA(_, _, k), rB(_, _, k), acc);
    }
    __syncthreads();
  }
  copy(acc, thr_mma.partition_C(gC));
}

}  // namespace

int gemm_sm80(const std::uint16_t* a, const std::uint16_t* b, float* c) {
  gemm_kernel<<<1, 128>>>(reinterpret_cast<const Element*>(a), reinterpret_cast<const Element*>(b), c);
  return int(cudaGetLastError());
}

}  // namespace memattn::smoke
