// Forward epilogue pieces shared by the register and the global-accumulator kernels: the LSE of
// each row, and an output tile written through shared memory so that global stores are whole rows.
#pragma once

#include <cute/tensor.hpp>

#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/tile_scheduler.hpp"

namespace memattn::cuda {

using namespace cute;

// lse[r] belongs to the r-th row a thread holds; row_coords is the (rows, cols) view of the
// accumulator's coordinates. The first of the kRowThreads lanes that share a row writes.
template <int kRowThreads = 4, int kRows, class RowCoords>
__device__ __forceinline__ void write_lse(const FwdParams& p, const SequenceInfo& seq, int h, std::int64_t m0, int rows,
                                          const float (&lse)[kRows], const RowCoords& row_coords) {
  if (p.lse == nullptr || threadIdx.x % kRowThreads != 0) return;
  float* base = p.lse + seq.batch * p.lse_batch_stride + h * p.lse_head_stride;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int row = get<0>(row_coords(r, 0));
    if (row < rows) base[(seq.q_begin + m0 + row) * p.lse_row_stride] = lse[r];
  }
}

// Writes a register tile (the accumulator converted to Element) to global memory through the
// shared-memory tile smem (layout SmemLayout, free for use): rows < rows and cols < cols only.
// Synchronises the CTA before and after using smem.
template <class Traits, class SmemLayout, class Frag, class TiledMma, class GlobalTile>
__device__ __forceinline__ void store_tile(const TiledMma& mma, const Frag& frag, typename Traits::Element* smem,
                                           GlobalTile&& gO, int rows, int cols) {
  Tensor sO = cute::make_tensor(make_smem_ptr(smem), SmemLayout{});
  auto r2s = make_tiled_copy_C(typename Traits::RegToSmemAtom{}, mma);
  auto r2s_thr = r2s.get_thread_slice(threadIdx.x);
  __syncthreads();  // smem is free
  copy(r2s, r2s_thr.retile_S(frag), r2s_thr.partition_D(sO));
  __syncthreads();
  typename Traits::StoreCopy store;
  auto store_thr = store.get_thread_slice(threadIdx.x);
  store_predicated(store, store_thr.partition_S(sO), store_thr.partition_D(gO),
                   store_thr.partition_S(make_identity_tensor(make_shape(size<0>(SmemLayout{}), size<1>(SmemLayout{})))),
                   rows, cols);
}

}  // namespace memattn::cuda
