// Thread-block cluster primitives (sm_90): a CTA's rank in its cluster, the cluster barrier in
// its split form, and 16-byte loads from another CTA's shared memory (distributed shared memory).
// Only kernels compiled for sm_90 may call them (the family-90 rows).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace memattn::cuda::sm90 {

__device__ __forceinline__ int cluster_rank() {
  std::uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return int(rank);
}

// The cluster barrier: no thread's wait returns before every thread of every CTA of the cluster
// has arrived. Release on arrive and acquire on wait order the shared-memory accesses before the
// arrival with those after the wait, across the CTAs. Each thread alternates arrive and wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The 16 bytes at `local` (an address in this CTA's shared memory) as held by CTA `rank`.
__device__ __forceinline__ float4 load_from_rank(const float4* local, int rank) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(local));
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

}  // namespace memattn::cuda::sm90
