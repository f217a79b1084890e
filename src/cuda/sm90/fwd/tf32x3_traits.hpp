// Compile-time shape of the Hopper forward for fp32 tensors (tf32x3_kernel.hpp): every product as
// three TF32 warpgroup MMAs (3xTF32, common/tf32x3.hpp: each fp32 operand x split into big =
// x rounded to TF32 and small = x - big rounded to TF32; small x big + big x small + big x big).
//
// TF32 wgmma reads both operands K-major, so V must reach P V transposed (keys contiguous), and
// every operand needs its two parts in shared memory or registers. A CTA has four warpgroups: the
// producer (one thread issues the TMA loads, as in the 16-bit forward), the split warpgroup
// (tf32x3_split.hpp: each K tile split in place into big parts plus a small-part buffer, each V
// tile rewritten in place as V^T's big parts plus a small-part buffer, once per CTA instead of
// once per consumer), and two consumer warpgroups of 64 query rows, which split their own Q rows
// when a work item starts, into registers as the A operand of their products (kQSmallInRegisters:
// where the small parts do not fit, they stay in place; Q in shared memory at all leaves room for
// no more than two K/V stages of 32 keys at D = 128).
//
// Registers (setmaxnreg): the producer keeps 24 per thread, the split warpgroup kSplitRegisters
// (a thread holds its share of a V tile, kSplitBlocks 4 x 4 blocks, between the reads and the
// writes of the in-place transpose), each consumer the rest: the fp32 output and each of Q's parts
// it holds (kHeadDim / 2 each), the scores and two partial sums of them (kBlockN / 2 each), P's two
// parts, and a key tile's P V sum over kPvCols output columns at a time.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/tf32x3.hpp"
#include "cuda/sm90/gmma.hpp"
#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

template <int kHeadDim_, int kBlockN_, int kStages_>
struct Tf32x3FwdTraits {
  using Element = float;             // what the tensors hold and TMA loads
  using Operand = cute::tfloat32_t;  // what the tensor cores read (the same 32 bits, rounded)
  static constexpr int kHeadDim = kHeadDim_;  // D and Dv both up to this; the rest arrives as zeros
  static constexpr int kBlockN = kBlockN_;    // keys per tile
  static constexpr int kStages = kStages_;    // K and V buffers each
  static constexpr bool kBiasTile = false;     // no bias on these rows
  static constexpr int kBiasStages = 1;
  static_assert(kHeadDim % 64 == 0 && kBlockN % 32 == 0);

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
  static constexpr int kSplitThreads = kWarpgroupThreads;
  static constexpr int kThreads = 2 * kWarpgroupThreads + kConsumerThreads;  // producer, split, consumers

  // V's in-place transpose moves 4 keys x 4 columns per block (16-byte reads and writes).
  static constexpr int kSplitBlocks = kBlockN * kHeadDim / 16 / kSplitThreads;
  static_assert(kSplitBlocks * 16 * kSplitThreads == kBlockN * kHeadDim);
  // Of the SM's 65536 registers 64512 are shared out (setmaxnreg counts in multiples of 8).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kSplitRegisters = 64;
  static constexpr int kConsumerRegisters =
      (64512 / kWarpgroupThreads - kProducerRegisters - kSplitRegisters) / kConsumerWarpgroups / 8 * 8;

  using SmemLayoutQ = KMajorTile<Operand, kBlockM, kHeadDim>;
  using SmemLayoutK = KMajorTile<Operand, kBlockN, kHeadDim>;   // K, and V as TMA writes it
  using SmemLayoutVt = KMajorTile<Operand, kHeadDim, kBlockN>;  // V^T as the split warpgroup rewrites it
  static constexpr int kTileElemsQ = kBlockM * kHeadDim;
  static constexpr int kTileElemsKV = kBlockN * kHeadDim;
  static constexpr std::uint32_t kTileBytesQ = kTileElemsQ * sizeof(Element);
  static constexpr std::uint32_t kTileBytesKV = kTileElemsKV * sizeof(Element);

  // Head-dim k-blocks (of 8) per sum of S = Q K^T in a fresh accumulator: the mma.sync rows'
  // (kTf32x3KBlocksPerSum), so that these scores are theirs and their backward's, bit for bit.
  static constexpr int kScoreSumKBlocks = kTf32x3KBlocksPerSum;
  static constexpr int kScoreSums = kHeadDim / 8 / kScoreSumKBlocks;
  static_assert(kScoreSums * 8 * kScoreSumKBlocks == kHeadDim);

  // Q's big parts are the A operand of two of S's three products and stay in registers; its small
  // parts too where they fit beside the rest (D = 64), else in shared memory (in place). Shared
  // memory's bandwidth is what the split warpgroup and the GEMMs share (ncu at D = 128: 77% busy).
  static constexpr bool kQSmallInRegisters = kHeadDim <= 64;

  // P V's sums run over kPvCols output columns at a time (kPvChunks of them).
  static constexpr int kPvCols = 64;
  static constexpr int kPvChunks = kHeadDim / kPvCols;

  using WarpgroupsAlongM = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  using ShapeS = Shape<_64, Int<kBlockN>, Int<kHeadDim>>;
  using MmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<Operand, Operand, float, ShapeS>(), WarpgroupsAlongM{}));
  using MmaSRegQ = decltype(make_tiled_mma(GMMA::rs_op_selector<Operand, Operand, float, ShapeS>(), WarpgroupsAlongM{}));
  // The whole output (its fragment, for the softmax and the epilogue), and one chunk of P V.
  using MmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Operand, Operand, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>>(), WarpgroupsAlongM{}));
  using MmaPv = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Operand, Operand, float, Shape<_64, Int<kPvCols>, Int<kBlockN>>>(), WarpgroupsAlongM{}));
};

}  // namespace memattn::cuda::sm90
