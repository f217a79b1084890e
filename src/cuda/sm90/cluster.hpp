// Thread-block cluster primitives (sm_90): a CTA's rank in its cluster, the cluster barrier in
// its split form, stores into another CTA's shared memory (distributed shared memory) and the
// mbarriers that order them, and the exchanges of partial sums built from those (a pair's, and a
// reduce-scatter plus all-gather among more CTAs). Only kernels compiled for sm_90 may call them
// (the family-90 rows).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

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
// kSplit = 1 (no cluster): all of them; kSplit > 1: its rank's kColumns of the cluster's.
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
// backward pair (ncu). The exchanged data therefore moves by st.async, whose
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

// The slots and their two barriers (full, empty), in a CTA's shared storage.
__device__ __forceinline__ ExchangeSlots exchange_slots(float* slots, std::uint64_t* barriers) {
  return {slots, barriers, barriers + 1};
}

// Once, before the first exchange: both CTAs' barriers exist before either arrives on the other's.
template <int kThreads>
__device__ __forceinline__ void init_exchange_slots(const ExchangeSlots& s) {
  if (threadIdx.x == 0) {
    mbarrier_init(s.full, kThreads);
    mbarrier_init(s.empty, kThreads);
    fence_mbarrier_init();
  }
  cluster_arrive();
  cluster_wait();
}

// Once, before exit: neither CTA of a pair leaves while the other may still store into its shared
// memory or arrive on its barriers (the last exchange's pushes and `empty` arrivals).
__device__ __forceinline__ void finish_exchanges() {
  cluster_arrive();
  cluster_wait();
}

// push_pair_partials in two halves, so that a CTA can work between them while the other CTA's
// partial sums travel: send_pair_partials stores this thread's accumulators into the other CTA's
// slots, add_pair_partials waits for the other CTA's and adds them (same `count`).
template <int kThreads, class... Acc>
__device__ __forceinline__ void send_pair_partials(const ExchangeSlots& s, int other, int count, const Acc&... acc) {
  float4* mine = reinterpret_cast<float4*>(s.slots) + threadIdx.x;
  constexpr int kBytes = (int(decltype(cute::size(acc))::value) + ...) * int(sizeof(float));
  arrive_expecting(s.full, kBytes);
  if (count > 0) wait_parity(s.empty, (count - 1) & 1);
  int slot = 0;
  const auto push = [&](const auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot)
      store_async_to_rank(mine + slot * kThreads, s.full, other, make_float4(a(i), a(i + 1), a(i + 2), a(i + 3)));
  };
  (push(acc), ...);
}

template <int kThreads, class... Acc>
__device__ __forceinline__ void add_pair_partials(const ExchangeSlots& s, int count, Acc&... acc) {
  const float4* mine = reinterpret_cast<const float4*>(s.slots) + threadIdx.x;
  wait_parity(s.full, count & 1);
  int slot = 0;
  const auto add = [&](auto& a) {
    CUTE_UNROLL
    for (int i = 0; i < int(cute::size(a)); i += 4, ++slot) {
      const float4 v = mine[slot * kThreads];
      a(i) += v.x, a(i + 1) += v.y, a(i + 2) += v.z, a(i + 3) += v.w;
    }
  };
  (add(acc), ...);
}

template <int kThreads, class... Acc>
__device__ __forceinline__ void push_pair_partials(const ExchangeSlots& s, int other, int count, Acc&... acc) {
  send_pair_partials<kThreads>(s, other, count, acc...);
  add_pair_partials<kThreads>(s, count, acc...);
}

__device__ __forceinline__ void release_pair_slots(const ExchangeSlots& s, int other) { arrive_on_rank(s.empty, other); }

// The same sum among kRanks > 2 CTAs, where pushing every partial to every other CTA would move
// kRanks - 1 times the pair's bytes: a reduce-scatter, then an all-gather. Each thread's
// accumulators, taken as one list, fall into kRanks equal parts; CTA q owns part q. The thread
// pushes part q to CTA q (`scattered`), sums its own part over the cluster in rank order, pushes
// that sum to every other CTA (`gathered`) and takes the other parts' sums from them. Each part
// is summed once, so every CTA holds the same bits; each CTA sends 2 (kRanks - 1) / kRanks of its
// partials instead of kRanks - 1 times them. The slots: kRanks - 1 groups of one part per
// thread for the scatter, then as many for the gather (element-major, like the pair's).
struct ClusterSlots {
  float* slots;
  std::uint64_t* scattered;  // this CTA's part from the other CTAs is in
  std::uint64_t* gathered;   // the other CTAs' summed parts are in
  std::uint64_t* empty;      // the other CTAs have released this CTA's previous pushes
};

__device__ __forceinline__ ClusterSlots cluster_slots(float* slots, std::uint64_t* barriers) {
  return {slots, barriers, barriers + 1, barriers + 2};
}
constexpr int kClusterBarriers = 3;

// The slots' bytes for a step whose accumulators hold `floats_per_thread` floats per thread.
template <int kRanks>
constexpr int cluster_slot_bytes(int threads, int floats_per_thread) {
  return 2 * (kRanks - 1) * (floats_per_thread / kRanks) * threads * int(sizeof(float));
}

template <int kThreads, int kRanks>
__device__ __forceinline__ void init_cluster_slots(const ClusterSlots& s) {
  if (threadIdx.x == 0) {
    mbarrier_init(s.scattered, kThreads);
    mbarrier_init(s.gathered, kThreads);
    mbarrier_init(s.empty, (kRanks - 1) * kThreads);
    fence_mbarrier_init();
  }
  cluster_arrive();
  cluster_wait();
}

// `count` numbers the calls (the barriers' phases), as for push_pair_partials.
template <int kThreads, int kRanks, class AccA, class AccB>
__device__ __forceinline__ void all_reduce_cluster(const ClusterSlots& s, int rank, int count, AccA& a, AccB& b) {
  static_assert(kRanks > 2, "pairs: push_pair_partials");
  constexpr int kSizeA = int(decltype(cute::size(a))::value), kSize = kSizeA + int(decltype(cute::size(b))::value);
  static_assert(kSize % (4 * kRanks) == 0, "each part is whole float4s");
  constexpr int kPart = kSize / kRanks, kPart4 = kPart / 4, kGroups = kRanks - 1;
  float v[kSize];  // the accumulators as one list (registers: every index below is a constant)
  CUTE_UNROLL
  for (int i = 0; i < kSize; ++i) v[i] = i < kSizeA ? a(i) : b(i - kSizeA);
  float4* mine = reinterpret_cast<float4*>(s.slots) + threadIdx.x;
  // Slot j of group `group` (the source CTA's index among the others) of the scatter (area 0) or
  // the gather (area 1).
  const auto slot = [&](int area, int group, int j) { return mine + ((area * kGroups + group) * kPart4 + j) * kThreads; };
  const auto part4 = [&](int part, int j) {
    const float* e = v + part * kPart + 4 * j;
    return make_float4(e[0], e[1], e[2], e[3]);
  };
  arrive_expecting(s.scattered, kGroups * kPart * int(sizeof(float)));
  arrive_expecting(s.gathered, kGroups * kPart * int(sizeof(float)));
  if (count > 0) wait_parity(s.empty, (count - 1) & 1);
  CUTE_UNROLL
  for (int q = 0; q < kRanks; ++q) {
    if (q == rank) continue;
    CUTE_UNROLL
    for (int j = 0; j < kPart4; ++j) store_async_to_rank(slot(0, rank < q ? rank : rank - 1, j), s.scattered, q, part4(q, j));
  }
  wait_parity(s.scattered, count & 1);
  CUTE_UNROLL
  for (int q = 0; q < kRanks; ++q) {
    if (q != rank) continue;
    CUTE_UNROLL
    for (int j = 0; j < kPart4; ++j) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      CUTE_UNROLL
      for (int src = 0; src < kRanks; ++src) {
        const float4 x = src == q ? part4(q, j) : *slot(0, src < q ? src : src - 1, j);
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
      float* e = v + q * kPart + 4 * j;
      e[0] = sum.x, e[1] = sum.y, e[2] = sum.z, e[3] = sum.w;
      CUTE_UNROLL
      for (int other = 0; other < kRanks; ++other)
        if (other != q) store_async_to_rank(slot(1, q < other ? q : q - 1, j), s.gathered, other, sum);
    }
  }
  wait_parity(s.gathered, count & 1);
  CUTE_UNROLL
  for (int q = 0; q < kRanks; ++q) {
    if (q == rank) continue;
    CUTE_UNROLL
    for (int j = 0; j < kPart4; ++j) {
      const float4 x = *slot(1, q < rank ? q : q - 1, j);
      float* e = v + q * kPart + 4 * j;
      e[0] = x.x, e[1] = x.y, e[2] = x.z, e[3] = x.w;
    }
  }
  CUTE_UNROLL
  for (int i = 0; i < kSize; ++i) (i < kSizeA ? a(i) : b(i - kSizeA)) = v[i];
}

// After the last read of this CTA's slots (both areas): the others may push into them again.
template <int kRanks>
__device__ __forceinline__ void release_cluster_slots(const ClusterSlots& s, int rank) {
  CUTE_UNROLL
  for (int other = 0; other < kRanks; ++other)
    if (other != rank) arrive_on_rank(s.empty, other);
}

// The sum of partial accumulators over a cluster of kRanks CTAs, for kernels that take either
// size: a pair's push (kRanks = 2) or the reduce-scatter and all-gather (kRanks > 2), over slots
// and kBarriers barriers in the CTA's shared storage. init() once before the first sum,
// sum() per exchange (`count` numbers them), release() after the last read of the slots.
template <int kThreads, int kRanks>
struct PartialSums {
  static_assert(kRanks >= 2);
  using Slots = std::conditional_t<(kRanks > 2), ClusterSlots, ExchangeSlots>;
  static constexpr int kBarriers = kRanks > 2 ? kClusterBarriers : 2;
  // Bytes of the slots for accumulators of `floats_per_thread` floats per thread.
  static constexpr int slot_bytes(int floats_per_thread) {
    return kRanks > 2 ? cluster_slot_bytes<kRanks>(kThreads, floats_per_thread)
                      : floats_per_thread * kThreads * int(sizeof(float));
  }

  Slots slots;
  int rank;

  __device__ __forceinline__ PartialSums(float* slots_, std::uint64_t* barriers, int rank_) : rank(rank_) {
    if constexpr (kRanks > 2) slots = cluster_slots(slots_, barriers);
    else slots = exchange_slots(slots_, barriers);
  }
  __device__ __forceinline__ void init() const {
    if constexpr (kRanks > 2) init_cluster_slots<kThreads, kRanks>(slots);
    else init_exchange_slots<kThreads>(slots);
  }
  template <class AccA, class AccB>
  __device__ __forceinline__ void sum(int count, AccA& a, AccB& b) const {
    if constexpr (kRanks > 2) all_reduce_cluster<kThreads, kRanks>(slots, rank, count, a, b);
    else push_pair_partials<kThreads>(slots, rank ^ 1, count, a, b);
  }
  __device__ __forceinline__ void release() const {
    if constexpr (kRanks > 2) release_cluster_slots<kRanks>(slots, rank);
    else release_pair_slots(slots, rank ^ 1);
  }
};

}  // namespace memattn::cuda::sm90
