// The sm80 tensor-core backward for head dims beyond what registers hold (bf16/fp16, any D and
// Dv up to 65536): the register rows' two kernels with the head dims walked in chunks of 64, as
// the global-accumulator forward does. Tiles are square, kRows queries x kRows keys.
//
// dkdv_global_kernel owns a tile of kRows keys of one (sequence, kv head). For each query tile of
// the group's heads that sees those keys: S^T = sum over chunks of K_c Q_c^T and dP^T = sum of
// V_c dO_c^T (in registers), then P^T and dS^T (gradient_tile), then for each value chunk
// dV_c += (P Z)^T dO_c and for each head-dim chunk dK_c += dS^T Q_c, the dK/dV chunks read from and
// written back to this CTA's fp32 workspace slot in MMA-fragment order (16-byte accesses, no
// shuffle). After the last query tile the chunks are converted and stored. dq_global_kernel owns
// kRows queries and walks the visible key tiles the same way (S, dP, then dQ_c += dS K_c), and
// writes dbias. Every gradient row has one owner: no atomics, deterministic. The accumulator
// chunks cross L2 once per tile pair, so their traffic per FLOP falls as 1 / kRows.
//
// All chunks flow through one kStages-deep cp.async pipeline: a stage holds an A chunk (the rows
// of the tile this CTA owns: K, V; or Q, dO in the dQ kernel) and a B chunk (the other side, also
// read transposed for the second GEMMs).
#pragma once

#include <cute/tensor.hpp>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/bwd_dkdv_kernel.hpp"
#include "cuda/sm80/fwd_global_kernel.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

// Square tiles of kRows queries x kRows keys, kWarps warps of 16 rows (the rows a CTA owns: keys
// in the dK/dV kernel, queries in the dQ kernel), head dims in chunks of 64 columns.
template <class Element, int kRows_, int kWarps, int kStages, Loads kLoads>
struct GlobalBwdTraits : GlobalFwdTraits<Element, kRows_, kRows_, kWarps, kStages, kLoads> {
  using Base = GlobalFwdTraits<Element, kRows_, kRows_, kWarps, kStages, kLoads>;
  static constexpr int kRows = kRows_;
  static constexpr int kChunk = Base::kChunk;
  static constexpr int kChunkFloats = kRows * kChunk;  // one accumulator chunk in the workspace
};

// Shared memory: the pipeline's stages and an output staging tile (as the forward's), and a query
// tile's LSE (base 2) and delta.
template <class Traits>
struct GlobalBwdSharedStorage : GlobalFwdSharedStorage<Traits> {
  float lse2[Traits::kRows];
  float delta[Traits::kRows];
};

// The pipeline's shared memory: stage s holds an A chunk and a B chunk (B also viewed transposed).
template <class Traits>
struct ChunkStages {
  using Element = typename Traits::Element;
  Element* base;
  __device__ auto a(int s) const {
    return cute::make_tensor(make_smem_ptr(base + s * Traits::kStageElems), typename Traits::SmemLayoutQ{});
  }
  __device__ auto b(int s) const {
    return cute::make_tensor(make_smem_ptr(base + s * Traits::kStageElems + Traits::kSmemElemsQ),
                             typename Traits::SmemLayoutKV{});
  }
  __device__ auto bt(int s) const {
    return cute::make_tensor(make_smem_ptr(base + s * Traits::kStageElems + Traits::kSmemElemsQ),
                             typename Traits::SmemLayoutVt{});
  }
};

// The kStages-deep cp.async pipeline of a CTA's jobs: issue(job) loads job's chunks into stage
// job % kStages (and commits a group, empty past the last job); next(job) waits for job's stage
// and refills the stage the previous job used.
template <int kStages, class Issue>
struct ChunkPipeline {
  Issue issue;
  __device__ void start() {
    CUTE_UNROLL
    for (int s = 0; s < kStages - 1; ++s) issue(s);
  }
  __device__ int next(int job) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // job's stage landed; everyone is done with the stage about to be refilled
    issue(job + kStages - 1);
    return job % kStages;
  }
};

template <int kStages, class Issue>
__device__ ChunkPipeline<kStages, Issue> make_pipeline(Issue issue) {
  return {issue};
}

// cp.async of one kRows x kChunk chunk of a row-major matrix (rows < rows, columns < cols; zeros
// beyond).
template <class Traits, class SmemTile>
__device__ __forceinline__ void load_chunk(const typename Traits::Element* src, std::int64_t row_stride, int rows,
                                           int cols, SmemTile&& dst) {
  typename Traits::LoadCopy load;
  auto thr = load.get_thread_slice(threadIdx.x);
  const auto shape = make_shape(Int<Traits::kRows>{}, Int<Traits::kChunk>{});
  Tensor g = cute::make_tensor(make_gmem_ptr(src), shape, make_stride(row_stride, _1{}));
  copy_predicated(load, thr.partition_S(g), thr.partition_D(dst), thr.partition_S(make_identity_tensor(shape)), rows,
                  cols);
}

// The gradient chunks of a slot, converted (times scale) and stored: rows < rows, columns < cols.
template <class Traits, class TiledMma, class Acc>
__device__ void store_chunks(const TiledMma& mma, const float* slot, bool any, Acc& acc, float scale,
                             typename Traits::Element* out, std::int64_t row_stride, int rows, int cols,
                             typename Traits::Element* smem_out) {
  using Element = typename Traits::Element;
  constexpr int kRows = Traits::kRows, kChunk = Traits::kChunk;
  const int chunks = (cols + kChunk - 1) / kChunk;
  for (int c = 0; c < chunks; ++c) {
    if (any) {
      load_accumulator<Traits>(slot + std::int64_t(c) * Traits::kChunkFloats, acc);
      CUTE_UNROLL
      for (int e = 0; e < size(acc); ++e) acc(e) *= scale;
    } else {
      clear(acc);  // no tile reached these rows: zero gradients
    }
    const int c0 = c * kChunk;
    store_tile<Traits, typename Traits::SmemLayoutQ>(
        mma, convert_fragment<Element>(acc), smem_out,
        cute::make_tensor(make_gmem_ptr(out + c0), make_shape(Int<kRows>{}, Int<kChunk>{}), make_stride(row_stride, _1{})),
        rows, cols - c0);
  }
}

// acc_chunk (in the slot) = (first ? 0 : acc_chunk) + A B for one chunk.
template <class Traits, class TiledMma, class RegA, class SmemBt, class Acc>
__device__ __forceinline__ void accumulate_chunk_global(const TiledMma& mma, float* chunk, bool first, const RegA& rA,
                                                        const SmemBt& sBt, Acc& acc) {
  if (first) clear(acc);
  else load_accumulator<Traits>(chunk, acc);
  gemm_reg_smem<Traits>(mma, rA, sBt, acc);
  store_accumulator<Traits>(chunk, acc);
}

template <class Traits, unsigned kFeatures>
__device__ void dkdv_global_tile(const BwdParams& p, const KvWorkItem& work, char* smem, float* slot) {
  using Element = typename Traits::Element;
  constexpr int kRows = Traits::kRows, kChunk = Traits::kChunk, kStages = Traits::kStages;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t n0 = std::int64_t(work.n_block) * kRows;
  if (n0 >= seq.k_len) return;
  const int keys = int(min(std::int64_t(kRows), seq.k_len - n0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t query_begin = 0, query_end = 0;
  rule.query_range(n0, n0 + keys, seq.q_len, &query_begin, &query_end);
  const int q_tiles = query_end > query_begin ? int((query_end - query_begin + kRows - 1) / kRows) : 0;
  const int tiles = q_tiles * p.group;
  const int qc = (p.head_dim + kChunk - 1) / kChunk, vc = (p.head_dim_v + kChunk - 1) / kChunk;
  // Per query tile: S^T (K_c, Q_c), dP^T (V_c, dO_c), dV (dO_c), dK (Q_c).
  const int jobs_per_tile = 2 * (qc + vc);
  const int jobs = tiles * jobs_per_tile;

  const std::int64_t k_row = seq.k_begin + n0;
  const Element* k_ptr = k_at<Element>(p, seq.batch, k_row, work.hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, k_row, work.hk);
  const auto q_rows = [&](int t, std::int64_t* m0, int* h) {
    *h = work.hk * p.group + t / q_tiles;
    *m0 = query_begin + std::int64_t(t % q_tiles) * kRows;
  };

  auto& storage = *reinterpret_cast<GlobalBwdSharedStorage<Traits>*>(smem);
  const ChunkStages<Traits> stages{storage.stages};
  Element* smem_out = storage.out;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;

  const auto issue = [&](int job) {
    if (job < jobs) {
      const int t = job / jobs_per_tile, r = job % jobs_per_tile, s = job % kStages;
      std::int64_t m0;
      int h;
      q_rows(t, &m0, &h);
      const int rows = int(min(std::int64_t(kRows), seq.q_len - m0));
      const std::int64_t q_row = seq.q_begin + m0;
      const Element* q = q_at<Element>(p, seq.batch, q_row, h);
      const Element* d_o = do_at<Element>(p, seq.batch, q_row, h);
      if (r < qc) {  // S^T
        const int c0 = r * kChunk;
        load_chunk<Traits>(k_ptr + c0, p.k_row_stride, keys, p.head_dim - c0, stages.a(s));
        load_chunk<Traits>(q + c0, p.q_row_stride, rows, p.head_dim - c0, stages.b(s));
      } else if (r < qc + vc) {  // dP^T
        const int c0 = (r - qc) * kChunk;
        load_chunk<Traits>(v_ptr + c0, p.v_row_stride, keys, p.head_dim_v - c0, stages.a(s));
        load_chunk<Traits>(d_o + c0, p.do_row_stride, rows, p.head_dim_v - c0, stages.b(s));
      } else if (r < qc + 2 * vc) {  // dV
        const int c0 = (r - qc - vc) * kChunk;
        load_chunk<Traits>(d_o + c0, p.do_row_stride, rows, p.head_dim_v - c0, stages.b(s));
      } else {  // dK
        const int c0 = (r - qc - 2 * vc) * kChunk;
        load_chunk<Traits>(q + c0, p.q_row_stride, rows, p.head_dim - c0, stages.b(s));
      }
    }
    cp_async_fence();  // an empty group past the end keeps the wait counts uniform
  };
  auto pipeline = make_pipeline<kStages>(issue);
  pipeline.start();

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  const auto tile = make_shape(Int<kRows>{}, Int<kRows>{});
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(tile));                      // (key, query)
  Tensor acc = partition_fragment_C(mma, make_shape(Int<kRows>{}, Int<kChunk>{}));  // one dK or dV chunk
  float* dk_slot = slot;
  float* dv_slot = slot + std::int64_t(qc) * Traits::kChunkFloats;

  int job = 0;
  for (int t = 0; t < tiles; ++t) {
    std::int64_t m0;
    int h;
    q_rows(t, &m0, &h);
    const int rows = int(min(std::int64_t(kRows), seq.q_len - m0));
    load_row_stats<Element, kRows>(p, seq, h, m0, rows, lse2, delta);  // read after the next barriers

    Tensor acc_st = partition_fragment_C(mma, tile);
    Tensor acc_dpt = partition_fragment_C(mma, tile);
    clear(acc_st);
    clear(acc_dpt);
    for (int c = 0; c < qc; ++c, ++job) {
      const int s = pipeline.next(job);
      gemm_smem<Traits>(mma, stages.a(s), stages.b(s), acc_st);
    }
    for (int c = 0; c < vc; ++c, ++job) {
      const int s = pipeline.next(job);
      gemm_smem<Traits>(mma, stages.a(s), stages.b(s), acc_dpt);
    }
    const TileOrigin origin{work.b, h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kRows > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kRows);
    gradient_tile<Element, kFeatures, ScoreRows::keys, Dbias::skip>(p, rule, origin, masked, acc_st, acc_dpt, tScS,
                                                                      lse2, delta);
    Tensor p_frag = convert_fragment<Element>(acc_st);
    Tensor ds_frag = convert_fragment<Element>(acc_dpt);
    Tensor rPt = cute::make_tensor(p_frag.data(), acc_as_a_operand(p_frag.layout()));
    Tensor rdSt = cute::make_tensor(ds_frag.data(), acc_as_a_operand(ds_frag.layout()));
    for (int c = 0; c < vc; ++c, ++job) {
      const int s = pipeline.next(job);
      accumulate_chunk_global<Traits>(mma, dv_slot + std::int64_t(c) * Traits::kChunkFloats, t == 0, rPt,
                                      stages.bt(s), acc);
    }
    for (int c = 0; c < qc; ++c, ++job) {
      const int s = pipeline.next(job);
      accumulate_chunk_global<Traits>(mma, dk_slot + std::int64_t(c) * Traits::kChunkFloats, t == 0, rdSt,
                                      stages.bt(s), acc);
    }
  }
  cp_async_wait<0>();

  Element* dk = dk_at<Element>(p, seq.batch, k_row, work.hk);
  Element* dv = dv_at<Element>(p, seq.batch, k_row, work.hk);
  store_chunks<Traits>(mma, dk_slot, tiles > 0, acc, p.scale, dk, p.dk_row_stride, keys, p.head_dim, smem_out);
  store_chunks<Traits>(mma, dv_slot, tiles > 0, acc, 1.0f, dv, p.dv_row_stride, keys, p.head_dim_v, smem_out);
}

template <class Traits, unsigned kFeatures>
__device__ void dq_global_tile(const BwdParams& p, const WorkItem& work, char* smem, float* slot) {
  using Element = typename Traits::Element;
  constexpr int kRows = Traits::kRows, kChunk = Traits::kChunk, kStages = Traits::kStages;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kRows;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kRows), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  const int n_first = int(key_begin / kRows);
  const int k_tiles = key_end > key_begin ? int((key_end - 1) / kRows) - n_first + 1 : 0;
  const int hk = work.h / p.group;
  const int qc = (p.head_dim + kChunk - 1) / kChunk, vc = (p.head_dim_v + kChunk - 1) / kChunk;
  // Per key tile: S (Q_c, K_c), dP (dO_c, V_c), dQ (K_c).
  const int jobs_per_tile = 2 * qc + vc;
  const int jobs = k_tiles * jobs_per_tile;

  const std::int64_t q_row = seq.q_begin + m0;
  const Element* q_ptr = q_at<Element>(p, seq.batch, q_row, work.h);
  const Element* do_ptr = do_at<Element>(p, seq.batch, q_row, work.h);
  const Element* k_ptr = k_at<Element>(p, seq.batch, seq.k_begin, hk);
  const Element* v_ptr = v_at<Element>(p, seq.batch, seq.k_begin, hk);

  auto& storage = *reinterpret_cast<GlobalBwdSharedStorage<Traits>*>(smem);
  const ChunkStages<Traits> stages{storage.stages};
  Element* smem_out = storage.out;
  float* lse2 = storage.lse2;
  float* delta = storage.delta;
  load_row_stats<Element, kRows>(p, seq, work.h, m0, rows, lse2, delta);  // read after the first barriers

  const auto issue = [&](int job) {
    if (job < jobs) {
      const int t = job / jobs_per_tile, r = job % jobs_per_tile, s = job % kStages;
      const std::int64_t n0 = std::int64_t(n_first + t) * kRows;
      const int keys = int(min(std::int64_t(kRows), seq.k_len - n0));
      if (r < qc) {  // S
        const int c0 = r * kChunk;
        load_chunk<Traits>(q_ptr + c0, p.q_row_stride, rows, p.head_dim - c0, stages.a(s));
        load_chunk<Traits>(k_ptr + n0 * p.k_row_stride + c0, p.k_row_stride, keys, p.head_dim - c0, stages.b(s));
      } else if (r < qc + vc) {  // dP
        const int c0 = (r - qc) * kChunk;
        load_chunk<Traits>(do_ptr + c0, p.do_row_stride, rows, p.head_dim_v - c0, stages.a(s));
        load_chunk<Traits>(v_ptr + n0 * p.v_row_stride + c0, p.v_row_stride, keys, p.head_dim_v - c0, stages.b(s));
      } else {  // dQ
        const int c0 = (r - qc - vc) * kChunk;
        load_chunk<Traits>(k_ptr + n0 * p.k_row_stride + c0, p.k_row_stride, keys, p.head_dim - c0, stages.b(s));
      }
    }
    cp_async_fence();  // an empty group past the end keeps the wait counts uniform
  };
  auto pipeline = make_pipeline<kStages>(issue);
  pipeline.start();

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  const auto tile = make_shape(Int<kRows>{}, Int<kRows>{});
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(tile));                      // (query, key)
  Tensor acc = partition_fragment_C(mma, make_shape(Int<kRows>{}, Int<kChunk>{}));  // one dQ chunk

  int job = 0;
  for (int t = 0; t < k_tiles; ++t) {
    const std::int64_t n0 = std::int64_t(n_first + t) * kRows;
    Tensor acc_s = partition_fragment_C(mma, tile);
    Tensor acc_dp = partition_fragment_C(mma, tile);
    clear(acc_s);
    clear(acc_dp);
    for (int c = 0; c < qc; ++c, ++job) {
      const int s = pipeline.next(job);
      gemm_smem<Traits>(mma, stages.a(s), stages.b(s), acc_s);
    }
    for (int c = 0; c < vc; ++c, ++job) {
      const int s = pipeline.next(job);
      gemm_smem<Traits>(mma, stages.a(s), stages.b(s), acc_dp);
    }
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kRows > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kRows);
    gradient_tile<Element, kFeatures, ScoreRows::queries, Dbias::write>(p, rule, origin, masked, acc_s, acc_dp, tScS,
                                                                         lse2, delta);
    Tensor ds_frag = convert_fragment<Element>(acc_dp);
    Tensor rdS = cute::make_tensor(ds_frag.data(), acc_as_a_operand(ds_frag.layout()));
    for (int c = 0; c < qc; ++c, ++job) {
      const int s = pipeline.next(job);
      accumulate_chunk_global<Traits>(mma, slot + std::int64_t(c) * Traits::kChunkFloats, t == 0, rdS, stages.bt(s),
                                      acc);
    }
  }
  cp_async_wait<0>();

  Element* dq = dq_at<Element>(p, seq.batch, q_row, work.h);
  store_chunks<Traits>(mma, slot, k_tiles > 0, acc, p.scale, dq, p.dq_row_stride, rows, p.head_dim, smem_out);
}

// Each CTA uses its own workspace slot for every work item it takes (the grid is capped at the
// CTAs that fit on the GPU at once).
template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dkdv_global_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  float* slot = p.dkdv_slots + std::int64_t(blockIdx.x) * p.dkdv_slot_elems;
  for (std::int64_t index = blockIdx.x; index < p.num_kv_blocks; index += gridDim.x) {
    dkdv_global_tile<Traits, kFeatures>(p, decode_kv_work(p, index), smem, slot);
    __syncthreads();
  }
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) dq_global_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) char smem[];
  float* slot = p.dq_slots + std::int64_t(blockIdx.x) * p.dq_slot_elems;
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    dq_global_tile<Traits, kFeatures>(p, decode_work(p, index), smem, slot);
    __syncthreads();
  }
}

}  // namespace memattn::cuda::sm80
