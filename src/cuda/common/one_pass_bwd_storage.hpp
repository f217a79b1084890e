// The one-pass backward's shared storage (one_pass_bwd_kernel.hpp): K, V, Q, dO, P and dS tiles,
// the step's row statistics, the dQ stage, and what only some rows have (a bias tile, the
// cluster exchange's barriers).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/bias_tile.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda {

using namespace cute;

// The tiles every one-pass row has: K, V (the CTA's keys), Q, dO (a step's queries), P, dS; the
// step's LSE (base 2) and delta; then the step's dQ in fp32 on its way to the workspace (rows of
// kDqLd floats: the padding puts the eight rows of an m16n8 atom's stores on different banks; the
// kBulkDq rows' stage has no padding and is swizzled instead, stage_swizzle). With kHeadSplit > 1
// the slots of the S and dP partial sums the cluster's CTAs exchange (sm90::PartialSums) are the
// dQ stage's memory (free from a step's start to its dQ GEMM; the CTA releases the slots after its
// dQ flush); with Traits::kSdpSlices > 1 so are sdp_split_head_dim's partial sums.
template <class Traits>
struct OnePassBwdTiles {
  using Element = typename Traits::Element;
  static constexpr int kDqLd = Traits::Gemms::kBulkDq ? Traits::kHeadDim : Traits::kHeadDim + 8;
  static constexpr int kSplit = Traits::kHeadSplit;
  // The exchange of kSplit > 1 rows (a pair's type stands in for kSplit = 1, unused).
  using Exchange = sm90::PartialSums<Traits::kThreads, (kSplit > 1 ? kSplit : 2)>;
  using BiasTile = BiasTileShape<Traits::kBlockM, Traits::kBlockN>;

  Element k[Traits::kSmemElemsKV];
  Element v[Traits::kSmemElemsKV];
  Element q[Traits::kSmemElemsQ];
  Element dout[Traits::kSmemElemsQ];
  Element p[Traits::kSmemElemsP];
  Element ds[Traits::kSmemElemsP];
  float lse2[Traits::kBlockM];
  float delta[Traits::kBlockM];
  float dq_stage[Traits::kBlockM * kDqLd];

  static constexpr int kScoreFloats = 2 * Traits::kBlockM * Traits::kBlockN;  // S and dP
  static_assert(kSplit == 1 || Traits::kSdpSlices == 1, "split rows compute S and dP in one slice");
  static_assert(kSplit == 1 || Exchange::slot_bytes(kScoreFloats / Traits::kThreads) <= int(sizeof(dq_stage)),
                "the exchange's slots fit the dQ stage");
  static_assert(Traits::kSdpSlices == 1 || 2 * Traits::kSdpSlices * (Traits::kBlockN + 8) <= kDqLd,
                "the S/dP partials fit the dQ stage");
};

// The storage: the tiles, then in the kBiasTile rows the bias of the step's (query tile, key tile)
// (BiasTileShape), which gradient_tile overwrites with dS when dbias leaves from it
// (p.dbias_tile), or with kHeadSplit > 1 the exchange's barriers. The tiles end on a 16-byte
// boundary, where either starts.
template <class Traits, unsigned kFeatures, bool = tiles_bias(kFeatures), bool = (Traits::kHeadSplit > 1)>
struct OnePassBwdSharedStorage : OnePassBwdTiles<Traits> {
  static constexpr bool kTileBias = false, kExchange = false;
};
template <class Traits, unsigned kFeatures>
struct OnePassBwdSharedStorage<Traits, kFeatures, true, false> : OnePassBwdTiles<Traits> {
  static constexpr bool kTileBias = true, kExchange = false;
  static_assert(sizeof(OnePassBwdTiles<Traits>) % 16 == 0);
  char bias[OnePassBwdTiles<Traits>::BiasTile::kBytes];
};
template <class Traits, unsigned kFeatures>
struct OnePassBwdSharedStorage<Traits, kFeatures, false, true> : OnePassBwdTiles<Traits> {
  static constexpr bool kTileBias = false, kExchange = true;
  static_assert(sizeof(OnePassBwdTiles<Traits>) % 16 == 0);
  std::uint64_t exchange_barriers[OnePassBwdTiles<Traits>::Exchange::kBarriers];
};

// What the one-pass kernel's exchange needs when there is none (kHeadSplit = 1): nothing.
struct NoExchange {};

// The cluster's exchange of S and dP partial sums over the storage's slots (the dQ stage) and
// barriers, for the CTA of rank `rank`; NoExchange without a cluster.
template <class Storage>
__device__ __forceinline__ auto exchange_of(Storage& storage, int rank) {
  if constexpr (Storage::kExchange) return typename Storage::Exchange(storage.dq_stage, storage.exchange_barriers, rank);
  else return NoExchange{};
}

}  // namespace memattn::cuda
