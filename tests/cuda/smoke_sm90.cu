// sm90a smoke kernel: TMA loads into 128-byte-swizzled shared memory completing on an mbarrier,
// then wgmma (m64n64k16, both operands from shared memory) issued by one warpgroup.
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "smoke.hpp"

namespace memattn::smoke {
namespace {

using namespace cute;
using Element = cute::bfloat16_t;

constexpr int kTileK = 64;

using SmemLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kRows>, Int<kTileK>>{}));
using TiledMma = decltype(make_tiled_mma(SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));

struct alignas(128) SharedStorage {
  cute::ArrayEngine<Element, cosize_v<SmemLayout>> a;
  cute::ArrayEngine<Element, cosize_v<SmemLayout>> b;
  uint64_t full;  // TMA -> MMA: the tile has landed
};

template <class TmaA, class TmaB>
__global__ void __launch_bounds__(128) gemm_kernel(CUTE_GRID_CONSTANT const TmaA tma_a,
                                                   CUTE_GRID_CONSTANT const TmaB tma_b, float* c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  Tensor sA = make_tensor(make_smem_ptr(smem.a.begin()), SmemLayout{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.begin()), SmemLayout{});
  Tensor gA = local_tile(tma_a.get_tma_tensor(make_shape(Int<kRows>{}, Int<kDepth>{})),
                         Shape<Int<kRows>, Int<kTileK>>{}, make_coord(0, _));
  Tensor gB = local_tile(tma_b.get_tma_tensor(make_shape(Int<kRows>{}, Int<kDepth>{})),
                         Shape<Int<kRows>, Int<kTileK>>{}, make_coord(0, _));
  auto [tAg, tAs] = tma_partition(tma_a, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sA), group_modes<0, 2>(gA));
  auto [tBg, tBs] = tma_partition(tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));
  constexpr int kTxBytes = 2 * kRows * kTileK * sizeof(Element);

  const bool leader = threadIdx.x == 0;
  if (leader) cutlass::arch::ClusterTransactionBarrier::init(&smem.full, 1);
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  TiledMma mma;
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  Tensor tCsA = thr_mma.partition_A(sA);
  Tensor tCsB = thr_mma.partition_B(sB);
  Tensor tCrA = thr_mma.make_fragment_A(tCsA);  // shared-memory descriptors
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);
  Tensor gC = make_tensor(make_gmem_ptr(c), make_layout(make_shape(Int<kRows>{}, Int<kRows>{}), LayoutRight{}));
  Tensor acc = thr_mma.make_fragment_C(thr_mma.partition_C(gC));
  clear(acc);

  for (int kt = 0; kt < kDepth / kTileK; ++kt) {
    if (leader) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.full, kTxBytes);
      copy(tma_a.with(smem.full), tAg(_, kt), tAs);
      copy(tma_b.with(smem.full), tBg(_, kt), tBs);
    }
    cutlass::arch::ClusterTransactionBarrier::wait(&smem.full, kt & 1);
    warpgroup_arrive();
    gemm(mma, tCrA, tCrB, acc);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    __syncthreads();  // every warp is done reading before the next TMA overwrites the tile
  }
  copy(acc, thr_mma.partition_C(gC));
#endif
}

}  // namespace

int gemm_sm90(const std::uint16_t* a, const std::uint16_t* b, float* c) {
  Tensor gA = make_tensor(reinterpret_cast<const Element*>(a), make_layout(make_shape(kRows, kDepth), LayoutRight{}));
  Tensor gB = make_tensor(reinterpret_cast<const Element*>(b), make_layout(make_shape(kRows, kDepth), LayoutRight{}));
  auto tma_a = make_tma_atom(SM90_TMA_LOAD{}, gA, SmemLayout{}, Shape<Int<kRows>, Int<kTileK>>{});
  auto tma_b = make_tma_atom(SM90_TMA_LOAD{}, gB, SmemLayout{}, Shape<Int<kRows>, Int<kTileK>>{});
  auto kernel = gemm_kernel<decltype(tma_a), decltype(tma_b)>;
  const int smem = int(sizeof(SharedStorage));
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) return int(e);
  kernel<<<1, 128, smem>>>(tma_a, tma_b, c);
  return int(cudaGetLastError());
}

}  // namespace memattn::smoke
