// Bulk reductions from shared memory into global memory (the TMA unit's cp.reduce.async.bulk),
// sm_90 only: the wgmma one-pass backward's dQ tile leaves the CTA this way (one_pass_bwd_kernel.hpp).
//
// The issuing thread tracks its reductions as bulk groups: it commits after issuing, and waits for
// the reads of its groups before the source may be written again. Shared-memory writes by any
// thread reach the bulk copy's (async) proxy only through fence.proxy.async by the writing thread
// (publish_smem_writes in gmma.hpp), followed by a barrier, before the copy is issued.
#pragma once

#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda::sm90 {

// `bytes` (a multiple of 16; both addresses 16-byte aligned) of floats at `src` added to `dst`.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(shared_address(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// This thread's bulk reductions have read their sources.
__device__ __forceinline__ void wait_bulk_reads() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

}  // namespace memattn::cuda::sm90
