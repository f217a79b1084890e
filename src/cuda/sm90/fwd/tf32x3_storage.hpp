// The fp32 Hopper forward's shared memory: each operand's TF32 big parts where TMA wrote the fp32
// tile (split in place) and its small parts beside them; the rings of the loads and of the split
// warpgroup's signals; the ring of work items. Every tile starts at a 1024-byte boundary, the
// period of the 128-byte swizzle.
//
// A K or V buffer goes round as: TMA fills it (k_barriers.full), the split warpgroup rewrites it
// and fills its small parts (k_split), the consumers read both and release it (k_barriers.empty),
// which frees the small parts too. The output tile goes through the Q tile's space, released
// after the epilogue (with two stages: 160 KB at D = 64 with 64-key tiles, 192 KB at D = 128 with
// 32-key tiles).
#pragma once

#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
struct Tf32x3FwdStorage {
  using Operand = typename Traits::Operand;
  static constexpr int kQStages = 1;
  alignas(1024) Operand q[kQStages][Traits::kTileElemsQ];  // Q, then the small parts kept in place (kQSmallInRegisters)
  alignas(1024) Operand k[Traits::kStages][Traits::kTileElemsKV];
  alignas(1024) Operand k_small[Traits::kStages][Traits::kTileElemsKV];
  alignas(1024) Operand v[Traits::kStages][Traits::kTileElemsKV];  // V, then V^T's big parts
  alignas(1024) Operand v_small[Traits::kStages][Traits::kTileElemsKV];
  RingBarriers<kQStages> q_barriers;
  RingBarriers<Traits::kStages> k_barriers;
  RingBarriers<Traits::kStages> v_barriers;
  ReadyBarriers<Traits::kStages> k_split;
  ReadyBarriers<Traits::kStages> v_split;
  // Work items from the producer to the consumers and the split warpgroup (storage.hpp's items).
  FwdItemRing items;
  static constexpr bool kOutputInQ = true;
  __device__ float* output(int q_stage) { return reinterpret_cast<float*>(q[q_stage]); }
};

}  // namespace memattn::cuda::sm90
