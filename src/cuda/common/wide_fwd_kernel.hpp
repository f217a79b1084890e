// The forward kernel for wide heads (D, Dv up to kHeadDim = 512, or 1024 split over a pair
// of CTAs on sm_90) with the output in registers.
//
// The global-accumulator rows serve any head dim, but their fp32 output crosses L2 once per key
// tile and Q is read again for every key tile (about 29 FLOP per L2 byte at D = 512). Here the
// whole Q tile stays in shared memory and the output in registers, split over the warps along
// the head dim (WideFwdTraits), so a key tile costs only its K and V (about 65 FLOP per byte).
// Per key tile: S = Q K^T on the 4 x 2 warp grid, scaled and masked; each row's maximum from the
// two warps that share it (shared memory); P to shared memory with each row's rescale factor;
// then every warp rescales its output columns and adds P V, one tile later: the loop runs
// S(n), P(n + 1) V(n + 1), softmax(n). K and V have one buffer each: K(n - 1) loads during
// P(n + 1) V(n + 1) and the softmax, V(n) during S(n - 1). Plain problems only (no bias, no
// dropout: those take the global-accumulator rows). The GEMMs are the traits' (Traits::Gemms):
// mma.sync through ldmatrix, or wgmma from shared memory on sm_90a, whose P V stays in flight
// until output_done, beside the next scores' exchange, masking and row maxima.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

#include "core/mask.hpp"
#include "cuda/common/epilogue.hpp"
#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score_mods.hpp"
#include "cuda/common/softmax.hpp"
#include "cuda/common/tile_scheduler.hpp"
#include "cuda/common/wide_fwd_traits.hpp"
#include "cuda/sm90/cluster.hpp"

namespace memattn::cuda {

using namespace cute;

// The pair's exchange slots and barriers in the storage (kHeadSplit > 1); none without a pair.
template <class Traits>
__device__ __forceinline__ sm90::ExchangeSlots pair_exchange_slots(WideFwdSharedStorage<Traits>& storage) {
  if constexpr (Traits::kHeadSplit > 1) return sm90::exchange_slots(storage.exchange_slots, storage.exchange_barriers);
  else return {};
}

// `exchanges`: the pair's exchanges so far (kHeadSplit > 1), across work items.
template <class Traits, unsigned kFeatures>
__device__ void forward_tile_wide(const FwdParams& p, const WorkItem& work, char* smem, int& exchanges) {
  static_assert(kFeatures == kPlain, "the wide rows take plain problems only");
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr bool kPair = Traits::kHeadSplit > 1;
  const int tid = threadIdx.x;
  const sm90::HeadDimShare share = sm90::head_dim_share<kHeadDim, Traits::kHeadSplit>(p);
  const int rank = share.rank, col0 = share.col0, qk_cols = share.qk_cols, v_cols = share.v_cols;

  const SequenceInfo seq = sequence_info(p, work.b);
  const std::int64_t m0 = std::int64_t(work.m_block) * kBlockM;
  if (m0 >= seq.q_len) return;
  const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
  const detail::MaskRule rule = mask_rule(p, seq);
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  if (key_begin >= key_end) {  // both CTAs of a pair return here
    if (rank == 0) write_empty_rows<Traits>(p, seq, work.h, m0, rows);
    return;
  }
  const int n_first = int(key_begin / kBlockN), n_last = int((key_end - 1) / kBlockN);

  auto& storage = *reinterpret_cast<WideFwdSharedStorage<Traits>*>(smem);
  Element* smem_q = storage.q;
  Element* smem_k = storage.k;
  Element* smem_v = storage.v;
  Element* smem_p = storage.p;
  float* max_part = storage.max_part;   // [key half][row]
  float* rescale_row = storage.rescale;  // [row]
  float* sum_part = storage.sum_part;    // [key half][row]
  const sm90::ExchangeSlots pair_slots = pair_exchange_slots(storage);
  Tensor sQ = cute::make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sK = cute::make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
  Tensor sVt = cute::make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutVt{});
  Tensor sP = cute::make_tensor(make_smem_ptr(smem_p), typename Traits::SmemLayoutP{});
  const auto tile_q = make_shape(Int<kBlockM>{}, Int<kHeadDim>{});
  const auto tile_kv = make_shape(Int<kBlockN>{}, Int<kHeadDim>{});
  const auto tile_s = make_shape(Int<kBlockM>{}, Int<kBlockN>{});

  typename Traits::LoadCopy load;
  const int hk = work.h / p.group;
  const Element* k_ptr = k_at<Element>(p, seq.batch, seq.k_begin, hk) + col0;
  const Element* v_ptr = v_at<Element>(p, seq.batch, seq.k_begin, hk) + col0;
  // Copies K or V tile n (rows past the keys and columns past `cols` zero-filled).
  const auto load_kv = [&](const Element* base, std::int64_t row_stride, Element* dst, int n, int cols) {
    auto thr = load.get_thread_slice(opaque_thread<Traits::kThreads>());
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    Tensor g = cute::make_tensor(make_gmem_ptr(opaque(base) + n0 * row_stride), tile_kv, make_stride(row_stride, _1{}));
    Tensor s = cute::make_tensor(make_smem_ptr(dst), typename Traits::SmemLayoutKV{});
    copy_predicated(load, thr.partition_S(g), thr.partition_D(s), thr.partition_S(make_identity_tensor(tile_kv)),
                    int(min(std::int64_t(kBlockN), seq.k_len - n0)), cols);
  };
  {
    auto thr = load.get_thread_slice(tid);
    const Element* q_ptr = q_at<Element>(p, seq.batch, seq.q_begin + m0, work.h) + col0;
    Tensor gQ = cute::make_tensor(make_gmem_ptr(q_ptr), tile_q, make_stride(p.q_row_stride, _1{}));
    copy_predicated(load, thr.partition_S(gQ), thr.partition_D(sQ), thr.partition_S(make_identity_tensor(tile_q)), rows,
                    qk_cols);
  }
  load_kv(k_ptr, p.k_row_stride, smem_k, n_last, qk_cols);
  cp_async_fence();
  cp_async_fence();  // an empty group in the place of V(n + 1), which the first tile does not have

  typename Traits::MmaS mma_s;
  typename Traits::MmaO mma_o;
  const int warp_key_half = (tid / 32) / Traits::kWarpsSRows;  // which keys of the tile this warp's S holds
  Tensor acc_o = partition_fragment_C(mma_o, tile_q);  // (MMA, MMA_M, MMA_N): every row, this warp's columns
  clear(acc_o);
  Tensor acc_o_rc = rowcol(acc_o);
  constexpr int kRowsS = 2;  // rows of S a thread holds (one m16 atom per warp)
  float row_max[kRowsS], row_sum[kRowsS];
  CUTE_UNROLL
  for (int r = 0; r < kRowsS; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f;

  // O += P V of the tile whose P, V and rescale factors are in shared memory: every warp rescales
  // its output columns (skipped when no row of the tile moved), then adds P V.
  const auto accumulate_pv = [&](int t) {
    const Tensor coord_o = mma_o.get_thread_slice(t).partition_C(make_identity_tensor(tile_q));
    const Tensor co_rc = rowcol(coord_o);
    constexpr int kRowsO = decltype(size<0>(acc_o_rc))::value;
    float factor[kRowsO];
    CUTE_UNROLL
    for (int r = 0; r < kRowsO; ++r) factor[r] = rescale_row[get<0>(co_rc(r, 0))];
    OnlineSoftmax<kRowsO>::rescale_if_moved(acc_o_rc, factor);
    Traits::Gemms::output(mma_o, sP, sVt, acc_o, t);
  };

  // Tile n's scores overlap tile n + 1's P V: S(n) = Q K(n)^T, then P(n + 1) V(n + 1), then S(n)'s
  // softmax. In the pair, the other CTA's partial S(n) travels during P V (about half the tile's
  // FLOPs) instead of being waited for. Groups of copies in flight at the top:
  // K(n), then V(n + 1).
  for (int n = n_last; n >= n_first; --n) {
    const int t = opaque_thread<Traits::kThreads>();
    const std::int64_t n0 = std::int64_t(n) * kBlockN;
    cp_async_wait<1>();
    Traits::Gemms::publish_smem_writes();  // K(n), and P(n + 1) stored at the end of the last pass
    __syncthreads();  // K(n) landed; everyone is done with the row maxima of tile n + 1

    Tensor acc_s = partition_fragment_C(mma_s, tile_s);
    clear(acc_s);
    Traits::Gemms::scores(mma_s, sQ, sK, acc_s, t);
    if constexpr (kPair) sm90::send_pair_partials<Traits::kThreads>(pair_slots, rank ^ 1, exchanges, acc_s);
    cp_async_wait<0>();
    Traits::Gemms::publish_smem_writes();
    __syncthreads();  // V(n + 1) landed; everyone is done with K(n)
    if (n > n_first) {
      load_kv(k_ptr, p.k_row_stride, smem_k, n - 1, qk_cols);
      cp_async_fence();
    }
    if (n < n_last) accumulate_pv(t);
    if constexpr (kPair) {
      sm90::add_pair_partials<Traits::kThreads>(pair_slots, exchanges++, acc_s);
      sm90::release_pair_slots(pair_slots, rank ^ 1);
    }
    const Tensor coord_s = mma_s.get_thread_slice(t).partition_C(make_identity_tensor(tile_s));
    const TileOrigin origin{work.b, work.h, m0, n0, seq.q_len, seq.k_len};
    const bool masked = n0 + kBlockN > seq.k_len || !rule.tile_visible(m0, m0 + rows, n0, n0 + kBlockN);
    transform_scores<Element, BiasCode::none>(p, rule, origin, masked, acc_s, coord_s, {}, log2_units(p));

    // Row maxima: this thread's keys, its quad's, then the other key half's through shared memory.
    Tensor s_rc = rowcol(acc_s);
    Tensor c_rc = rowcol(coord_s);
    static_assert(decltype(size<0>(s_rc))::value == kRowsS);
    float tile_max[kRowsS];
    CUTE_UNROLL
    for (int r = 0; r < kRowsS; ++r) {
      float m = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) m = fmaxf(m, s_rc(r, c));
      tile_max[r] = row_max_all<4>(m);
      if (t % 4 == 0) max_part[warp_key_half * kBlockM + get<0>(c_rc(r, 0))] = tile_max[r];
    }
    Traits::Gemms::output_done(acc_o);  // P(n + 1) V(n + 1), in flight on wgmma since accumulate_pv
    __syncthreads();  // both halves' maxima are in; everyone is done with P, V and the rescale factors of tile n + 1
    load_kv(v_ptr, p.v_row_stride, smem_v, n, v_cols);
    cp_async_fence();
    CUTE_UNROLL
    for (int r = 0; r < kRowsS; ++r) {
      const int row = get<0>(c_rc(r, 0));
      float row_tile_max = -INFINITY;  // over both key halves
      CUTE_UNROLL
      for (int half = 0; half < Traits::kWarpsSKeys; ++half)
        row_tile_max = fmaxf(row_tile_max, max_part[half * kBlockM + row]);
      // The same in both key halves' warps and in both CTAs of a pair (the same sums).
      const RowMaxMove move = move_row_max(row_max[r], row_tile_max);
      float sum = 0.0f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        s_rc(r, c) = fast_exp2(s_rc(r, c) - move.shift);
        sum += s_rc(r, c);
      }
      row_sum[r] = row_sum[r] * move.rescale + sum;
      if (warp_key_half == 0 && t % 4 == 0) rescale_row[row] = move.rescale;
    }
    auto p_store = make_tiled_copy_C(typename Traits::RegToSmemAtom{}, mma_s);
    auto p_store_thr = p_store.get_thread_slice(t);
    copy(p_store, p_store_thr.retile_S(convert_fragment<Element>(acc_s)), p_store_thr.partition_D(sP));
  }
  cp_async_wait<0>();
  Traits::Gemms::publish_smem_writes();
  __syncthreads();  // the last tile's V, P and rescale factors are in
  accumulate_pv(opaque_thread<Traits::kThreads>());
  Traits::Gemms::output_done(acc_o);

  // Epilogue: each row's sum from both key halves, LSE, O normalised and written through shared
  // memory (Q's space).
  const Tensor coord_s = mma_s.get_thread_slice(tid).partition_C(make_identity_tensor(tile_s));
  const Tensor c_rc = rowcol(coord_s);
  CUTE_UNROLL
  for (int r = 0; r < kRowsS; ++r) {
    const float sum = row_sum_all<4>(row_sum[r]);
    if (tid % 4 == 0) sum_part[warp_key_half * kBlockM + get<0>(c_rc(r, 0))] = sum;
  }
  __syncthreads();
  const auto row_total = [&](int row) {  // a row's sum over both key halves
    float sum = 0.0f;
    CUTE_UNROLL
    for (int half = 0; half < Traits::kWarpsSKeys; ++half) sum += sum_part[half * kBlockM + row];
    return sum;
  };
  float lse[kRowsS];
  CUTE_UNROLL
  for (int r = 0; r < kRowsS; ++r) {
    const float sum = row_total(get<0>(c_rc(r, 0)));
    const bool empty = row_max[r] == -INFINITY || !(sum > 0.0f);
    lse[r] = empty ? -INFINITY : (row_max[r] + __log2f(sum)) * 0.6931471805599453f;
  }
  if (warp_key_half == 0 && rank == 0) write_lse(p, seq, work.h, m0, rows, lse, c_rc);
  const Tensor coord_o = mma_o.get_thread_slice(tid).partition_C(make_identity_tensor(tile_q));
  const Tensor co_rc = rowcol(coord_o);
  constexpr int kRowsO = decltype(size<0>(acc_o_rc))::value;
  float norm[kRowsO];
  CUTE_UNROLL
  for (int r = 0; r < kRowsO; ++r) {
    const float sum = row_total(get<0>(co_rc(r, 0)));
    norm[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  OnlineSoftmax<kRowsO>::scale_rows(acc_o_rc, norm);
  Element* o_ptr = o_at<Element>(p, seq.batch, seq.q_begin + m0, work.h) + col0;
  store_tile<Traits, typename Traits::SmemLayoutQ>(
      mma_o, convert_fragment<Element>(acc_o), smem_q,
      cute::make_tensor(make_gmem_ptr(o_ptr), tile_q, make_stride(p.o_row_stride, _1{})), rows, v_cols);
}

// With kHeadSplit > 1 the grid is made of clusters of kHeadSplit CTAs, which take the work items
// together.
template <class Traits, unsigned kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) forward_wide_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) char smem[];
  constexpr int kSplit = Traits::kHeadSplit;
  int exchanges = 0;
  if constexpr (kSplit > 1) {
    auto& storage = *reinterpret_cast<WideFwdSharedStorage<Traits>*>(smem);
    sm90::init_exchange_slots<Traits::kThreads>(pair_exchange_slots(storage));
  }
  for (std::int64_t index = blockIdx.x / kSplit; index < p.num_blocks; index += gridDim.x / kSplit) {
    forward_tile_wide<Traits, kFeatures>(p, decode_work(p, index), smem, exchanges);
    __syncthreads();  // shared memory is reused by the next work item
  }
  if constexpr (kSplit > 1) sm90::finish_exchanges();
}

}  // namespace memattn::cuda
