// The Hopper forward's shared memory: the Q tile (the output tile too, in the epilogue), the K
// and V rings, and their barriers. Every tile starts at a 1024-byte boundary, the period of the
// 128-byte swizzle that TMA writes and wgmma reads.
#pragma once

#include "cuda/sm90/fwd/pipeline.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
struct FwdSharedStorage {
  using Element = typename Traits::Element;
  alignas(1024) Element q[Traits::kTileElemsQ];
  alignas(1024) Element k[Traits::kStages][Traits::kTileElemsKV];
  alignas(1024) Element v[Traits::kStages][Traits::kTileElemsKV];
  RingBarriers<1> q_barriers;  // a ring of one: the Q tile is loaded again once the epilogue is done with it
  RingBarriers<Traits::kStages> k_barriers;
  RingBarriers<Traits::kStages> v_barriers;
};

}  // namespace memattn::cuda::sm90
