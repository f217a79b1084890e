// Thread-block cluster primitives (sm_90): a CTA's rank in its cluster, the cluster barrier in
// its split form, and 16-byte loads from another CTA's shared memory (distributed shared memory).
// Only kernels compiled for sm_90 may call them (the family-90 rows).
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>

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

// The head-dim columns a CTA owns: [col0, col0 + qk_cols) of D and [col0, col0 + v_cols) of Dv.
// kSplit = 1 (no cluster): all of them; kSplit = 2: its rank's kColumns of the pair's.
struct HeadDimShare {
  int rank, col0, qk_cols, v_cols;
};

template <int kColumns, int kSplit, class Params>
__device__ __forceinline__ HeadDimShare head_dim_share(const Params& p) {
  if constexpr (kSplit == 1) {
    return {0, 0, p.head_dim, p.head_dim_v};
  } else {
    const int rank = cluster_rank(), col0 = rank * kColumns;
    return {rank, col0, max(0, min(kColumns, p.head_dim - col0)), max(0, min(kColumns, p.head_dim_v - col0))};
  }
}

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// `local` (an address in this CTA's shared memory) as the shared::cluster address of CTA `rank`.
__device__ __forceinline__ std::uint32_t map_to_rank(const void* local, int rank) {
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
  return remote;
}

__device__ __forceinline__ void store_to_rank(float4* local, int rank, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(map_to_rank(local, rank)), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}

// mbarriers that the other CTA of a pair arrives on (release at cluster scope, so that its
// earlier shared-memory stores into this CTA, or reads of it, are ordered before the arrival).
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void arrive_on_rank(std::uint64_t* bar, int rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(map_to_rank(bar, rank)) : "memory");
}
__device__ __forceinline__ void wait_parity(std::uint64_t* bar, int parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "WAIT:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT;\n\t}" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

// Partial sums pushed between a pair of CTAs: each thread stores its accumulators into the other
// CTA's slots (element-major) and arrives on its `full` barrier; it then waits for its own `full`
// (the other CTA's partial sums are in this CTA's slots), adds them, and arrives on the other
// CTA's `empty` barrier (its slots in this CTA may be written again). Before a push (`count` > 0)
// it waits for its own `empty`: the other CTA has read the previous push. One wait-free round trip
// per call instead of two cluster barriers; `count` numbers the calls (the barriers' phases).
struct PairSlots {
  float* slots;
  std::uint64_t* full;
  std::uint64_t* empty;
};

template <int kThreads, class... Acc>
__device__ __forceinline__ void push_pair_partials(const PairSlots& s, int other, int count, Acc&... acc) {
  float4* mine = reinterpret_cast<float4*>(s.slots) + threadIdx.x;
  if (count > 0) wait_parity(s.empty, (count - 1) & 1);
  int slot = 0;
  const auto push = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot)
      store_to_rank(mine + slot * kThreads, other, make_float4(a(i), a(i + 1), a(i + 2), a(i + 3)));
  };
  (push(acc), ...);
  arrive_on_rank(s.full, other);
  wait_parity(s.full, count & 1);
  slot = 0;
  const auto add = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot) {
      const float4 v = mine[slot * kThreads];
      a(i) += v.x, a(i + 1) += v.y, a(i + 2) += v.z, a(i + 3) += v.w;
    }
  };
  (add(acc), ...);
  arrive_on_rank(s.empty, other);
}

// Partial sums split over a pair of CTAs (each holds its half of the head dim's contribution to
// the same fp32 accumulators): each thread stores its accumulators in its own slots
// (element-major, so that a warp's 16-byte stores are contiguous), and after the cluster barrier
// adds the same slots of CTA `other`. Both CTAs then hold own + other, the same sum bit for bit
// (fp32 addition commutes). `reuse`: the slots hold the previous call's values; wait for the other
// CTA's arrival after it read them. The caller ends with one cluster_wait() after its last call.
template <int kThreads, class... Acc>
__device__ __forceinline__ void add_pair_partials(float* slots, int other, bool reuse, Acc&... acc) {
  float4* mine = reinterpret_cast<float4*>(slots) + threadIdx.x;
  if (reuse) cluster_wait();
  int slot = 0;
  const auto store = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot)
      mine[slot * kThreads] = make_float4(a(i), a(i + 1), a(i + 2), a(i + 3));
  };
  (store(acc), ...);
  cluster_arrive();
  cluster_wait();  // both CTAs' partial sums are in
  slot = 0;
  const auto add = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot) {
      const float4 v = load_from_rank(mine + slot * kThreads, other);
      a(i) += v.x, a(i + 1) += v.y, a(i + 2) += v.z, a(i + 3) += v.w;
    }
  };
  (add(acc), ...);
  cluster_arrive();  // done with the other CTA's slots
}

}  // namespace memattn::cuda::sm90
