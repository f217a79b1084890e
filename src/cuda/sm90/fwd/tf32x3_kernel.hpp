// The fp32 Hopper forward (sm_90a), plain problems with D, Dv up to kHeadDim, every product as
// three TF32 warpgroup MMAs (tf32x3_traits.hpp): the 16-bit forward's persistent producer and work
// items (producer.hpp), a split warpgroup that prepares each K and V tile for the tensor cores once
// per CTA (tf32x3_split.hpp), and two consumer warpgroups (tf32x3_mainloop.hpp). Registers move
// from the producer and split warpgroups to the consumers (setmaxnreg; it needs the register cap
// of __launch_bounds__(threads, 1)).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/fwd/epilogue.hpp"
#include "cuda/sm90/fwd/params.hpp"
#include "cuda/sm90/fwd/producer.hpp"
#include "cuda/sm90/fwd/tf32x3_mainloop.hpp"
#include "cuda/sm90/fwd/tf32x3_split.hpp"
#include "cuda/sm90/fwd/tf32x3_storage.hpp"
#include "cuda/sm90/fwd/tf32x3_traits.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) forward_tf32x3_kernel(const __grid_constant__ TmaFwdParams tp) {
  extern __shared__ __align__(1024) char smem[];
  auto& s = *reinterpret_cast<Tf32x3FwdStorage<Traits>*>(smem);
  constexpr int kWarpgroup = Traits::kWarpgroupThreads;
  if (threadIdx.x == 0) {
    s.q_barriers.init(Traits::kConsumerThreads);
    s.k_barriers.init(Traits::kConsumerThreads);
    s.v_barriers.init(Traits::kConsumerThreads);
    s.k_split.init(Traits::kSplitThreads);
    s.v_split.init(Traits::kSplitThreads);
    s.items.barriers.init(Traits::kConsumerThreads + Traits::kSplitThreads);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int role = int(threadIdx.x) / kWarpgroup;  // producer, split, then the consumers
  if (role == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) produce<Traits>(tp, s);
  } else if (role == 1) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kSplitRegisters>();
    // After the consumer warpgroups' own barriers (epilogue.hpp).
    constexpr int kSplitBarrier = kWarpgroupBarrier + Traits::kConsumerWarpgroups;
    split_operands<Traits>(tp.p, s, int(threadIdx.x) - kWarpgroup, kSplitBarrier);
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
    consume_tf32x3<Traits>(tp.p, s, int(threadIdx.x) - 2 * kWarpgroup);
  }
}

}  // namespace memattn::cuda::sm90
