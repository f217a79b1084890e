// The sm80 forward kernel with the output accumulator in registers (head dims up to 256).
// With split keys (split_keys.hpp) a CTA walks its part of the tile's key tiles and writes fp32
// partial results instead of out and lse.
//
// One CTA owns kBlockM query rows of one (sequence, head). It walks the key tiles the mask leaves
// visible, last to first: S = Q K^T (ldmatrix + mma.sync), scores scaled to base 2, bias added,
// boundary tiles masked, online softmax, dropout, then O += P V with P reused from the
// accumulator registers as the A operand. K and V have one shared-memory buffer each; the load of
// V(n) overlaps Q K(n)^T and the load of K(n-1) overlaps softmax and P V(n).
// The fp32 rows (Element float) run both GEMMs as 3xTF32 (tf32x3.hpp) and keep the scores in
// natural units (kNaturalLse).
#pragma once

#include <cute/tensor.hpp>

#include <type_traits>

#include "core/mask.hpp"
#include "cuda/common/cache_append.hpp"
#include "cuda/common/dependent_launch.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/key_tiles.hpp"
#include "cuda/common/paged_kv.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/split_keys.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/sm80/fwd_traits.hpp"

namespace memattn::cuda::sm80 {

using namespace cute;

// The register forward's shared memory: Q, K and V tiles (the output tile reuses Q's space in the
// epilogue), ...
template <class Traits>
struct ForwardTiles {
  using Element = typename Traits::Element;
  Element q[Traits::kSmemElemsQ];
  Element k[Traits::kSmemElemsKV];
  Element v[Traits::kSmemElemsKV];
};

// ... then, in the kBiasTile rows, the bias of the (query tile, key tile) that K holds; in the
// kPagedKV rows, where two key tiles' rows are in K and V (the next tile's located while this one's
// are read).
enum class ForwardExtra { none, bias_tile, paged_rows };
template <unsigned kFeatures>
constexpr ForwardExtra forward_extra() {
  return tiles_bias(kFeatures) ? ForwardExtra::bias_tile
         : (kFeatures & kPagedKV) != 0 ? ForwardExtra::paged_rows : ForwardExtra::none;
}
template <class Traits, unsigned kFeatures, ForwardExtra = forward_extra<kFeatures>()>
struct ForwardSharedStorage : ForwardTiles<Traits> {
  static constexpr bool kTileBias = false;
};
template <class Traits, unsigned kFeatures>
struct ForwardSharedStorage<Traits, kFeatures, ForwardExtra::bias_tile> : ForwardTiles<Traits> {
  static constexpr bool kTileBias = true;
  char bias[BiasTileShape<Traits::kBlockM, Traits::kBlockN>::kBytes];
};
template <class Traits, unsigned kFeatures>
struct ForwardSharedStorage<Traits, kFeatures, ForwardExtra::paged_rows> : ForwardTiles<Traits> {
  static constexpr bool kTileBias = false;
  LocatedRow rows[2][Traits::kBlockN];
};

template <class Traits, unsigned kFeatures>
__device__ void forward_tile(const FwdParams& p, const WorkItem& work_in, char* smem) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;

  // kPagedKV: K and V from a KV cache's pages, each sequence's key count from the cache. The other
  // rows read a cache of one page per sequence (p.cache_seqlens set: the dispatcher sends no other
  // cache here) as strided tensors: a branch per work item, where locating rows costs every tile.
  constexpr bool kPaged = (kFeatures & kPagedKV) != 0;
  const auto sequence = [&](int b) {
    if constexpr (kPaged) return cache_sequence_info(p, b);
    else return p.cache_seqlens != nullptr ? cache_sequence_info(p, b) : sequence_info(p, b);
  };
  WorkItem work = work_in;
  const SequenceInfo seq = sequence(work.b);
  // The append inside the forward (cache_append.hpp): the new rows into the cache, all of them by
  // the first CTA of each (sequence, kv head), before anything can return.
  const auto cache_rows = [&] {
    if constexpr (kPaged) return PageLookup(p, work.b);
    else return OneCacheRow{p.cache_seqlens != nullptr ? contiguous_cache_row(p, work.b) : 0};
  };
  if (p.cache_k_new != nullptr && work.split == 0 && work.m_block == 0 && work.h % p.group == 0)
    write_new_rows<Element, Traits::kThreads>(p, work.b, work.h / p.group, seq.k_len, 0, seq.k_len, cache_rows());
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  std::int64_t key_begin = 0, key_end = 0;
  {
    const detail::MaskRule rule = mask_rule(p, seq);
    rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  }
  if (key_begin >= key_end) {
    if (p.num_splits > 1) write_empty_partial<Traits::kThreads>(p, seq, work.h, work.split, m0, rows);
    else write_empty_rows<Traits>(p, seq, work.h, m0, rows);
    return;
  }
  int n_first = int(key_begin / kBlockN), n_last = int((key_end - 1) / kBlockN);
  if (!split_key_tiles(p, work.split, &n_first, &n_last)) {
    write_empty_partial<Traits::kThreads>(p, seq, work.h, work.split, m0, rows);
    return;
  }
  // Key tiles [n_full_lo, n_full_hi] need no mask (every element visible, no key past k_len).
  int n_full_lo, n_full_hi;
  {
    const detail::MaskRule rule = mask_rule(p, seq);
    const std::int64_t lo = rule.first_key(m0 + rows - 1);             // tile_visible: first_key(i1 - 1) <= j0
    const std::int64_t hi = min(rule.end_key(m0), seq.k_len);          // j1 <= end_key(i0) and j1 <= k_len
    n_full_lo = int((lo + kBlockN - 1) / kBlockN);
    n_full_hi = int(hi / kBlockN) - 1;
  }

  // Shared memory.
  auto& storage = *reinterpret_cast<ForwardSharedStorage<Traits, kFeatures>*>(smem);
  Element* smem_q = storage.q;
  Element* smem_k = storage.k;
  Element* smem_v = storage.v;
  Tensor sQ = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sK = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
  Tensor sV = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});
  Tensor sVt = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutVt{});
  const auto tile_q = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  const auto tile_kv = make_shape(Int<kBlockN>{}, Int<kHeadDim>{});
  typename Traits::LoadCopy load;
  typename Traits::TiledMma mma;

  // K and V pointers at the sequence's first key; tile n starts kBlockN * n rows further. With a
  // KV cache, at the head in page 0: each row's page is looked up (paged_kv.hpp).
  const int hk = work.h / p.group;
  const std::int64_t kv_batch = kPaged ? 0 : (p.cache_seqlens != nullptr ? contiguous_cache_row(p, work.b) : seq.batch);
  // The sequence's page lookup, made once: rebuilt at each load it cost the paged D = 128 row a
  // spill under the three-CTA register cap. Each key tile's rows are located with it into shared
  // memory, tile n's into rows[n % 2], where both of the tile's copies read them: the block-table
  // entries read (read_pages) before a GEMM, the rows located from them (locate_rows) after it.
  [[maybe_unused]] const auto pages = [&] {
    if constexpr (kPaged) return PageLookup(p, work.b);
    else return 0;
  }();
  const auto tile_keys = [&](int n) { return int(min(std::int64_t(kBlockN), seq.k_len - std::int64_t(n) * kBlockN)); };
  const auto read_pages = [&](int n) {
    if constexpr (kPaged)
      return read_tile_pages<kBlockN, Traits::kThreads>(pages, n * kBlockN, tile_keys(n), opaque_thread<Traits::kThreads>());
    else return 0;
  };
  const auto locate_rows = [&](int n, const auto& read) {
    if constexpr (kPaged) {
      const PageStrides strides{p.k_batch_stride, p.k_row_stride, p.v_batch_stride, p.v_row_stride};
      locate_tile_rows<kBlockN, Traits::kThreads>(pages, read, strides, n * kBlockN, tile_keys(n),
                                                  opaque_thread<Traits::kThreads>(), storage.rows[n % 2]);
    }
  };
  const Element* k_ptr = k_at<Element>(p, kv_batch, seq.k_begin, hk);
  const Element* v_ptr = v_at<Element>(p, kv_batch, seq.k_begin, hk);
  // Copies K or V tile n into shared memory (rows past the sequence's keys and head-dim columns
  // past `cols` zero-filled). Everything derived from the thread index is rebuilt from an opaque
  // copy of it at each use so that the compiler keeps no per-copy addresses live across the loop.
  const auto load_kv = [&](const Element* base, KvOperand operand, std::int64_t row_stride, Element* smem_dst, int n,
                           int cols) {
    const int t = opaque_thread<Traits::kThreads>();
    auto thr = load.get_thread_slice(t);
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    if constexpr (kPaged) {
      Tensor s = cute::make_tensor(make_smem_ptr(smem_dst), typename Traits::SmemLayoutKV{});
      copy_paged_rows(load, thr, opaque(base), tile_kv, s, storage.rows[n % 2], operand,
                      tile_keys(n), cols);
    } else {
      Tensor g = cute::make_tensor(make_gmem_ptr(opaque(base) + n0 * row_stride), tile_kv, make_stride(row_stride, _1{}));
      Tensor s = cute::make_tensor(make_smem_ptr(smem_dst), typename Traits::SmemLayoutKV{});
      copy_predicated(load, thr.partition_S(g), thr.partition_D(s), thr.partition_S(make_identity_tensor(tile_kv)),
                      tile_keys(n), cols);
    }
  };

  {
    const int t = threadIdx.x;
    auto thr = load.get_thread_slice(t);
    const Element* q_ptr = q_at<Element>(p, seq.batch, seq.q_begin + m0, work.h);
    Tensor gQ = cute::make_tensor(make_gmem_ptr(q_ptr), tile_q, make_stride(p.q_row_stride, _1{}));
    copy_predicated(load, thr.partition_S(gQ), thr.partition_D(sQ), thr.partition_S(make_identity_tensor(tile_q)), rows,
                    p.head_dim);
  }
  // kBiasTile: the bias of key tile n goes to shared memory together with K(n).
  constexpr bool kTileBias = tiles_bias(kFeatures);
  using BiasTile = BiasTileShape<kBlockM, kBlockN>;
  char* smem_bias = bias_tile_of(storage);
  const auto load_bias = [&](int n) {
    if constexpr (kTileBias)
      if (p.bias != nullptr)
        load_bias_tile<kBlockM, kBlockN, Traits::kThreads>(p, work.b, work.h, m0, std::int64_t(n) * kBlockN, seq.q_len,
                                                           seq.k_len, smem_bias);
  };
  // The new rows of this CTA's key tiles, written by its threads before any of them reads them.
  if (p.cache_k_new != nullptr)
    write_new_rows<Element, Traits::kThreads>(p, work.b, hk, seq.k_len, std::int64_t(n_first) * kBlockN,
                                              (std::int64_t(n_last) + 1) * kBlockN, cache_rows());
  if constexpr (kPaged) locate_rows(n_last, read_pages(n_last));
  if (kPaged || p.cache_k_new != nullptr) __syncthreads();
  load_kv(k_ptr, KvOperand::k, p.k_row_stride, smem_k, n_last, p.head_dim);
  load_bias(n_last);
  cp_async_fence();

  Tensor acc_o = partition_fragment_C(mma, tile_q);  // (MMA, MMA_M, MMA_D), fp32
  clear(acc_o);
  Tensor acc_o_rc = rowcol(acc_o);
  OnlineSoftmax<decltype(size<0>(acc_o_rc))::value> softmax;
  softmax.init();

  // One key tile, of a kind fixed at compile time (KeyTile) so that the tiles inside the window
  // carry no mask code at all (the compiler would otherwise predicate it into every iteration).
  // With KeyTile::unmasked_scale_in_softmax the scores stay unscaled and the softmax's exp2 FFMA
  // applies the scale: only for tiles without bias (a bias adds to scaled scores) and with scale > 0
  // (the max of the unscaled scores is then the scaled max). Otherwise transform_scores_rows leaves
  // scale * s + bias and the softmax's FFMA applies log2(e). Always inlined: as a call (which nvcc
  // chose for the rows with bias/dropout code) the accumulators it captures by reference live in
  // local memory -- 832 B per thread at D = 256, 20 TFLOP/s.
  const auto key_tile = [&](int n, auto kind) __attribute__((always_inline)) {
    constexpr bool kMasked = decltype(kind)::value == KeyTile::masked;
    constexpr bool kScaleInSoftmax = decltype(kind)::value == KeyTile::unmasked_scale_in_softmax;
    static_assert(!kScaleInSoftmax || (!kMasked && (kFeatures & kBias) == 0));
    const int t = opaque_thread<Traits::kThreads>();
    auto thr_mma = mma.get_thread_slice(t);
    Tensor tSrQ = operand_fragment<Traits>(thr_mma.partition_fragment_A(sQ));   // (MMA, MMA_M, MMA_K)
    Tensor tSrK = operand_fragment<Traits>(thr_mma.partition_fragment_B(sK));   // (MMA, MMA_N, MMA_K)
    Tensor tOrVt = operand_fragment<Traits>(thr_mma.partition_fragment_B(sVt));  // (MMA, MMA_D, MMA_N)
    auto q_s2r_copy = make_tiled_copy_A(typename Traits::SmemToRegAtom{}, mma);
    auto k_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtom{}, mma);
    auto v_s2r_copy = make_tiled_copy_B(typename Traits::SmemToRegAtomTransposed{}, mma);
    auto q_s2r = q_s2r_copy.get_thread_slice(t);
    auto k_s2r = k_s2r_copy.get_thread_slice(t);
    auto v_s2r = v_s2r_copy.get_thread_slice(t);
    Tensor tSsQ = q_s2r.partition_S(sQ);
    Tensor tSrQ_view = q_s2r.retile_D(tSrQ);
    Tensor tSsK = k_s2r.partition_S(sK);
    Tensor tSrK_view = k_s2r.retile_D(tSrK);
    Tensor tOsVt = v_s2r.partition_S(sVt);
    Tensor tOrVt_view = v_s2r.retile_D(tOrVt);

    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    Tensor acc_s = partition_fragment_C(mma, make_shape(Int<kBlockM>{}, Int<kBlockN>{}));
    clear(acc_s);
    cp_async_wait<0>();
    __syncthreads();  // K(n) landed; everyone is done with V(n + 1) and with its rows
    load_kv(v_ptr, KvOperand::v, p.v_row_stride, smem_v, n, p.head_dim_v);
    cp_async_fence();
    // K(n - 1)'s rows: their block-table entries read now, located after the GEMM (its copy reads
    // them after the next barrier).
    const auto next_pages = read_pages(max(n - 1, n_first));  // the last tile: unused

    const auto load_qk = [&](int kk) {
      copy(q_s2r_copy, tSsQ(_, _, kk), tSrQ_view(_, _, kk));
      copy(k_s2r_copy, tSsK(_, _, kk), tSrK_view(_, _, kk));
    };
    gemm_loaded<Traits>(mma, tSrQ, tSrK, load_qk, acc_s);
    // Tile coordinates of every score element, for mask, bias and dropout.
    Tensor tScS = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{})));
    const SequenceInfo lseq{0, 0, opaque(seq.q_len), 0, opaque(seq.k_len), 0};
    const detail::MaskRule rule = mask_rule(p, lseq);
    const TileOrigin origin{work.b, work.h, opaque(m0), n0, lseq.q_len, lseq.k_len};
    SharedBias shared_bias;
    if constexpr (kTileBias)
      if (p.bias != nullptr) shared_bias = {smem_bias, BiasTile::kPitch};
    if constexpr (!kScaleInSoftmax)
      transform_scores_rows<Element, bias_code(kFeatures)>(p, rule, origin, kMasked, acc_s, tScS, shared_bias);

    if (n > n_first) locate_rows(n - 1, next_pages);
    cp_async_wait<0>();
    __syncthreads();  // V(n) landed; everyone is done with K(n) (and its bias tile)
    if (n > n_first) {
      load_kv(k_ptr, KvOperand::k, p.k_row_stride, smem_k, n - 1, p.head_dim);
      load_bias(n - 1);
      cp_async_fence();
    }

    Tensor acc_s_rc = rowcol(acc_s);
    softmax.update(acc_s_rc, acc_o_rc, kScaleInSoftmax ? p.scale_log2 : kLog2e);
    if constexpr ((kFeatures & kDropout) != 0 && (kFeatures & kDropoutPaired) != 0) {
      if (p.dropout) apply_dropout_rows_paired(p, origin, acc_s, tScS);
    } else if constexpr ((kFeatures & kDropout) != 0) {
      if (p.dropout) apply_dropout_rows(p, origin, acc_s, tScS);
    }
    Tensor p_frag = convert_fragment<Element>(acc_s);  // fp32: kept as is
    Tensor tOrP = cute::make_tensor(p_frag.data(), p_as_a_operand<Traits>(p_frag.layout()));
    if constexpr (Traits::kTf32x3) {
      gemm_tf32x3_columns(mma, SplitP(tOrP), thr_mma.partition_B(sVt), acc_o);
    } else {
      CUTE_UNROLL
      for (int kk = 0; kk < size<2>(tOrP); ++kk) {
        copy(v_s2r_copy, tOsVt(_, _, kk), tOrVt_view(_, _, kk));
        gemm(mma, tOrP(_, _, kk), tOrVt(_, _, kk), acc_o);
      }
    }
  };
  // Last to first: the masked tiles at the right edge of the window (and past the keys), the
  // unmasked ones, then the masked ones at its left edge.
  // A negative (or zero) scale takes the unmasked tiles through the second loop, and so do the fp32
  // rows, whose softmax takes natural-unit scores (kNaturalLse).
  int n = n_last;
  CUTE_NO_UNROLL
  for (; n >= n_first && n > n_full_hi; --n) key_tile(n, KeyTileKind<KeyTile::masked>{});
  if constexpr ((kFeatures & kBias) == 0 && !kNaturalLse<Element>) {
    if (p.scale_log2 > 0.0f) {
      CUTE_NO_UNROLL
      for (; n >= n_first && n >= n_full_lo; --n) key_tile(n, KeyTileKind<KeyTile::unmasked_scale_in_softmax>{});
    }
  }
  CUTE_NO_UNROLL
  for (; n >= n_first && n >= n_full_lo; --n) key_tile(n, KeyTileKind<KeyTile::unmasked>{});
  CUTE_NO_UNROLL
  for (; n >= n_first; --n) key_tile(n, KeyTileKind<KeyTile::masked>{});

  // Epilogue: normalise, LSE, then O through shared memory (Q's space) to global memory. The
  // sequence is looked up again rather than kept live across the key loop.
  work.b = opaque(work.b);
  work.h = opaque(work.h);
  work.m_block = opaque(work.m_block);
  const SequenceInfo eseq = sequence(work.b);
  const std::int64_t em0 = std::int64_t(work.m_block) * kBlockM;
  const int erows = int(min(std::int64_t(kBlockM), eseq.q_len - em0));
  auto thr_mma = mma.get_thread_slice(threadIdx.x);
  float lse[decltype(size<0>(acc_o_rc))::value];
  const float out_scale = (kFeatures & kDropout) && p.dropout ? p.dropout_scale : 1.0f;
  if constexpr (kNaturalLse<Element>) {
    float norm[decltype(size<0>(acc_o_rc))::value];
    softmax.final_factors_natural(out_scale, norm, lse);
    softmax.scale_rows(acc_o_rc, norm);
  } else {
    softmax.finalize(acc_o_rc, out_scale, lse);
  }
  if (p.num_splits > 1) {
    write_partial(p, eseq, work.h, opaque(work.split), em0, erows, acc_o_rc, lse,
                  rowcol(thr_mma.partition_C(make_identity_tensor(tile_q))));
    return;
  }
  write_lse(p, eseq, work.h, em0, erows, lse, rowcol(thr_mma.partition_C(make_identity_tensor(tile_q))));
  Element* o_ptr = o_at<Element>(p, eseq.batch, eseq.q_begin + em0, work.h);
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma, convert_fragment<Element>(acc_o), smem_q,
      cute::make_tensor(make_gmem_ptr(o_ptr), tile_q, make_stride(p.o_row_stride, _1{})), erows, p.head_dim_v);
}

// CTAs per SM the registers are budgeted for. Decoding is bound by the K/V bytes in flight, one
// tile per CTA: the paged rows' 64-query tile at D <= 128 fits 168 registers a thread without
// spilling (65536 / (3 * 128); it took 239 uncapped), so three CTAs per SM load instead of two.
// H100, bf16, D = 128, one query row: B 1 / 128k keys, contiguous cache 1.18-1.23 -> 1.05-1.07 ms,
// B 16 / 32k / 32-8 heads 0.98-1.01 -> 0.91-0.93; chunked prefill (16 rows) lost 5-10%. The plain
// 64-query rows gained 9% at B 1 / MHA but lost 7% at B 16 / GQA and 7% on chunked prefill: they
// keep the minimum of one, spelled out as everywhere else (leaving it out changes the code).
// (Decoding has since moved to the 16-row one-warp tile at D <= 128, kernel_table.py's
// SM80_DECODE_TILES; the 64-row paged tile serves 17 to 64 queries per key there.)
template <class Traits, unsigned kFeatures>
constexpr int min_ctas_per_sm() {
  const bool decode_tile = Traits::kBlockM == 64 && Traits::kWarps == 4 && Traits::kHeadDim <= 128;
  return decode_tile && kFeatures == kPagedKV ? 3 : 1;
}

template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads, (min_ctas_per_sm<Traits, kFeatures>()))
    forward_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) char smem[];
  let_dependents_start();  // the split keys' combine, which waits for this kernel's end
  for (std::int64_t index = blockIdx.x; index < p.num_blocks; index += gridDim.x) {
    forward_tile<Traits, kFeatures>(p, decode_work(p, index), smem);
    __syncthreads();  // shared memory is reused by the next work item
  }
}

}  // namespace memattn::cuda::sm80
