// Thread-block cluster primitives (sm_90): a CTA's rank in its cluster, the cluster barrier in
// its split form, stores into another CTA's shared memory (distributed shared memory) and the
// mbarriers that order them, and the exchanges of partial sums built from those (pairs, and
// clusters of more). Only kernels compiled for sm_90 may call them (the family-90 rows).
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

// Why no release at cluster scope below: on sm_90 a release at cluster scope (an mbarrier arrive
// or barrier.cluster.arrive with .release.cluster) compiles to MEMBAR.ALL.GPU, which waits for the
// thread's outstanding global reductions and copies (the backward's dQ atomics, the forward's
// cp.async prefetches): measured as 1.75 membar stall cycles per issued instruction in the D = 1024
// backward pair (ncu, 2026-11-22 (9)). The pair's data therefore moves by st.async, whose
// completion the receiving CTA's mbarrier tracks in bytes, and the "slots free" signal is an
// arrive with release at CTA scope (no fence; it follows the reads whose values it waited for).

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// 16 bytes into CTA `rank`'s copy of `local`; they count towards the transaction bytes of CTA
// `rank`'s copy of barrier `bar`.
__device__ __forceinline__ void store_async_to_rank(float4* local, std::uint64_t* bar, int rank, float4 v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   map_to_rank(local, rank)),
               "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)), "r"(__float_as_uint(v.w)),
               "r"(map_to_rank(bar, rank))
               : "memory");
}
// This thread's arrival on its own barrier, announcing `bytes` more to come by st.async.
__device__ __forceinline__ void arrive_expecting(std::uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void arrive_on_rank(std::uint64_t* bar, int rank) {
  asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];" ::"r"(map_to_rank(bar, rank)) : "memory");
}
__device__ __forceinline__ void wait_parity(std::uint64_t* bar, int parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT;\n\t}" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

// Partial sums pushed between a pair of CTAs: each thread announces the bytes it will receive on
// its own `full` barrier, stores its accumulators into the other CTA's slots (element-major, by
// st.async on the other CTA's `full`), waits for its own `full` (the other CTA's partial sums are
// in this CTA's slots) and adds them. release_pair_slots then arrives on the other CTA's `empty`
// barrier: its slots in this CTA may be written again (right after the add, or later when the
// slots share memory with something the CTA uses meanwhile). Before a push (`count` > 0) a thread
// waits for its own `empty`: the other CTA has released the previous push. `count` numbers the
// calls (the barriers' phases).
struct ExchangeSlots {
  float* slots;
  std::uint64_t* full;
  std::uint64_t* empty;
};

// The slots and barriers at their offsets in a CTA's dynamic shared memory.
__device__ __forceinline__ ExchangeSlots exchange_slots_at(char* smem, int slots_offset, int barriers_offset) {
  auto* barriers = reinterpret_cast<std::uint64_t*>(smem + barriers_offset);
  return {reinterpret_cast<float*>(smem + slots_offset), barriers, barriers + 1};
}

// Once, before the first exchange: every CTA's barriers exist before any arrives on another's.
// `empty` counts the releases of the kRanks - 1 other CTAs' threads.
template <int kThreads, int kRanks = 2>
__device__ __forceinline__ void init_exchange_slots(const ExchangeSlots& s) {
  if (threadIdx.x == 0) {
    mbarrier_init(s.full, kThreads);
    mbarrier_init(s.empty, (kRanks - 1) * kThreads);
    fence_mbarrier_init();
  }
  cluster_arrive();
  cluster_wait();
}

// Once, before exit: no CTA of the cluster leaves while another may still store into its shared
// memory or arrive on its barriers (the last exchange's pushes and `empty` arrivals).
__device__ __forceinline__ void finish_exchanges() {
  cluster_arrive();
  cluster_wait();
}

template <int kThreads, class... Acc>
__device__ __forceinline__ void push_pair_partials(const ExchangeSlots& s, int other, int count, Acc&... acc) {
  float4* mine = reinterpret_cast<float4*>(s.slots) + threadIdx.x;
  constexpr int kBytes = (int(decltype(cute::size(acc))::value) + ...) * int(sizeof(float));
  arrive_expecting(s.full, kBytes);
  if (count > 0) wait_parity(s.empty, (count - 1) & 1);
  int slot = 0;
  const auto push = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot)
      store_async_to_rank(mine + slot * kThreads, s.full, other, make_float4(a(i), a(i + 1), a(i + 2), a(i + 3)));
  };
  (push(acc), ...);
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
}

__device__ __forceinline__ void release_pair_slots(const ExchangeSlots& s, int other) { arrive_on_rank(s.empty, other); }

// The same exchange among a cluster of kRanks > 2 CTAs: each thread pushes its accumulators into
// every other CTA, into the slot group that CTA keeps for this one (groups in rank order, skipping
// the CTA's own: kRanks - 1 groups of the accumulators' size), waits for its own groups to fill,
// and sums the kRanks partials in rank order, so that every CTA of the cluster holds the same
// sum bit for bit (fp32 addition does not associate). release_cluster_slots then frees this
// CTA's groups to all the others.
template <int kThreads, int kRanks, class Acc>
__device__ __forceinline__ void push_cluster_partials(const ExchangeSlots& s, int rank, int count, Acc& acc) {
  static_assert(kRanks > 2, "pairs: push_pair_partials");
  constexpr int kSize = int(decltype(cute::size(acc))::value);
  constexpr int kGroupSlots = kSize / 4;  // float4 slots per thread and group
  static_assert(kSize % 4 == 0);
  float4* mine = reinterpret_cast<float4*>(s.slots) + threadIdx.x;
  arrive_expecting(s.full, (kRanks - 1) * kSize * int(sizeof(float)));
  if (count > 0) wait_parity(s.empty, (count - 1) & 1);
  CUTE_UNROLL
  for (int other = 0; other < kRanks; ++other) {
    if (other == rank) continue;
    const int group = rank < other ? rank : rank - 1;  // this CTA's group in CTA `other`
    CUTE_UNROLL
    for (int i = 0; i < kSize; i += 4)
      store_async_to_rank(mine + (group * kGroupSlots + i / 4) * kThreads, s.full, other,
                          make_float4(acc(i), acc(i + 1), acc(i + 2), acc(i + 3)));
  }
  wait_parity(s.full, count & 1);
  CUTE_UNROLL
  for (int i = 0; i < kSize; i += 4) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    CUTE_UNROLL
    for (int src = 0; src < kRanks; ++src) {
      const int group = src < rank ? src : src > rank ? src - 1 : 0;  // (any valid group for its own)
      const float4 v = src == rank ? make_float4(acc(i), acc(i + 1), acc(i + 2), acc(i + 3))
                                   : mine[(group * kGroupSlots + i / 4) * kThreads];
      sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    acc(i) = sum.x, acc(i + 1) = sum.y, acc(i + 2) = sum.z, acc(i + 3) = sum.w;
  }
}

template <int kRanks>
__device__ __forceinline__ void release_cluster_slots(const ExchangeSlots& s, int rank) {
  CUTE_UNROLL
  for (int other = 0; other < kRanks; ++other)
    if (other != rank) arrive_on_rank(s.empty, other);
}

}  // namespace memattn::cuda::sm90
