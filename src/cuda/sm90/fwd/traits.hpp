// Compile-time shape of the Hopper forward (kernel.hpp): roles, tiles, shared-memory layouts and
// the two warpgroup MMAs.
//
// A CTA has a producer warpgroup (one thread of it issues every TMA load) and kConsumerWarpgroups
// (two, or three at D = 64) consumer warpgroups of 64 query rows each, so the query tile is
// 64 * kConsumerWarpgroups rows.
// Registers move from the producer to the consumers (setmaxnreg): the producer keeps
// kProducerRegisters per thread, each consumer kConsumerRegisters, which holds the fp32 output
// (kHeadDim / 2 per thread), one fp32 score tile (kBlockN / 2) and its 16-bit copy as the A
// operand of P V.
//
// Shared memory (storage.hpp): the Q tile, kStages buffers each of K and V and the output tile,
// in the GMMA K-major 128-byte-swizzled layout that the TMA boxes fill (tma_map.hpp). S =
// Q K^T reads both operands from shared memory; O += P V takes P from registers and reads V with
// the head dim contiguous (MN-major).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

// How the two consumer warpgroups share the tensor cores: each issues its GEMMs when ready
// (independent), or they take turns (ping_pong, mainloop.hpp's GemmTurns).
enum class ConsumerSchedule { independent, ping_pong };

template <class Element_, int kHeadDim_, int kBlockN_, int kStages_, ConsumerSchedule kSchedule_,
          int kConsumerWarpgroups_>
struct FwdTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, cute::half_t>);
  static constexpr int kHeadDim = kHeadDim_;  // D and Dv both up to this; the rest arrives as zeros
  static constexpr int kBlockN = kBlockN_;    // keys per tile
  static constexpr int kStages = kStages_;    // K and V buffers each
  static constexpr ConsumerSchedule kSchedule = kSchedule_;
  static constexpr bool kBiasTile = false;  // FwdBiasTraits below says true
  static constexpr int kBiasStages = 1;     // of the bias ring (a position nothing advances without one)
  static constexpr bool kDropout = false;   // FwdDropoutTraits below says true
  static_assert(kHeadDim % kTmaBoxCols<Element> == 0 && kBlockN % 16 == 0 && kBlockN <= 256);

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3);
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;  // queries per CTA (the kernel table's block_m)
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
  static constexpr int kThreads = kWarpgroupThreads + kConsumerThreads;  // the producer warpgroup first
  // Of the SM's 65536 registers 64512 are shared out (setmaxnreg counts in multiples of 8 per
  // thread): the producer's 24 per thread, the rest evenly over the consumers (two: 240, three: 160).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters =
      (64512 / kWarpgroupThreads - kProducerRegisters) / kConsumerWarpgroups / 8 * 8;

  using SmemLayoutQ = KMajorTile<Element, kBlockM, kHeadDim>;
  using SmemLayoutK = KMajorTile<Element, kBlockN, kHeadDim>;
  using SmemLayoutVt = TransposedTile<Element, kHeadDim, kBlockN>;  // V's bytes as P V's B operand
  static constexpr int kTileElemsQ = kBlockM * kHeadDim;
  static constexpr int kTileElemsKV = kBlockN * kHeadDim;
  static constexpr std::uint32_t kTileBytesQ = kTileElemsQ * sizeof(Element);
  static constexpr std::uint32_t kTileBytesKV = kTileElemsKV * sizeof(Element);

  // Each consumer warpgroup one 64-row atom; the warpgroups stacked along the queries.
  using WarpgroupsAlongM = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  using MmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(), WarpgroupsAlongM{}));
  using MmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      WarpgroupsAlongM{}));
};

// A forward row with a bias (kBias | kBiasTile rows): each (query tile, key tile)'s bias arrives by
// TMA in a ring of its own, in the 128-byte-swizzled K-major layout of the Q tile (64-column boxes
// of kBlockM rows; score_mods.hpp's SwizzledBias reads it). Two stages: the producer loads tile
// n + 1's bias while the consumers add tile n's.
template <class Base>
struct FwdBiasTraits : Base {
  static constexpr bool kBiasTile = true;
  static constexpr int kBiasStages = 2;
  static_assert(Base::kBlockN % kTmaBoxCols<typename Base::Element> == 0, "the bias tile is whole TMA boxes");
  static constexpr int kTileElemsBias = Base::kBlockM * Base::kBlockN;
  static constexpr std::uint32_t kTileBytesBias = kTileElemsBias * sizeof(typename Base::Element);
};

// A forward row with dropout (kDropout | kDropoutPaired rows): each tile's probabilities lose the
// elements that core/philox.hpp's stream drops (dropout.hpp, each Philox call shared by the two
// lanes that hold its four keys) after the row sums have taken them and before P V; the output is
// scaled by 1 / (1 - p) at the end. The mask is a function of (seed, offset, b, h, i, j) alone, so
// the backward's rows (any family) regenerate it bit for bit.
template <class Base>
struct FwdDropoutTraits : Base {
  static constexpr bool kDropout = true;
};

}  // namespace memattn::cuda::sm90
