// The Hopper forward (sm_90a), problems with D, Dv up to kHeadDim (a bias on FwdBiasTraits rows,
// dropout on FwdDropoutTraits rows): a persistent, warp-specialised kernel. One CTA per SM takes
// work items (query tiles, heaviest first under a causal mask: tile_scheduler.hpp) as it finishes
// one, drawn by the producer warpgroup's one thread, which hands them to the consumers and loads
// Q, K, V (and the bias) by TMA into shared-memory rings (producer.hpp); the consumer warpgroups
// compute (mainloop.hpp) and write (epilogue.hpp). Registers move from the producer to the
// consumers (setmaxnreg; it needs the register cap of __launch_bounds__(threads, 1)).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/fwd/mainloop.hpp"
#include "cuda/sm90/fwd/params.hpp"
#include "cuda/sm90/fwd/producer.hpp"
#include "cuda/sm90/fwd/storage.hpp"
#include "cuda/sm90/fwd/traits.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) forward_kernel(const __grid_constant__ TmaFwdParams tp) {
  extern __shared__ __align__(1024) char smem[];
  auto& s = *reinterpret_cast<FwdSharedStorage<Traits>*>(smem);
  if (threadIdx.x == 0) {
    s.q_barriers.init(Traits::kConsumerThreads);
    s.k_barriers.init(Traits::kConsumerThreads);
    s.v_barriers.init(Traits::kConsumerThreads);
    s.items.barriers.init(Traits::kConsumerThreads);
    if constexpr (Traits::kBiasTile) s.bias_barriers.init(Traits::kConsumerThreads);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < Traits::kWarpgroupThreads) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) produce<Traits>(tp, s);
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
    consume<Traits>(tp.p, tp.o_by_tma ? &tp.o : nullptr, s, int(threadIdx.x) - Traits::kWarpgroupThreads);
  }
}

}  // namespace memattn::cuda::sm90
