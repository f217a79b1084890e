// The backward in one pass over the scores (register accumulators, head dims 64 to 512, and
// 512 and 1024 split over a cluster of two or four CTAs on sm_90): the kernel's entry and work
// loop. Its pieces: one_pass_bwd_traits.hpp (tiles and warp grids), one_pass_bwd_storage.hpp
// (shared memory), one_pass_bwd_mainloop.hpp (a work item: the steps and the dK/dV stores),
// one_pass_bwd_dq_flush.hpp (dQ to the workspace), one_pass_bwd_tail_split.hpp (the last wave's
// split tiles); sm90/one_pass_gemms.hpp (the wgmma GEMMs) and sm90/cluster.hpp (the exchange).
//
// One CTA owns kBlockN keys of one (sequence, kv head) and walks, for every query head of the kv
// head's group, the query tiles that can see them. Per tile: S = Q K^T and dP = dO V^T, P and
// dS elementwise (gradient_tile), both written to shared memory; then dV += P^T dO and
// dK += dS^T Q into the CTA's register accumulators, and dQ = dS K added to an fp32 workspace
// with atomics (not bit-reproducible: `deterministic` takes the two-kernel rows).
//
// Why this layout (OnePassBwdTraits): the two-kernel rows give each warp 16 full-width rows, so
// every warp reads whole Q, dO (or K, V) tiles from shared memory for each tile; ncu found their
// shared-memory pipe at 73-87% of its peak (H100). Here every GEMM has its own warp grid and each
// warp reads only its share, which with the single pass over S and dP (five GEMMs instead of
// seven) cuts the shared-memory bytes per useful FLOP by ~40%, and a D = 256 tile's dK and dV fit
// in the registers of 8 warps. dQ goes through shared memory to the workspace (stage_fragment,
// then DqBlockFlush or flush_staged); with that the rows are the default for plain problems from
// D = 64 to 1024 (at D <= 128 over long query loops; the measurements are in
// src/cuda/kernel_table.py). The workspace is head-major, so a step's dQ tile is one block there,
// and its atomics are issued during the next step's S (and dP) MMAs; P's exponentials during the
// dP MMAs. The wgmma rows (GemmKind::wgmma, family 90) add the block with one bulk reduction
// instead, issued by one thread (kBulkDq).

// Pipelining: the next tile's Q and dO are loaded (cp.async) as soon as the dK GEMM has read
// this tile's, so the loads overlap the dQ GEMM and its atomics; its LSE and delta are fetched
// into registers at the same time and staged in shared memory after the atomics.
//
// The last wave: when the key tiles are not a whole number of waves, the tiles of the part-full
// last one are split along their query steps over several CTAs, which meet in the workspace
// before dK and dV are written (tail_split.hpp, one_pass_bwd_tail_split.hpp).
#pragma once

#include <cstdint>

#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/one_pass_bwd_mainloop.hpp"
#include "cuda/common/one_pass_bwd_storage.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"
#include "cuda/sm90/bulk_reduce.hpp"
#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda {

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm) one_pass_bwd_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  using Storage = OnePassBwdSharedStorage<Traits, kFeatures>;
  constexpr int kSplit = Traits::kHeadSplit;  // > 1: clusters of kSplit CTAs take the work items together
  int exchanges = 0;
  if constexpr (kSplit > 1) exchange_of(*reinterpret_cast<Storage*>(smem), sm90::cluster_rank()).init();
  for (std::int64_t index = blockIdx.x / kSplit; index < p.kv_work_items; index += gridDim.x / kSplit) {
    const KvTilePart part = kv_tile_part(p, index);
    one_pass_bwd_tile<Traits, kFeatures>(p, decode_kv_work(p, part.tile), part, smem, exchanges);
    if constexpr (Traits::Gemms::kBulkDq)
      if (threadIdx.x == 0) sm90::wait_bulk_reads();  // the last dQ reduction's, before the stage is reused
    __syncthreads();
  }
  if constexpr (kSplit > 1) sm90::finish_exchanges();
}

}  // namespace memattn::cuda
