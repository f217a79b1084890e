// The Hopper family's pipelines (sm90/fwd/, sm90/bwd/): shared-memory buffers that a producer's TMA
// loads fill and the consumer warpgroups read, each guarded by a pair of mbarriers. `full`
// completes when the buffer's bytes have landed (the producer's arrival announces them, the copies
// complete them) and every other producer arrival it counts has come (a producer warp's lanes that
// stored what TMA does not load); `empty` when every consumer thread has arrived after its last
// read. Each role keeps its own position in the ring (RingPosition) and waits on the parity of the
// phase it expects.
#pragma once

#include <cutlass/arch/barrier.h>

#include <cstddef>
#include <cstdint>

namespace memattn::cuda::sm90 {

// The shared memory a CTA may take on Hopper (the opt-in limit), which the rings and tiles share.
inline constexpr std::size_t kSmemPerCta = 227 * 1024;

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
using EmptyBarrier = cutlass::arch::ClusterBarrier;

// A buffer's place in a ring of kStages and the phase of its barriers this round.
template <int kStages>
struct RingPosition {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

template <int kStages>
struct RingBarriers {
  std::uint64_t full[kStages];
  std::uint64_t empty[kStages];

  // By one thread, before the CTA's first barrier. producer_arrivals: the arrivals that complete
  // `full` beside the copies (the one that announces their bytes, and any plain ones).
  __device__ void init(int consumer_threads, int producer_arrivals = 1) {
    for (int s = 0; s < kStages; ++s) {
      FullBarrier::init(&full[s], producer_arrivals);
      EmptyBarrier::init(&empty[s], consumer_threads);
    }
  }

  // Producer: waits until the consumers have released the buffer at `at` (the first round passes:
  // its preceding phase counts as complete).
  __device__ __forceinline__ void wait_free(const RingPosition<kStages>& at) {
    EmptyBarrier::wait(&empty[at.stage], at.phase ^ 1);
  }
  // Producer, once the buffer is free: announces `bytes` to come and gives the barrier the copies
  // complete.
  __device__ __forceinline__ std::uint64_t* expect(const RingPosition<kStages>& at, std::uint32_t bytes) {
    FullBarrier::arrive_and_expect_tx(&full[at.stage], bytes);
    return &full[at.stage];
  }
  // A producer thread's plain arrival, after its shared-memory stores into the buffer (release).
  __device__ __forceinline__ void arrive(const RingPosition<kStages>& at) { FullBarrier::arrive(&full[at.stage]); }
  __device__ __forceinline__ std::uint64_t* acquire(const RingPosition<kStages>& at, std::uint32_t bytes) {
    wait_free(at);
    return expect(at, bytes);
  }
  // Consumers: wait for the buffer's bytes, then release it after the last read.
  __device__ __forceinline__ void wait(const RingPosition<kStages>& at) { FullBarrier::wait(&full[at.stage], at.phase); }
  __device__ __forceinline__ void release(const RingPosition<kStages>& at) { EmptyBarrier::arrive(&empty[at.stage]); }
};

// A ring of one-way signals between two roles inside the CTA: `ready` completes when `arrivals`
// threads have arrived (each after its shared-memory writes: release). The fp32 forward's split
// warpgroup signals the consumers with it (sm90/fwd/tf32x3_split.hpp); the buffers it guards are
// freed through the ring of the TMA loads that fill them.
template <int kStages>
struct ReadyBarriers {
  std::uint64_t ready[kStages];
  __device__ void init(int arrivals) {
    for (int s = 0; s < kStages; ++s) EmptyBarrier::init(&ready[s], arrivals);
  }
  __device__ __forceinline__ void arrive(const RingPosition<kStages>& at) { EmptyBarrier::arrive(&ready[at.stage]); }
  __device__ __forceinline__ void wait(const RingPosition<kStages>& at) { EmptyBarrier::wait(&ready[at.stage], at.phase); }
};

// Work items handed from the role that draws them to the others through shared memory: `full`
// once the drawer has stored a slot (its one arrival), `empty` once every reader thread is done
// with it.
template <class Item, int kSlots>
struct ItemRing {
  Item item[kSlots];
  RingBarriers<kSlots> barriers;
};

// The persistent backward's ring holds indices, which each role decodes itself. The forward hands
// its items on decoded and an item ahead (fwd/work_items.hpp); the backward lost both ways (H200,
// CLI: +2-7%, its consumers at the register limit spilled more; deterministic +5-20%, an item
// drawn ahead delays the key tiles that wait for it).
template <int kSlots>
using IndexRing = ItemRing<std::int64_t, kSlots>;

// The drawer's side of a persistent grid's work: the CTA's first item is its block index, each
// next one the counter's next draw past the first wave (`drawn` counts the draws; cleared before
// the launch), taken once body(index) returns, so that the items go out in index order, each to
// the CTA that asks first. Every index (the last one past `items` too, which ends the walk) goes
// into the ring for the other roles before body runs. The calling threads walk together; `leader`
// is the one that draws and stores, `share` hands its draw to the others (the identity for one
// thread, a shuffle for a warp).
template <int kSlots, class Share, class Body>
__device__ __forceinline__ void for_each_drawn_index(unsigned long long* drawn, std::int64_t items,
                                                     IndexRing<kSlots>& ring, bool leader, const Share& share,
                                                     const Body& body) {
  RingPosition<kSlots> at;
  std::int64_t index = blockIdx.x;
  while (true) {
    if (leader) {
      ring.barriers.wait_free(at);
      ring.item[at.stage] = index;
      ring.barriers.arrive(at);
    }
    at.advance();
    if (index >= items) return;
    body(index);
    std::int64_t next = 0;
    if (leader) next = std::int64_t(gridDim.x) + std::int64_t(atomicAdd(drawn, 1ull));
    index = share(next);
  }
}

// The next index the drawer hands this CTA (every calling thread reads it); `at` walks the ring.
template <int kSlots>
__device__ __forceinline__ std::int64_t take_index(IndexRing<kSlots>& ring, RingPosition<kSlots>& at) {
  ring.barriers.wait(at);
  const std::int64_t index = ring.item[at.stage];
  ring.barriers.release(at);
  at.advance();
  return index;
}

// body(index) for each index the drawer hands this CTA, in order, until one past `items`.
template <int kSlots, class Body>
__device__ __forceinline__ void for_each_handed_index(std::int64_t items, IndexRing<kSlots>& ring, const Body& body) {
  RingPosition<kSlots> at;
  for (std::int64_t index = take_index(ring, at); index < items; index = take_index(ring, at)) body(index);
}

}  // namespace memattn::cuda::sm90
