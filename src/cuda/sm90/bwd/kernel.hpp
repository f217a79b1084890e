// The Hopper backward (sm_90a), problems without a bias (fixed or variable lengths; dropout on
// BwdDropoutTraits rows) with D, Dv up to kHeadDim: a persistent, warp-specialised one-pass
// backward. One CTA per SM draws work items (key tiles) as it finishes one (tile_scheduler.hpp), so
// that the next item's Q and dO load during the last one's final steps and no CTA is launched per
// item. Two producer warps load K and V, and Q, dO (TMA) and the row statistics (producer.hpp); the
// consumer warpgroups compute dK, dV and each step's dQ, which leaves by bulk reductions into the
// fp32 workspace (mainloop.hpp, dq_out.hpp; `deterministic`: by a third producer warp, in key-tile
// order, dq_writer.hpp), then write dK and dV (epilogue.hpp).
// Registers move from the producer warpgroup to the consumers (setmaxnreg; it needs the register
// cap of __launch_bounds__(threads, 1)).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/bwd/dq_writer.hpp"
#include "cuda/sm90/bwd/mainloop.hpp"
#include "cuda/sm90/bwd/params.hpp"
#include "cuda/sm90/bwd/producer.hpp"
#include "cuda/sm90/bwd/storage.hpp"
#include "cuda/sm90/bwd/traits.hpp"

namespace memattn::cuda::sm90 {

template <class Traits, DqAdds kAdds>
__global__ void __launch_bounds__(Traits::kThreads, 1) backward_kernel(const __grid_constant__ TmaBwdParams tp) {
  extern __shared__ __align__(1024) char smem[];
  auto& s = *reinterpret_cast<BwdSharedStorage<Traits>*>(smem);
  if (threadIdx.x == 0) {
    s.kv_barriers.init(Traits::kConsumerThreads);
    // The TMA lane's arrival with the bytes, and every producer lane's after its statistics.
    s.q_barriers.init(Traits::kConsumerThreads, 1 + Traits::kProducerThreads);
    FullBarrier::init(&s.q_landed, 1);  // the TMA lane's arrival with the bytes
    // Read by the consumers and the K and V thread (and the dQ writer: deterministic).
    s.items.barriers.init(Traits::kConsumerThreads + (kAdds == DqAdds::key_tile_order ? 2 : 1));
    if constexpr (kAdds == DqAdds::key_tile_order) s.dq_handoff.init(Traits::kConsumerThreads);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < Traits::kWarpgroupThreads) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (threadIdx.x < Traits::kProducerThreads) produce_queries<Traits, kAdds>(tp, s, int(threadIdx.x));
    else if (threadIdx.x == Traits::kProducerThreads) produce_keys<Traits, kAdds>(tp, s);
    else if (kAdds == DqAdds::key_tile_order && threadIdx.x == 2 * Traits::kProducerThreads)
      write_dq_in_order<Traits>(tp.p, s);
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
    consume<Traits, kAdds>(tp.p, s, int(threadIdx.x) - Traits::kWarpgroupThreads);
  }
}

}  // namespace memattn::cuda::sm90
