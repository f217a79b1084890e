// The Hopper forward's shared memory: the Q ring, the K and V rings (and the bias ring of the rows
// with a bias), the output tile, their barriers, and the ring of work items. Every tile starts at a
// 1024-byte boundary, the period of the 128-byte swizzle that TMA writes and wgmma reads.
//
// The output tile has its own space where the SM's 227 KB allow it (kSeparateOutput): then a Q
// tile is released as soon as the work item's last S GEMM completes, and where a second Q buffer
// fits too (kFwdQStages: D <= 128 without a bias) the next item's Q loads while this one's key
// tiles are still going round; with one buffer it waited for the last S GEMM, and at D = 128 the
// consumers reached the next item before its Q had landed. Otherwise (D = 192, 256, and the bias
// rows at D = 128) the output goes through the Q tile's space and Q is released after the
// epilogue's store has read it.
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

template <class Traits, int kQStages_>
struct FwdTiles : FwdBiasRing<Traits> {
  using Element = typename Traits::Element;
  static constexpr int kQStages = kQStages_;
  alignas(1024) Element q[kQStages][Traits::kTileElemsQ];
  alignas(1024) Element k[Traits::kStages][Traits::kTileElemsKV];
  alignas(1024) Element v[Traits::kStages][Traits::kTileElemsKV];
  RingBarriers<kQStages> q_barriers;
  RingBarriers<Traits::kStages> k_barriers;
  RingBarriers<Traits::kStages> v_barriers;
  // The work items, from the producer (which draws and decodes them) to the consumers: the one
  // the consumers are finishing, the one the producer loads and the next (for_each_drawn_item).
  FwdItemRing items;
};

// Whether the tiles with kQStages Q buffers and an output tile of their own fit (the 1024 bytes:
// the dynamic shared memory's start rounded up to the swizzle's period).
template <class Traits, int kQStages>
inline constexpr bool kFitsWithOutput =
    sizeof(FwdTiles<Traits, kQStages>) + Traits::kTileElemsQ * sizeof(typename Traits::Element) + 1024 <= kSmemPerCta;
template <class Traits>
inline constexpr bool kSeparateOutput = kFitsWithOutput<Traits, 1>;
template <class Traits>
inline constexpr int kFwdQStages = kFitsWithOutput<Traits, 2> ? 2 : 1;

template <class Traits, bool = kSeparateOutput<Traits>>
struct FwdSharedStorage : FwdTiles<Traits, 1> {
  static constexpr bool kOutputInQ = true;  // the epilogue writes where the next Q tile arrives by TMA
  __device__ typename Traits::Element* output(int q_stage) { return this->q[q_stage]; }
};
template <class Traits>
struct FwdSharedStorage<Traits, true> : FwdTiles<Traits, kFwdQStages<Traits>> {
  static constexpr bool kOutputInQ = false;
  alignas(1024) typename Traits::Element o[Traits::kTileElemsQ];
  __device__ typename Traits::Element* output(int) { return o; }
};

}  // namespace memattn::cuda::sm90
