// The forward kernels' parameters: a plain struct the dispatcher fills on the host from the
// validated Problem, passed by value. Strides count elements; a broadcast dimension has stride 0.
#pragma once

#include <cstdint>

namespace memattn::cuda {

// The most keys per sequence a KV cache call may hold on this backend: the paged loads count key
// positions in int32 (paged_kv.hpp's PageLookup); plan_forward refuses longer.
constexpr std::int64_t kMaxCachePosition = 0x7fffffff;

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* bias;  // null without bias
  void* out;
  float* lse;        // null when not asked for

  std::int64_t q_batch_stride, q_row_stride, q_head_stride;
  std::int64_t k_batch_stride, k_row_stride, k_head_stride;
  std::int64_t v_batch_stride, v_row_stride, v_head_stride;
  std::int64_t o_batch_stride, o_row_stride, o_head_stride;
  std::int64_t lse_batch_stride, lse_head_stride, lse_row_stride;
  std::int64_t bias_batch_stride, bias_head_stride, bias_row_stride, bias_col_stride;
  bool bias_is_f32;  // else the bias has the dtype of q

  int batch;  // B, or the number of sequences with variable lengths
  int heads_q, heads_k, group;
  int head_dim, head_dim_v;
  std::int64_t seqlen_q, seqlen_k;  // fixed lengths, or the bounds on them with variable lengths
  const int* seqstart_q;            // variable lengths (device arrays), null otherwise
  const int* seqstart_k;
  const int* seqused_k;
  std::int64_t packed_q, packed_k;  // variable lengths: the packed rows of q and of k (dimension 1)

  float scale;       // softmax scale
  float scale_log2;  // softmax scale * log2(e)

  std::int64_t window_left, window_right;  // -1 = unbounded
  bool bottom_right;

  bool dropout;
  std::uint32_t dropout_threshold;
  float dropout_scale;  // 1 / (1 - p)
  std::uint32_t seed_lo, seed_hi, dropout_offset;

  // Large head dims: the fp32 output accumulator in global memory, per CTA slot, in MMA-fragment
  // order (see sm80/fwd_global_kernel.hpp).
  float* o_accum;
  std::int64_t o_accum_slot_elems;

  // Split keys (split_combine.hpp): each query tile's key tiles are divided over num_splits CTAs
  // (1: no split), each writing its rows' normalised output and LSE in fp32 to the workspace,
  // [split][sequence or batch][head][row]; a combine kernel merges them into out and lse.
  int num_splits;
  float* partial_out;            // [num_splits, partial_batch, heads_q, partial_rows, head_dim_v]
  float* partial_lse;            // [num_splits, partial_batch, heads_q, partial_rows]
  std::int64_t partial_batch;    // batch, or 1 with variable lengths
  std::int64_t partial_rows;     // seqlen_q, or the packed rows of q with variable lengths

  int num_m_blocks;         // query tiles per (sequence, head)
  std::int64_t num_blocks;  // num_m_blocks * heads_q * batch * num_splits: the work items
  std::int64_t grid_ctas;   // CTAs to launch (each takes work items in turn); 0: one per work item
  std::int64_t work_groups;  // groups of (sequence, head) pairs in the work order; 0: one per pair (tile_scheduler.hpp)

  // A KV cache (ForwardArgs::kv_cache; read by the kPagedKV rows only; last, so that the other
  // fields keep the offsets the other rows were measured with): k and v are its tensors,
  // dimension 0 its pages (cache rows, for a contiguous cache) and dimension 1 their rows. Sequence
  // b holds cache_seqlens[b] + cache_new_keys keys; position j is row j % page_size of page
  // cache_pages[b * cache_pages_stride + j / page_size] (page b where cache_pages is null). The
  // page size is given as its divisor for int32 positions (paged_kv.hpp's set_cache_page_size).
  // Values the host did not read (KvCache::max_seqlen_k) are clamped: lengths to seqlen_k, pages
  // into [0, cache_num_pages).
  const int* cache_seqlens;
  int cache_new_keys;
  const int* cache_pages;
  std::int64_t cache_pages_stride, cache_num_pages;
  int cache_page_divisor;
  std::uint32_t cache_page_multiplier, cache_page_shift;
  // The append inside the forward kernel (kv_cache.cu's append_in_forward; cache_append.hpp):
  // k_new and v_new ([B, cache_new_keys, Hk, D or Dv]), whose rows the kernel writes into the cache
  // at positions k_len - cache_new_keys onwards. Null: the append kernel wrote them before.
  const void* cache_k_new;
  const void* cache_v_new;
  std::int64_t k_new_batch_stride, k_new_row_stride, k_new_head_stride;
  std::int64_t v_new_batch_stride, v_new_row_stride, v_new_head_stride;

  // The Hopper forward's work items past the first grid_ctas, drawn by its CTAs as they finish one
  // (sm90/fwd/producer.hpp): a counter in the workspace, cleared before the launch. Null elsewhere.
  unsigned long long* items_drawn;
};

}  // namespace memattn::cuda
