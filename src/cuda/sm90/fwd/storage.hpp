// The Hopper forward's shared memory: the Q tile, the K and V rings (and the bias ring of the rows
// with a bias), the output tile, their barriers, and the ring of work items. Every tile starts at a
// 1024-byte boundary, the period of the 128-byte swizzle that TMA writes and wgmma reads.
//
// The output tile has its own space where the SM's 227 KB allow it (kSeparateOutput): then the Q
// tile is released as soon as the work item's last S GEMM completes, and the next item's Q and
// first K/V tiles load during its last P V and its epilogue. Otherwise (D = 256) the output goes
// through the Q tile's space and Q is released after the epilogue.
#pragma once

#include <cstddef>

#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

// The bias ring of FwdBiasTraits rows; nothing (an empty base) in the others.
template <class Traits, bool = Traits::kBiasTile>
struct FwdBiasRing {};
template <class Traits>
struct FwdBiasRing<Traits, true> {
  alignas(1024) typename Traits::Element bias[Traits::kBiasStages][Traits::kTileElemsBias];
  RingBarriers<Traits::kBiasStages> bias_barriers;
};

template <class Traits>
struct FwdTiles : FwdBiasRing<Traits> {
  using Element = typename Traits::Element;
  alignas(1024) Element q[Traits::kTileElemsQ];
  alignas(1024) Element k[Traits::kStages][Traits::kTileElemsKV];
  alignas(1024) Element v[Traits::kStages][Traits::kTileElemsKV];
  RingBarriers<1> q_barriers;  // a ring of one: the next Q tile loads once this one is released
  RingBarriers<Traits::kStages> k_barriers;
  RingBarriers<Traits::kStages> v_barriers;
  // The work items, from the producer (which draws and decodes them) to the consumers: the one
  // the consumers are finishing, the one the producer loads and the next (for_each_drawn_item).
  FwdItemRing items;
};

template <class Traits>
inline constexpr bool kSeparateOutput =
    sizeof(FwdTiles<Traits>) + Traits::kTileElemsQ * sizeof(typename Traits::Element) + 1024 <= kSmemPerCta;

template <class Traits, bool = kSeparateOutput<Traits>>
struct FwdSharedStorage : FwdTiles<Traits> {
  static constexpr bool kOutputInQ = true;  // the epilogue writes where the next Q tile arrives by TMA
  __device__ typename Traits::Element* output() { return this->q; }
};
template <class Traits>
struct FwdSharedStorage<Traits, true> : FwdTiles<Traits> {
  static constexpr bool kOutputInQ = false;
  alignas(1024) typename Traits::Element o[Traits::kTileElemsQ];
  __device__ typename Traits::Element* output() { return o; }
};

}  // namespace memattn::cuda::sm90
