// The Hopper backward's shared memory: K and V (one work item's), the ring of Q, dO and row
// statistics, two dS^T tiles (a step writes one while the other is still read by the previous
// step's dQ GEMM), two dQ stages (dq_out.hpp), the work items' ring, and the barriers. Every
// tile starts at a 1024-byte boundary, the period of the 128-byte swizzle that TMA writes and
// wgmma reads.
#pragma once

#include "cuda/sm90/bwd/dq_out.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
struct BwdSharedStorage {
  using Element = typename Traits::Element;
  static constexpr int kStages = Traits::kStages;
  alignas(1024) Element k[Traits::kTileElemsKV];
  alignas(1024) Element v[Traits::kTileElemsKV];
  alignas(1024) Element q[kStages][Traits::kTileElemsQ];
  alignas(1024) Element dout[kStages][Traits::kTileElemsQ];
  alignas(1024) Element ds[2][Traits::kTileElemsP];
  // Laid out as the dQ workspace's tile (GradAccum::swizzled), so that it leaves by one bulk reduction.
  alignas(1024) float dq[2][Traits::kBlockM * Traits::kHeadDim];
  float lse2[kStages][Traits::kBlockM];  // staged_lse, +inf past the sequence's rows
  float delta[kStages][Traits::kBlockM];
  RingBarriers<1> kv_barriers;
  RingBarriers<kStages> q_barriers;  // Q and dO by TMA, the statistics by the producer warp's lanes
  // Variable lengths: where Q and dO land when their box crosses the sequence's end, before the
  // producer warp zeroes the rows past it (producer.hpp).
  std::uint64_t q_landed;
  // The work items, from the query producer (which draws them) to the K and V producer and the
  // consumers: one slot more than the Q ring has stages (the drawer runs up to kStages steps
  // ahead of the consumers).
  IndexRing<kStages + 1> items;
  DqHandoff dq_handoff;  // deterministic: the dQ stages' barriers with the dQ writer
};

}  // namespace memattn::cuda::sm90
