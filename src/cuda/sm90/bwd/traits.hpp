// Compile-time shape of the Hopper backward (kernel.hpp): roles, tiles and the five warpgroup MMAs.
//
// A CTA owns kBlockN keys of one (sequence, kv head), 64 per consumer warpgroup, and steps through
// the queries that see them kBlockM at a time. Producer warps load K and V once per work item and
// each step's Q, dO (TMA) and row statistics into a ring of kStages; the consumer warpgroups run
// the one-pass backward's GEMMs with the keys as wgmma rows (sm90/one_pass_gemms.hpp's
// OnePassGmmaKeyRowsGemms): S^T = K Q^T and dP^T = V dO^T, P^T and dS^T from their registers into
// dV += P^T dO and dK += dS^T Q, and dQ = dS K from shared memory. Registers move from the
// producer warpgroup to the consumers (setmaxnreg): 24 and 240 per thread.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/swizzled_tiles.hpp"
#include "cuda/sm90/one_pass_gemms.hpp"
#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct BwdTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, cute::half_t>);
  static constexpr int kHeadDim = kHeadDim_;  // D and Dv both up to this; the rest arrives as zeros
  static constexpr int kBlockM = kBlockM_;    // queries per step
  static constexpr int kBlockN = kBlockN_;    // keys per CTA
  static constexpr int kStages = kStages_;    // Q, dO and row-statistics buffers
  static constexpr unsigned kFeatures = kPlain;  // gradient_tile's; BwdDropoutTraits below adds dropout
  static_assert(kHeadDim % kTmaBoxCols<Element> == 0 && kBlockN == 128 && kStages >= 2);

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerWarpgroups = kBlockN / 64;
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
  static constexpr int kThreads = kWarpgroupThreads + kConsumerThreads;  // the producer warpgroup first
  // The producer warpgroup's first warp loads Q, dO and the statistics, one thread of its second
  // K and V; the rest exit.
  static constexpr int kProducerThreads = 32;
  // Of the SM's 65536 registers 64512 are shared out (setmaxnreg counts in multiples of 8).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters =
      (64512 / kWarpgroupThreads - kProducerRegisters) / kConsumerWarpgroups / 8 * 8;

  // dQ in one piece: a whole row of it fits beside the dK and dV accumulators up to D = 128.
  static_assert(kHeadDim <= 128);
  using Gemms = OnePassGmmaKeyRowsGemms<Element, kBlockM, kBlockN, kHeadDim, kHeadDim>;
  using MmaSdp = typename Gemms::MmaSdp;
  using MmaDkv = typename Gemms::MmaDkv;
  using MmaDq = typename Gemms::MmaDq;
  using SmemLayoutQ = typename Gemms::SmemLayoutQ;    // Q, dO as TMA writes them
  using SmemLayoutQt = typename Gemms::SmemLayoutQt;
  using SmemLayoutKV = typename Gemms::SmemLayoutKV;  // K, V as TMA writes them
  using SmemLayoutKt = typename Gemms::SmemLayoutKt;
  using SmemLayoutPt = typename Gemms::SmemLayoutPt;  // dS^T
  using SmemLayoutP = typename Gemms::SmemLayoutP;
  // A warpgroup's stores: its fragments into shared memory, then 16-byte row segments to global.
  using Tiles = SwizzledTiles<Element, kWarpgroupThreads>;

  static constexpr int kTileElemsQ = kBlockM * kHeadDim;
  static constexpr int kTileElemsKV = kBlockN * kHeadDim;
  static constexpr int kTileElemsP = kBlockM * kBlockN;
  static constexpr std::uint32_t kTileBytesQ = kTileElemsQ * sizeof(Element);
  static constexpr std::uint32_t kTileBytesKV = kTileElemsKV * sizeof(Element);
  static_assert(int(cosize_v<SmemLayoutQ>) == kTileElemsQ && int(cosize_v<SmemLayoutKV>) == kTileElemsKV &&
                int(cosize_v<SmemLayoutPt>) == kTileElemsP);
};

// A backward row with dropout (kDropout | kDropoutPaired rows): each step's P^T and dS^T take the
// keep mask of dropout_keep() (the forward's, regenerated from (seed, offset, b, h, i, j)), each
// Philox call shared by the four lanes that hold its keys (dropout.hpp, ScoreRows::keys).
template <class Base>
struct BwdDropoutTraits : Base {
  static constexpr unsigned kFeatures = kDropout | kDropoutPaired;
};

}  // namespace memattn::cuda::sm90
