// One work item of the one-pass backward (one_pass_bwd_kernel.hpp): a key tile's dK and dV, and
// its share of dQ. The K and V loads, then per step (a query tile of one head): Q and dO in, S and
// dP (scores), P and dS (gradient_tile), dV and dK (key_grads), dQ (query_grads) staged and
// flushed (one_pass_bwd_dq_flush.hpp), the next step's loads overlapping the dQ GEMM; then the
// tail split's meeting (one_pass_bwd_tail_split.hpp) and the dK and dV stores.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/bias_tile.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/one_pass_bwd_dq_flush.hpp"
#include "cuda/common/one_pass_bwd_storage.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"
#include "cuda/common/one_pass_bwd_traits.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm90/bulk_reduce.hpp"
#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda {

using namespace cute;

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
template <class Element, int kRows>
__device__ __forceinline__ void stage_row_stat(const RowStat& s, float* lse2, float* delta) {
  if (threadIdx.x < kRows) {
    lse2[threadIdx.x] = staged_lse<Element>(s.lse);
    delta[threadIdx.x] = s.delta;
  }
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

// One work item: key tile `work`'s dK and dV, and its share of dQ. `exchanges`: the cluster's
// exchanges so far (kHeadSplit > 1), across work items. `part`: the share of the tile's query
// steps (rows with kHeadSplit > 1 are never split).
template <class Traits, unsigned kFeatures>
__device__ void one_pass_bwd_tile(const BwdParams& p, const KvWorkItem& work, const KvTilePart& part, char* smem,
                                  int& exchanges) {
  using Element = typename Traits::Element;
  using Storage = OnePassBwdSharedStorage<Traits, kFeatures>;
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

  auto& storage = *reinterpret_cast<Storage*>(smem);
  Tensor sK = cute::make_tensor(make_smem_ptr(storage.k), typename Traits::SmemLayoutKV{});
  Tensor sKt = cute::make_tensor(make_smem_ptr(storage.k), typename Traits::SmemLayoutKt{});
  Tensor sV = cute::make_tensor(make_smem_ptr(storage.v), typename Traits::SmemLayoutKV{});
  Tensor sQ = cute::make_tensor(make_smem_ptr(storage.q), typename Traits::SmemLayoutQ{});
  Tensor sQt = cute::make_tensor(make_smem_ptr(storage.q), typename Traits::SmemLayoutQt{});
  Tensor sdO = cute::make_tensor(make_smem_ptr(storage.dout), typename Traits::SmemLayoutQ{});
  Tensor sdOt = cute::make_tensor(make_smem_ptr(storage.dout), typename Traits::SmemLayoutQt{});
  Tensor sP = cute::make_tensor(make_smem_ptr(storage.p), typename Traits::SmemLayoutP{});
  Tensor sPt = cute::make_tensor(make_smem_ptr(storage.p), typename Traits::SmemLayoutPt{});
  Tensor sdS = cute::make_tensor(make_smem_ptr(storage.ds), typename Traits::SmemLayoutP{});
  Tensor sdSt = cute::make_tensor(make_smem_ptr(storage.ds), typename Traits::SmemLayoutPt{});
  float* lse2 = storage.lse2;
  float* delta = storage.delta;
  float* dq_stage = storage.dq_stage;
  char* smem_bias = bias_tile_of(storage);
  [[maybe_unused]] const auto exchange = exchange_of(storage, rank);
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
  // The score tile: queries x keys, or keys x queries where the GEMMs compute S^T and dP^T.
  constexpr bool kKeyRows = Gemms::kKeyRows;
  constexpr ScoreRows kScoreRows = kKeyRows ? ScoreRows::keys : ScoreRows::queries;
  static_assert(!kKeyRows || !tiles_bias(kFeatures), "key rows do not stage dbias in the bias tile");
  const auto tile_s = [] {
    if constexpr (kKeyRows) return make_shape(Int<kKeys>{}, Int<kQueries>{});
    else return make_shape(Int<kQueries>{}, Int<kKeys>{});
  }();
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
  // faster (H100). The fp32 rows' P is exp(natural score - LSE) (gradient_tile, kNaturalLse).
  constexpr bool kExpDuringDp = kPlainSdp && (kFeatures & kBias) == 0 && !kNaturalLse<Element>;
  constexpr int kScoresPerThread = kQueries * kKeys / Traits::kThreads;
  constexpr int kMostScoresBesideFlush = 32;  // the most that fit beside the flush's buffer (measured)
  constexpr bool kFlushDuringS = kExpDuringDp && kScoresPerThread > kMostScoresBesideFlush;
  constexpr int kFlushParts = kFlushDuringS ? kSlicesK : 2 * kSlicesK;
  using DqFlush = DqBlockFlush<kQueries, kHeadDim, Storage::kDqLd, Traits::kThreads, kFlushParts>;
  // The deferred flush, in the rows that defer it (elsewhere a placeholder: a DqBlockFlush needs
  // rows the threads divide, which D = 192's are not).
  auto pending = [&] {
    if constexpr (kDeferDq) return DqFlush(dq_stage, nullptr, 0, opaque_thread<Traits::kThreads>());
    else return 0;
  }();
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
  if (steps > 0) stage_row_stat<Element, kQueries>(load_step(at), lse2, delta);
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
        if constexpr (kExpDuringDp) exp_scores_part<kSlicesK, kScoreRows>(acc_s, coord_s, lse2, p.scale_log2, kk);
      });
    }
    if constexpr (kSplit > 1) exchange.sum(exchanges++, acc_s, acc_dp);
    const TileOrigin origin{work.b, h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kKeys > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kKeys);
    gradient_tile<Element, kFeatures, kScoreRows, Dbias::write,
                  kExpDuringDp ? ScoresIn::probabilities : ScoresIn::raw>(
        p, rule, origin, masked, acc_s, acc_dp, coord_s, lse2, delta,
        SharedBias{tile_bias ? smem_bias : nullptr, Storage::BiasTile::kPitch}, stage_dbias);
    if constexpr (kKeyRows) {
      // P^T and dS^T feed dV and dK from the registers; dS^T is stored for the dQ GEMM, which the
      // CTA barrier after dK (every warpgroup's dS^T in) precedes.
      Tensor p_frag = convert_fragment<Element>(acc_s);
      Tensor ds_frag = convert_fragment<Element>(acc_dp);
      auto ds_store_thr = p_store.get_thread_slice(t);
      copy(p_store, ds_store_thr.retile_S(ds_frag), ds_store_thr.partition_D(sdSt));
      Gemms::publish_smem_writes();
      Gemms::key_grads_from_registers(mma_dkv, p_frag, sdOt, acc_dv, ds_frag, sQt, acc_dk, t);
    } else {
      {
        Tensor p_frag = convert_fragment<Element>(acc_s);
        Tensor ds_frag = convert_fragment<Element>(acc_dp);
        auto p_store_thr = p_store.get_thread_slice(t);
        copy(p_store, p_store_thr.retile_S(p_frag), p_store_thr.partition_D(sP));
        copy(p_store, p_store_thr.retile_S(ds_frag), p_store_thr.partition_D(sdS));
      }
      Gemms::publish_smem_writes();
      if (stage_dbias || !Gemms::kOwnKeyGradOperands)
        __syncthreads();  // P and dS are in (and dS in the bias tile, when dbias leaves from there)
      else
        Gemms::sync_warpgroup();  // its own rows of P^T and dS^T are in; the dQ GEMM's barrier comes later
      if (stage_dbias)  // 16-byte stores; the barrier after the dK GEMM keeps the next bias load off the tile
        store_dbias_tile<kQueries, kKeys, Traits::kThreads>(p, work.b, h, m0, n0, seq.q_len, seq.k_len, smem_bias);

      Gemms::key_grads(mma_dkv, sPt, sdOt, acc_dv, sdSt, sQt, acc_dk, t);
    }
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
      stage_fragment(acc_dq, coord_dq, dq_stage, Storage::kDqLd, chunk * Traits::kDqCols,
                     kBulkDq ? stage_swizzle(coord_dq, int((seq.q_begin + m0) & 7), dq_block) : 0);
    }
    // The staged dQ is read by the next step's flush, after that step's first barrier (or by
    // the flush after the loop, behind its own), and rewritten only after the next step's
    // third: the deferred flush needs no barrier here (one of four per step; +1-2%).
    const bool deferred = (kDeferDq || kBulkDq) && dq_block;
    if (!deferred) __syncthreads();  // dQ is staged
    if (!dq_block)
      flush_staged<kHeadDim, Traits::kThreads>(dq_stage, Storage::kDqLd, addresses(at).dq, p.dq_accum.ld, rows, qk_cols);
    else if constexpr (kBulkDq)
      bulk = {at.dq, rows * kHeadDim * int(sizeof(float))};
    else if constexpr (kDeferDq)
      pending = DqFlush(dq_stage, at.dq, rows, t);
    else
      DqFlush(dq_stage, at.dq, rows, t).add_all();
    if constexpr (kSplit > 1) exchange.release();  // the exchange's slots are the dQ stage's memory
    if (step + 1 < steps) stage_row_stat<Element, kQueries>(next, lse2, delta);
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
    if (part.parts > 1 &&
        !gather_split_tile<Traits::kThreads>(p, part, acc_dk, acc_dv, threadIdx.x, [] { __syncthreads(); }))
      return;

  CUTE_UNROLL
  for (int e = 0; e < size(acc_dk); ++e) acc_dk(e) *= p.scale;
  store_tile<Traits, typename Traits::SmemLayoutKV>(
      mma_dkv, convert_fragment<Element>(acc_dk), storage.k,
      global_tile(dk_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.dk_row_stride), keys, qk_cols);
  store_tile<Traits, typename Traits::SmemLayoutKV>(
      mma_dkv, convert_fragment<Element>(acc_dv), storage.v,
      global_tile(dv_at<Element>(p, seq.batch, k_row, work.hk) + col0, tile_kv, p.dv_row_stride), keys, v_cols);
}

}  // namespace memattn::cuda
