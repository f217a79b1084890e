// The backward in one pass over the scores (register accumulators, head dims 64 to 512, and
// 1024 split over a pair of CTAs on sm_90).
//
// One CTA owns kBlockN keys of one (sequence, kv head) and walks, for every query head of the kv
// head's group, the query tiles that can see them. Per tile: S = Q K^T and dP = dO V^T, P and
// dS elementwise (gradient_tile), both written to shared memory; then dV += P^T dO and
// dK += dS^T Q into the CTA's register accumulators, and dQ = dS K added to an fp32 workspace
// with atomics (not bit-reproducible: `deterministic` takes the two-kernel rows).
//
// Why this layout (OnePassBwdTraits): the two-kernel rows give each warp 16 full-width rows, so
// every warp reads whole Q, dO (or K, V) tiles from shared memory for each tile; ncu found their
// shared-memory pipe at 73-87% of its peak (H100, 2026-11-22 (5)). Here every GEMM has its own
// warp grid and each warp reads only its share, which with the single pass over S and dP (five
// GEMMs instead of seven) cuts the shared-memory bytes per useful FLOP by ~40%, and a D = 256
// tile's dK and dV fit in the registers of 8 warps. dQ goes through shared memory to the
// workspace (stage_fragment, then DqBlockFlush or flush_staged); with that the rows are the plain
// default at D = 128 and 256 (docs/perf-notes.md, 2026-11-22 (6)). The workspace is head-major,
// so a step's dQ tile is one block there, and its atomics are issued during the next step's S (and
// dP) MMAs (2026-11-22 (13)); P's exponentials during the dP MMAs (2026-11-23 (17)). The wgmma
// rows (GemmKind::wgmma, family 90) add the block with one bulk reduction instead, issued by one
// thread (kBulkDq, 2026-11-23 (21)).
//
// Pipelining: the next tile's Q and dO are loaded (cp.async) as soon as the dK GEMM has read
// this tile's, so the loads overlap the dQ GEMM and its atomics; its LSE and delta are fetched
// into registers at the same time and staged in shared memory after the atomics.
//
// The last wave: when the key tiles are not a whole number of waves, the tiles of the part-full
// last one are split along their query steps over several CTAs, which meet in the workspace
// before dK and dV are written (tail_split.hpp, gather_split_tile).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/one_pass_bwd_traits.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/bulk_reduce.hpp"
#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda {

using namespace cute;

// Shared memory, in elements: K, V, Q, dO, P, dS; then the query tile's LSE (base 2) and delta,
// then the tile's dQ in fp32 on its way to the workspace (rows of kDqLd floats: the padding puts
// the eight rows of an m16n8 atom's stores on different banks; the kBulkDq rows' stage has no
// padding and is swizzled instead, stage_swizzle).
// With kBiasTile rows, then the bias of the step's (query tile, key tile) (BiasTileShape),
// which gradient_tile overwrites with dS when dbias leaves from it (p.dbias_tile). With
// kHeadSplit > 1, the slots of the S and dP partial sums the cluster's CTAs exchange
// (sm90::PartialSums) are the dQ stage's memory (free from a step's start to its dQ GEMM; the CTA
// releases the slots after its dQ flush), and the exchange's barriers follow the rest.
template <class Traits, unsigned kFeatures>
struct OnePassBwdSmem {
  static constexpr int kK = 0;
  static constexpr int kV = kK + Traits::kSmemElemsKV;
  static constexpr int kQ = kV + Traits::kSmemElemsKV;
  static constexpr int kDo = kQ + Traits::kSmemElemsQ;
  static constexpr int kP = kDo + Traits::kSmemElemsQ;
  static constexpr int kDs = kP + Traits::kSmemElemsP;
  static constexpr int kStatsOffset = (kDs + Traits::kSmemElemsP) * int(sizeof(typename Traits::Element));
  static constexpr int kDqLd = Traits::Gemms::kBulkDq ? Traits::kHeadDim : Traits::kHeadDim + 8;
  static constexpr int kDqOffset = kStatsOffset + 2 * Traits::kBlockM * int(sizeof(float));
  using BiasTile = BiasTileShape<Traits::kBlockM, Traits::kBlockN>;
  static constexpr int kBiasOffset = kDqOffset + Traits::kBlockM * kDqLd * int(sizeof(float));
  static constexpr int kEnd = (kBiasOffset + (tiles_bias(kFeatures) ? BiasTile::kBytes : 0) + 15) / 16 * 16;
  static constexpr int kSplit = Traits::kHeadSplit;
  // The exchange of kSplit > 1 rows (a pair's type stands in for kSplit = 1, unused).
  using Exchange = sm90::PartialSums<Traits::kThreads, (kSplit > 1 ? kSplit : 2)>;
  static constexpr int kScoreFloats = 2 * Traits::kBlockM * Traits::kBlockN;  // S and dP
  static constexpr int kExchangeSlotBytes = Exchange::slot_bytes(kScoreFloats / Traits::kThreads);
  static constexpr int kExchangeOffset = kDqOffset;
  static constexpr int kExchangeBarrierOffset = kEnd;
  static constexpr int kBytes =
      kSplit > 1 ? kExchangeBarrierOffset + Exchange::kBarriers * int(sizeof(std::uint64_t)) : kEnd;
  static_assert(kExchangeOffset % 16 == 0 && kExchangeBarrierOffset % 8 == 0);
  // sdp_split_head_dim also stages in the dQ stage, in the middle of the exchange's lifetime.
  static_assert(kSplit == 1 || Traits::kSdpSlices == 1, "split rows compute S and dP in one slice");
  static_assert(kSplit == 1 || kExchangeSlotBytes <= Traits::kBlockM * kDqLd * int(sizeof(float)),
                "the exchange's slots fit the dQ stage");
  // sdp_split_head_dim's partial sums use the dQ stage.
  static_assert(Traits::kSdpSlices == 1 ||
                2 * Traits::kSdpSlices * (Traits::kBlockN + 8) <= kDqLd, "the S/dP partials fit the dQ stage");
};

// One query row's LSE and delta as loaded (thread r holds row r of the tile; load_row_stats'
// addressing), so that the loads can be issued a step before shared memory is free for them.
struct RowStat {
  float lse = INFINITY;  // rows past the sequence: +inf, so that their P is 0
  float delta = 0.0f;
};

// `lse` and `delta`: the step's first row's.
__device__ __forceinline__ RowStat fetch_row_stat(const BwdParams& p, const float* lse, const float* delta, int rows) {
  RowStat s;
  if (int(threadIdx.x) < rows) {
    s.lse = __ldg(lse + threadIdx.x * p.lse_row_stride);
    s.delta = __ldg(delta + threadIdx.x);
  }
  return s;
}

// Thread r stages row r's statistics as gradient_tile reads them.
template <int kRows>
__device__ __forceinline__ void stage_row_stat(const RowStat& s, float* lse2, float* delta) {
  if (threadIdx.x < kRows) {
    lse2[threadIdx.x] = lse_base2(s.lse);
    delta[threadIdx.x] = s.delta;
  }
}

// dQ leaves the CTA through shared memory: the fragments are staged there, then every warp adds
// whole 128-byte row segments to the workspace (one cache line per atomic instruction; straight
// from the fragments, an instruction touches eight rows' lines, four floats each). ncu: the
// fragment atomics held L2 at 83% of its peak at D = 256; 16-byte vector atomics from the
// fragments (four columns per lane) ran 1.8x slower still (H100, 2026-11-22 (6)); from the staged
// rows (sm_90's red.v4.f32, a quarter of the instructions) they changed nothing (2026-11-22 (8)).
// An m16n8 fp32 accumulator holds each pair of neighbouring columns in consecutive registers.
// `swizzle`: an XOR on every column index (0: a plain row-major stage).
template <class Acc, class Coord>
__device__ __forceinline__ void stage_fragment(const Acc& acc, const Coord& coord, float* stage, int ld, int col0,
                                               int swizzle = 0) {
  CUTE_UNROLL
  for (int e = 0; e < size(acc); e += 2) {
    const int row = get<0>(coord(e)), col = col0 + get<1>(coord(e));
    *reinterpret_cast<float2*>(stage + row * ld + (col ^ swizzle)) = make_float2(acc(e), acc(e + 1));
  }
}

// The kBulkDq rows stage dQ unpadded and laid out as the workspace with GradAccum::swizzled
// (accum_swizzle of the row in its (b, h): `phase` is the tile's first workspace row, mod 8). The eight
// rows of a fragment store then fall on different bank groups (two wavefronts, as with padding),
// and the staged tile is the workspace tile byte for byte, so that it leaves by one bulk
// reduction. The rows a thread holds are 8 apart (m16n8 and wgmma fragments): one XOR for all of
// them. `swizzled` false: a plain stage (workspace rows wider than the tile).
template <class Coord>
__device__ __forceinline__ int stage_swizzle(const Coord& coord, int phase, bool swizzled) {
  return swizzled ? accum_swizzle(phase + get<0>(coord(0))) : 0;
}

// S = Q K^T and dP = dO V^T with the head dim split over the warps (Traits::kSdpSlices > 1):
// the warps of slice s compute the whole tile's partial sums over head-dim columns
// [s, s + 1) * kSdpSliceCols and stage them in fp32 (`partials`: every slice's S, then every
// slice's dP, kLd floats per row, which puts the eight rows of a fragment store on different
// banks); after a barrier each warp adds up the slices at its own WarpsSdp fragment's
// coordinates, in slice order.
template <class Traits, class TileQ, class TileK, class Acc, class Coord>
__device__ __forceinline__ void sdp_split_head_dim(const TileQ& sQ, const TileK& sK, const TileQ& sdO, const TileK& sV,
                                                   float* partials, Acc& acc_s, Acc& acc_dp, const Coord& coord_s,
                                                   int t) {
  constexpr int kSlices = Traits::kSdpSlices, kSliceThreads = Traits::kThreads / kSlices;
  constexpr int kLd = Traits::kBlockN + 8;
  constexpr int kSliceElems = Traits::kBlockM * kLd;
  using Ldsm = typename Traits::SmemToRegAtom;
  typename Traits::MmaSdpSlice mma;
  const int slice = t / kSliceThreads, st = t % kSliceThreads;
  const auto tile_s = make_shape(Int<Traits::kBlockM>{}, Int<Traits::kBlockN>{});
  const Tensor coord = mma.get_thread_slice(st).partition_C(make_identity_tensor(tile_s));
  const auto slice_q = make_shape(Int<Traits::kBlockM>{}, Int<Traits::kSdpSliceCols>{});
  const auto slice_k = make_shape(Int<Traits::kBlockN>{}, Int<Traits::kSdpSliceCols>{});
  const auto partial = [&](const auto& sA, const auto& sB, float* out) {
    Tensor acc = partition_fragment_C(mma, tile_s);
    clear(acc);
    gemm_smem_2slice<Ldsm, Ldsm>(mma, local_tile(sA, slice_q, make_coord(0, slice)),
                                 local_tile(sB, slice_k, make_coord(0, slice)), acc, st);
    stage_fragment(acc, coord, out + slice * kSliceElems, kLd, 0);
  };
  partial(sQ, sK, partials);
  partial(sdO, sV, partials + kSlices * kSliceElems);
  __syncthreads();  // every slice's partial sums are in
  CUTE_UNROLL
  for (int e = 0; e < size(acc_s); e += 2) {
    const int at = get<0>(coord_s(e)) * kLd + get<1>(coord_s(e));
    float2 s = make_float2(0.0f, 0.0f), dp = s;
    CUTE_UNROLL
    for (int i = 0; i < kSlices; ++i) {
      const float2 ps = *reinterpret_cast<const float2*>(partials + i * kSliceElems + at);
      const float2 pdp = *reinterpret_cast<const float2*>(partials + (kSlices + i) * kSliceElems + at);
      s.x += ps.x, s.y += ps.y, dp.x += pdp.x, dp.y += pdp.y;
    }
    acc_s(e) = s.x, acc_s(e + 1) = s.y, acc_dp(e) = dp.x, acc_dp(e + 1) = dp.y;
  }
}

// *addr += v in global memory, with no result. (The step cursor's pointers reach here through a
// loop-carried value whose address space the compiler no longer knows: atomicAdd became a generic
// atomic with a shared-memory test per call.)
__device__ __forceinline__ void red_add_global(float* addr, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(addr), "f"(v) : "memory");
}
// The same when `add` (the rows of a partial tile; ptxas makes each a short branch).
__device__ __forceinline__ void red_add_global_if(float* addr, float v, bool add) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p red.global.add.f32 [%0], %1;\n}" ::"l"(addr), "f"(v),
      "r"(int(add))
      : "memory");
}

// Adds the staged rows x kCols tile to `out` (row r at out + r * row_ld), columns below `cols`
// only: dQ of a head-dim share (kHeadSplit > 1), or of a workspace whose rows are wider than the
// tile (DqBlockFlush below otherwise). A thread keeps one column; the loop is unrolled only four
// times (fully unrolled, its addresses and loads took registers from the live dK/dV accumulators:
// 270-560 B of spills).
template <int kCols, int kThreads>
__device__ __forceinline__ void flush_staged(const float* stage, int ld, float* out, std::int64_t row_ld, int rows,
                                             int cols) {
  if constexpr (kCols > kThreads) {  // rows wider than the CTA (D = 512): kCols / kThreads passes
    static_assert(kCols % kThreads == 0);
    CUTE_UNROLL
    for (int pass = 0; pass < kCols / kThreads; ++pass)
      flush_staged<kThreads, kThreads>(stage + pass * kThreads, ld, out + pass * kThreads, row_ld, rows,
                                       cols - pass * kThreads);
  } else {
    static_assert(kCols % 32 == 0 && kThreads % kCols == 0);
    constexpr int kRowStep = kThreads / kCols;
    const int col = int(threadIdx.x) % kCols;
    if (col >= cols) return;
    int row = int(threadIdx.x) / kCols;
    out += row * row_ld + col;
    stage += row * ld + col;
#pragma unroll 4
    for (; row < rows; row += kRowStep) {
      red_add_global(out, *stage);
      out += kRowStep * row_ld;
      stage += kRowStep * ld;
    }
  }
}

// The same for a workspace tile that is one block (rows kCols floats apart, all columns), in
// kParts parts that the next step issues between its S GEMM's k-slices (and its dP GEMM's, unless
// the registers are short: kFlushDuringS), so that the loads and atomics overlap the tensor cores
// instead of following the dQ GEMM (the stage is not written again before the next step's dQ
// GEMM, two barriers later). Each part's staged values are loaded one part ahead, so that no
// atomic waits for its load in the middle of the MMAs. Thread t adds the tile's elements t,
// t + kThreads, ... (pass i: element i * kThreads + t): each atomic's address is the thread's base
// plus a constant, and so is the staged element's. (With a runtime row stride each row's 64-bit
// address took ~5 integer instructions per atomic.)
// kStageLd: the stage's row pitch (floats).
template <int kRows, int kCols, int kStageLd, int kThreads, int kParts>
struct DqBlockFlush {
  static_assert(kCols % kThreads == 0 || kThreads % kCols == 0);
  static constexpr int kPassesPerRow = kCols >= kThreads ? kCols / kThreads : 1;
  static constexpr int kRowsPerPass = kCols >= kThreads ? 1 : kThreads / kCols;
  static constexpr int kPasses = kRows * kCols / kThreads;
  static constexpr int kPassesPerPart = (kPasses + kParts - 1) / kParts;
  const float* stage;  // the thread's first staged element
  float* out;          // the thread's first element of the workspace tile
  int passes;          // passes within the tile's rows (<= 0: nothing to add)
  bool full;           // all kRows rows (every thread: a uniform branch, no predicates)
  float loaded[2][kPassesPerPart];  // parts p and p + 1 (registers: every index is a constant)

  // `rows` 0: nothing pending (out is not used).
  __device__ DqBlockFlush(const float* stage_tile, float* out_tile, int rows, int t)
      : stage(stage_tile + t / kCols * kStageLd + t % kCols), out(out_tile + t) {
    const int rows_left = rows - t / kCols;  // rows of the thread's column
    passes = kCols >= kThreads ? rows_left * kPassesPerRow : (rows_left + kRowsPerPass - 1) / kRowsPerPass;
    full = rows == kRows;
  }
  // `part` is a compile-time value once the caller's loop is unrolled.
  __device__ __forceinline__ void load(int part) {
    CUTE_UNROLL
    for (int j = 0; j < kPassesPerPart; ++j) {
      const int i = part * kPassesPerPart + j;
      if (i < kPasses)
        loaded[part % 2][j] = stage[i / kPassesPerRow * kRowsPerPass * kStageLd + i % kPassesPerRow * kThreads];
    }
  }
  // Adds part `part` (loaded before) and loads the next.
  __device__ __forceinline__ void add(int part) {
    if (part + 1 < kParts) load(part + 1);
    if (full) {
      CUTE_UNROLL
      for (int j = 0; j < kPassesPerPart; ++j) {
        const int i = part * kPassesPerPart + j;
        if (i < kPasses) red_add_global(out + i * kThreads, loaded[part % 2][j]);
      }
    } else {
      CUTE_UNROLL
      for (int j = 0; j < kPassesPerPart; ++j) {
        const int i = part * kPassesPerPart + j;
        if (i < kPasses) red_add_global_if(out + i * kThreads, loaded[part % 2][j], i < passes);
      }
    }
  }
  __device__ __forceinline__ void add_all() {
    load(0);
    CUTE_UNROLL
    for (int part = 0; part < kParts; ++part) add(part);
  }
};

// Work item `index` as a key tile (decode_kv_work's index) and the share of its query steps:
// part `part` of `parts` (BwdParams::kv_split_first, tail_split.hpp).
struct KvTilePart {
  std::int64_t tile;
  int part, parts;
};

__device__ __forceinline__ KvTilePart kv_tile_part(const BwdParams& p, std::int64_t index) {
  if (index < p.kv_split_first) return {index, 0, 1};
  const std::int64_t i = index - p.kv_split_first;
  return {p.kv_split_first + i / p.kv_split_parts, int(i % p.kv_split_parts), p.kv_split_parts};
}

// The parts' handshake: a part's sums stored by all its threads, then counted (release at GPU
// scope after the CTA's barrier, as CUTLASS's semaphores do); the last part reads the count with
// acquire before its barrier.
__device__ __forceinline__ void arrive_release(int* count) {
  asm volatile("fence.acq_rel.gpu;\n red.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(count) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* count) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}

// A split key tile's dK and dV (tail_split.hpp): every part but the last stores its partial sums
// in its slot (16 bytes per thread and access, element e of thread t at e / 4 * kThreads + t) and
// returns false; the last part waits until the others have, adds their sums to its own (in part
// order) and returns true.
template <class Traits, class Acc>
__device__ bool gather_split_tile(const BwdParams& p, const KvTilePart& part, Acc& acc_dk, Acc& acc_dv) {
  constexpr int kVecs = int(decltype(size(acc_dk))::value) / 4;  // float4s per thread and gradient
  static_assert(decltype(size(acc_dk))::value % 4 == 0);
  constexpr std::int64_t kSlotVecs = 2 * kVecs * Traits::kThreads;
  const std::int64_t tile = part.tile - p.kv_split_first;
  float4* slots = reinterpret_cast<float4*>(p.kv_split_sums) + tile * (part.parts - 1) * kSlotVecs + threadIdx.x;
  int* count = p.kv_split_arrivals + tile;
  if (part.part + 1 < part.parts) {
    float4* slot = slots + part.part * kSlotVecs;
    CUTE_UNROLL
    for (int i = 0; i < kVecs; ++i) {
      __stcg(slot + i * Traits::kThreads,
             make_float4(acc_dk(4 * i), acc_dk(4 * i + 1), acc_dk(4 * i + 2), acc_dk(4 * i + 3)));
      __stcg(slot + (kVecs + i) * Traits::kThreads,
             make_float4(acc_dv(4 * i), acc_dv(4 * i + 1), acc_dv(4 * i + 2), acc_dv(4 * i + 3)));
    }
    __syncthreads();
    if (threadIdx.x == 0) arrive_release(count);
    return false;
  }
  if (threadIdx.x == 0)
    while (load_acquire(count) < part.parts - 1) __nanosleep(256);
  __syncthreads();
  for (int j = 0; j + 1 < part.parts; ++j) {
    const float4* slot = slots + j * kSlotVecs;
    CUTE_UNROLL
    for (int i = 0; i < kVecs; ++i) {
      const float4 dk = __ldcg(slot + i * Traits::kThreads), dv = __ldcg(slot + (kVecs + i) * Traits::kThreads);
      acc_dk(4 * i) += dk.x, acc_dk(4 * i + 1) += dk.y, acc_dk(4 * i + 2) += dk.z, acc_dk(4 * i + 3) += dk.w;
      acc_dv(4 * i) += dv.x, acc_dv(4 * i + 1) += dv.y, acc_dv(4 * i + 2) += dv.z, acc_dv(4 * i + 3) += dv.w;
    }
  }
  return true;
}

// `exchanges`: the cluster's exchanges so far (kHeadSplit > 1), across work items. `part`: the
// share of the tile's query steps (rows with kHeadSplit > 1 are never split).
template <class Traits, unsigned kFeatures>
__device__ void fused_bwd_tile(const BwdParams& p, const KvWorkItem& work, const KvTilePart& part, char* smem,
                               int& exchanges) {
  using Element = typename Traits::Element;
  using Smem = OnePassBwdSmem<Traits, kFeatures>;
  constexpr int kQueries = Traits::kBlockM, kKeys = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  static_assert(kQueries <= Traits::kThreads, "one thread per query row stages the row statistics");
  constexpr int kSplit = Traits::kHeadSplit;
  const sm90::HeadDimShare share = sm90::head_dim_share<kHeadDim, Traits::kHeadSplit>(p);
  const int rank = share.rank, col0 = share.col0, qk_cols = share.qk_cols, v_cols = share.v_cols;
  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t n0 = std::int64_t(work.n_block) * kKeys;
  if (n0 >= seq.k_len) return;
  const int keys = int(min(std::int64_t(kKeys), seq.k_len - n0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t query_begin = 0, query_end = 0;
  rule.query_range(n0, n0 + keys, seq.q_len, &query_begin, &query_end);
  // The steps: every query tile of [query_begin, query_end), for each head of the group; this
  // CTA's share of them when the tile is split.
  const int q_tiles = query_end > query_begin ? int((query_end - query_begin + kQueries - 1) / kQueries) : 0;
  const int all_steps = p.group * q_tiles;
  const int first_step = kSplit == 1 ? int(std::int64_t(all_steps) * part.part / part.parts) : 0;
  const int steps = kSplit == 1 ? int(std::int64_t(all_steps) * (part.part + 1) / part.parts) - first_step : all_steps;
  // A step's query head and first query row, and the addresses of its rows, advanced step by step:
  // no division, and no 64-bit address rebuilt from (batch, head, row) per step (that was ~140
  // uniform instructions per warp and step) except when the head changes.
  struct Step {
    int h;
    std::int64_t m0;
    const Element* q;  // the step's first row's, at column col0
    const Element* dout;
    float* dq;
    const float* lse;
    const float* delta;
  };
  const auto step_at = [&](int h, std::int64_t m0) {
    const std::int64_t q_row = seq.q_begin + m0;
    return Step{h,
                m0,
                q_at<Element>(p, seq.batch, q_row, h) + col0,
                do_at<Element>(p, seq.batch, q_row, h) + col0,
                accum_row(p.dq_accum, seq.batch, q_row, h) + col0,
                lse_at(p, seq.batch, q_row, h),
                delta_at(p, seq.batch, q_row, h)};
  };
  const std::int64_t tiles_end = query_begin + std::int64_t(q_tiles) * kQueries;
  const auto after = [&](Step s) {
    if (s.m0 + kQueries == tiles_end) return step_at(s.h + 1, query_begin);
    s.m0 += kQueries;
    if constexpr (kSplit == 1) {
      s.q += kQueries * p.q_row_stride;
      s.dout += kQueries * p.do_row_stride;
      s.dq += kQueries * p.dq_accum.ld;
      s.lse += kQueries * p.lse_row_stride;
      s.delta += kQueries;
    }
    return s;
  };
  // A step's addresses: carried, or in the split rows recomputed where they are used (their
  // exchange keeps more registers live: five carried 64-bit addresses spilled 28-36 bytes).
  const auto addresses = [&](const Step& s) {
    if constexpr (kSplit > 1) return step_at(s.h, s.m0);
    else return s;
  };
  const auto step_rows = [&](std::int64_t m0) { return int(min(std::int64_t(kQueries), seq.q_len - m0)); };

  Element* base = reinterpret_cast<Element*>(smem);
  Tensor sK = cute::make_tensor(make_smem_ptr(base + Smem::kK), typename Traits::SmemLayoutKV{});
  Tensor sKt = cute::make_tensor(make_smem_ptr(base + Smem::kK), typename Traits::SmemLayoutKt{});
  Tensor sV = cute::make_tensor(make_smem_ptr(base + Smem::kV), typename Traits::SmemLayoutKV{});
  Tensor sQ = cute::make_tensor(make_smem_ptr(base + Smem::kQ), typename Traits::SmemLayoutQ{});
  Tensor sQt = cute::make_tensor(make_smem_ptr(base + Smem::kQ), typename Traits::SmemLayoutQt{});
  Tensor sdO = cute::make_tensor(make_smem_ptr(base + Smem::kDo), typename Traits::SmemLayoutQ{});
  Tensor sdOt = cute::make_tensor(make_smem_ptr(base + Smem::kDo), typename Traits::SmemLayoutQt{});
  Tensor sP = cute::make_tensor(make_smem_ptr(base + Smem::kP), typename Traits::SmemLayoutP{});
  Tensor sPt = cute::make_tensor(make_smem_ptr(base + Smem::kP), typename Traits::SmemLayoutPt{});
  Tensor sdS = cute::make_tensor(make_smem_ptr(base + Smem::kDs), typename Traits::SmemLayoutP{});
  Tensor sdSt = cute::make_tensor(make_smem_ptr(base + Smem::kDs), typename Traits::SmemLayoutPt{});
  float* lse2 = reinterpret_cast<float*>(smem + Smem::kStatsOffset);
  float* delta = lse2 + kQueries;
  float* dq_stage = reinterpret_cast<float*>(smem + Smem::kDqOffset);
  char* smem_bias = smem + Smem::kBiasOffset;
  const typename Smem::Exchange exchange(smem, Smem::kExchangeOffset, Smem::kExchangeBarrierOffset, rank);
  const bool tile_bias = tiles_bias(kFeatures) && p.bias != nullptr;
  const bool stage_dbias = tile_bias && p.dbias_tile;

  const auto tile_kv = make_shape(Int<kKeys>{}, Int<kHeadDim>{});
  const auto tile_q = make_shape(Int<kQueries>{}, Int<kHeadDim>{});
  const std::int64_t k_row = seq.k_begin + n0;
  typename Traits::LoadCopy load;
  const auto global_tile = [](auto* ptr, auto shape, std::int64_t row_stride) {
    return cute::make_tensor(make_gmem_ptr(ptr), shape, make_stride(row_stride, _1{}));
  };
  // Copies a tile into shared memory (rows past `rows` and columns past `cols` zero-filled).
  // Everything derived from the thread index is rebuilt from an opaque copy of it at each use, so
  // that no per-copy addresses stay live across the steps (register pressure).
  const auto load_tile = [&](const auto& gmem, auto& smem_tile, int rows, int cols) {
    auto thr = load.get_thread_slice(opaque_thread<Traits::kThreads>());
    copy_predicated(load, thr.partition_S(gmem), thr.partition_D(smem_tile),
                    thr.partition_S(make_identity_tensor(shape(gmem))), rows, cols);
  };
  load_tile(global_tile(k_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.k_row_stride), sK, keys,
            qk_cols);
  load_tile(global_tile(v_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.v_row_stride), sV, keys,
            v_cols);
  cp_async_fence();
  // Issues the cp.async copies of a step's Q and dO and fetches its row statistics.
  const auto load_step = [&](const Step& step) {
    const Step at = addresses(step);
    const int rows = step_rows(at.m0);
    load_tile(global_tile(at.q, tile_q, p.q_row_stride), sQ, rows, qk_cols);
    load_tile(global_tile(at.dout, tile_q, p.do_row_stride), sdO, rows, v_cols);
    if (tile_bias)
      load_bias_tile_unrolled<kQueries, kKeys, Traits::kThreads>(p, work.b, at.h, at.m0, n0, seq.q_len, seq.k_len,
                                                                 smem_bias);
    cp_async_fence();
    return fetch_row_stat(p, at.lse, at.delta, rows);
  };

  typename Traits::MmaSdp mma_sdp;
  typename Traits::MmaDkv mma_dkv;
  typename Traits::MmaDq mma_dq;
  using Gemms = typename Traits::Gemms;
  const auto tile_s = make_shape(Int<kQueries>{}, Int<kKeys>{});
  auto p_store = make_tiled_copy_C(typename Traits::RegToSmemAtom{}, mma_sdp);
  Tensor acc_dk = partition_fragment_C(mma_dkv, tile_kv);
  Tensor acc_dv = partition_fragment_C(mma_dkv, tile_kv);
  clear(acc_dk);
  clear(acc_dv);
  // dQ's workspace tile is one block (DqBlockFlush) when its rows are the tile's width; then a
  // step's dQ is added during the next step's S (and dP) MMAs (where those are plain GEMMs), the
  // last one after the loop.
  // In the kBulkDq rows a thread issues one bulk reduction of the staged tile instead (after the
  // next step's first barrier) and waits for its reads before the stage is written again.
  const bool dq_block = kSplit == 1 && p.dq_accum.ld == kHeadDim;
  constexpr int kSlicesK = kHeadDim / 16;  // k16 slices of the S and dP GEMMs
  constexpr bool kPlainSdp = kSplit == 1 && Traits::kSdpSlices == 1;
  constexpr bool kBulkDq = Gemms::kBulkDq;
  static_assert(!kBulkDq || kSplit == 1);
  constexpr bool kDeferDq = kPlainSdp && !kBulkDq;
  // P's exponentials are issued between the dP GEMM's k-slices (exp_scores_part), beside its
  // MMAs. Not with a bias, which is added before the exponential, nor in the head-split rows,
  // which sum S and dP after the GEMMs. With more than 32 score elements per thread (D = 64's
  // 128 x 128 tile: 64) the registers are short, and the deferred dQ flush goes between the S
  // GEMM's k-slices only, which frees its buffer for the exponentials (with the flush over both
  // GEMMs they spilled and gained half as much); with fewer the flush over both GEMMs stays 1-2%
  // faster (H100, 2026-11-23 (17)).
  constexpr bool kExpDuringDp = kPlainSdp && (kFeatures & kBias) == 0;
  constexpr int kScoresPerThread = kQueries * kKeys / Traits::kThreads;
  constexpr int kMostScoresBesideFlush = 32;  // the most that fit beside the flush's buffer (measured)
  constexpr bool kFlushDuringS = kExpDuringDp && kScoresPerThread > kMostScoresBesideFlush;
  constexpr int kFlushParts = kFlushDuringS ? kSlicesK : 2 * kSlicesK;
  using DqFlush = DqBlockFlush<kQueries, kHeadDim, Smem::kDqLd, Traits::kThreads, kFlushParts>;
  DqFlush pending(dq_stage, nullptr, 0, opaque_thread<Traits::kThreads>());
  struct {
    float* dst = nullptr;
    int bytes = 0;  // 0: nothing staged
  } bulk;
  const auto issue_bulk_dq = [&] {
    if (threadIdx.x == 0 && bulk.bytes > 0) sm90::bulk_reduce_add(bulk.dst, dq_stage, bulk.bytes);
  };

  Step at = q_tiles > 0 ? step_at(work.hk * p.group + first_step / q_tiles,
                                  query_begin + std::int64_t(first_step % q_tiles) * kQueries)
                        : step_at(work.hk * p.group, query_begin);
  if (steps > 0) stage_row_stat<kQueries>(load_step(at), lse2, delta);
  for (int step = 0; step < steps; ++step) {
    const int h = at.h;
    const std::int64_t m0 = at.m0;
    const int rows = step_rows(m0);
    const int t = opaque_thread<Traits::kThreads>();
    cp_async_wait<0>();
    Gemms::publish_smem_writes();
    __syncthreads();  // this step's Q, dO and row statistics are in; the last step's dS reads are done
    if constexpr (kBulkDq) issue_bulk_dq();  // the last step's dQ, staged and published before the barrier

    Tensor acc_s = partition_fragment_C(mma_sdp, tile_s);
    Tensor acc_dp = partition_fragment_C(mma_sdp, tile_s);
    const Tensor coord_s = mma_sdp.get_thread_slice(t).partition_C(make_identity_tensor(tile_s));
    if constexpr (Traits::kSdpSlices > 1) {  // the dQ stage is free until the dQ GEMM
      sdp_split_head_dim<Traits>(sQ, sK, sdO, sV, dq_stage, acc_s, acc_dp, coord_s, t);
    } else {
      clear(acc_s);
      clear(acc_dp);
      if constexpr (kDeferDq) pending.load(0);
      const auto add_dq = [&](int part) {
        if constexpr (kDeferDq) pending.add(part);
      };
      Gemms::template scores<kSlicesK>(mma_sdp, sQ, sK, acc_s, sdO, sV, acc_dp, t, add_dq, [&](int kk) {
        if constexpr (!kFlushDuringS) add_dq(kSlicesK + kk);
        if constexpr (kExpDuringDp) exp_scores_part<kSlicesK>(acc_s, coord_s, lse2, p.scale_log2, kk);
      });
    }
    if constexpr (kSplit > 1) exchange.sum(exchanges++, acc_s, acc_dp);
    const TileOrigin origin{work.b, h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kKeys > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kKeys);
    gradient_tile<Element, kFeatures, ScoreRows::queries, Dbias::write,
                  kExpDuringDp ? ScoresIn::probabilities : ScoresIn::raw>(
        p, rule, origin, masked, acc_s, acc_dp, coord_s, lse2, delta,
        SharedBias{tile_bias ? smem_bias : nullptr, Smem::BiasTile::kPitch}, stage_dbias);
    {
      Tensor p_frag = convert_fragment<Element>(acc_s);
      Tensor ds_frag = convert_fragment<Element>(acc_dp);
      auto p_store_thr = p_store.get_thread_slice(t);
      copy(p_store, p_store_thr.retile_S(p_frag), p_store_thr.partition_D(sP));
      copy(p_store, p_store_thr.retile_S(ds_frag), p_store_thr.partition_D(sdS));
    }
    Gemms::publish_smem_writes();
    __syncthreads();  // P and dS are in (and dS in the bias tile, when dbias leaves from there)
    if (stage_dbias)  // 16-byte stores; the barrier after the dK GEMM keeps the next bias load off the tile
      store_dbias_tile<kQueries, kKeys, Traits::kThreads>(p, work.b, h, m0, n0, seq.q_len, seq.k_len, smem_bias);

    Gemms::key_grads(mma_dkv, sPt, sdOt, acc_dv, sdSt, sQt, acc_dk, t);
    if constexpr (kBulkDq)
      if (threadIdx.x == 0) sm90::wait_bulk_reads();  // the stage is written after the barrier
    __syncthreads();  // Q and dO are free: the next step's loads overlap the dQ GEMM
    RowStat next;
    Step next_at = at;
    if (step + 1 < steps) {
      next_at = after(at);
      next = load_step(next_at);
    }

    const auto tile_dq = make_shape(Int<kQueries>{}, Int<Traits::kDqCols>{});
    const Tensor coord_dq = mma_dq.get_thread_slice(t).partition_C(make_identity_tensor(tile_dq));
    CUTE_UNROLL
    for (int chunk = 0; chunk < kHeadDim / Traits::kDqCols; ++chunk) {
      Tensor acc_dq = partition_fragment_C(mma_dq, tile_dq);
      clear(acc_dq);
      const auto chunk_kt = make_shape(Int<Traits::kDqCols>{}, Int<kKeys>{});
      Gemms::query_grads(mma_dq, sdS, local_tile(sKt, chunk_kt, make_coord(chunk, 0)), acc_dq, t);
      // dq_block here is the launch's condition for GradAccum::swizzled.
      stage_fragment(acc_dq, coord_dq, dq_stage, Smem::kDqLd, chunk * Traits::kDqCols,
                     kBulkDq ? stage_swizzle(coord_dq, int((seq.q_begin + m0) & 7), dq_block) : 0);
    }
    // The staged dQ is read by the next step's flush, after that step's first barrier (or by
    // the flush after the loop, behind its own), and rewritten only after the next step's
    // third: the deferred flush needs no barrier here (one of four per step; +1-2%).
    const bool deferred = (kDeferDq || kBulkDq) && dq_block;
    if (!deferred) __syncthreads();  // dQ is staged
    if (!dq_block)
      flush_staged<kHeadDim, Traits::kThreads>(dq_stage, Smem::kDqLd, addresses(at).dq, p.dq_accum.ld, rows, qk_cols);
    else if constexpr (kBulkDq)
      bulk = {at.dq, rows * kHeadDim * int(sizeof(float))};
    else if constexpr (kDeferDq)
      pending = DqFlush(dq_stage, at.dq, rows, t);
    else
      DqFlush(dq_stage, at.dq, rows, t).add_all();
    if constexpr (kSplit > 1) exchange.release();  // the exchange's slots are the dQ stage's memory
    if (step + 1 < steps) stage_row_stat<kQueries>(next, lse2, delta);
    at = next_at;
  }
  if constexpr (kDeferDq) {  // the last step's dQ (nothing when no step ran)
    __syncthreads();         // it is staged
    pending.add_all();
  }
  cp_async_wait<0>();       // K and V, when no step ran
  if constexpr (kBulkDq) {  // the last step's dQ; one_pass_bwd_kernel waits for its reads before the next item
    Gemms::publish_smem_writes();
    __syncthreads();
    issue_bulk_dq();
  }
  if constexpr (kSplit == 1)
    if (part.parts > 1 && !gather_split_tile<Traits>(p, part, acc_dk, acc_dv)) return;

  CUTE_UNROLL
  for (int e = 0; e < size(acc_dk); ++e) acc_dk(e) *= p.scale;
  store_tile<Traits, typename Traits::SmemLayoutKV>(
      mma_dkv, convert_fragment<Element>(acc_dk), base + Smem::kK,
      global_tile(dk_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.dk_row_stride), keys, qk_cols);
  store_tile<Traits, typename Traits::SmemLayoutKV>(
      mma_dkv, convert_fragment<Element>(acc_dv), base + Smem::kV,
      global_tile(dv_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.dv_row_stride), keys, v_cols);
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm) one_pass_bwd_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  using Smem = OnePassBwdSmem<Traits, kFeatures>;
  constexpr int kSplit = Traits::kHeadSplit;  // > 1: clusters of kSplit CTAs take the work items together
  int exchanges = 0;
  if constexpr (kSplit > 1)
    typename Smem::Exchange(smem, Smem::kExchangeOffset, Smem::kExchangeBarrierOffset, sm90::cluster_rank()).init();
  for (std::int64_t index = blockIdx.x / kSplit; index < p.kv_work_items; index += gridDim.x / kSplit) {
    const KvTilePart part = kv_tile_part(p, index);
    fused_bwd_tile<Traits, kFeatures>(p, decode_kv_work(p, part.tile), part, smem, exchanges);
    if constexpr (Traits::Gemms::kBulkDq)
      if (threadIdx.x == 0) sm90::wait_bulk_reads();  // the last dQ reduction's, before the stage is reused
    __syncthreads();
  }
  if constexpr (kSplit > 1) sm90::finish_exchanges();
}

}  // namespace memattn::cuda
