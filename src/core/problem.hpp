// The validated, normalised description of one attention call, derived from ForwardArgs or
// BackwardArgs on the host. Backends read tensors through the args and sizes through this.
#pragma once

#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "memattn/attention.hpp"

namespace memattn::detail {

// One sequence of the batch: where its rows start in the tensors and how long it is.
struct Sequence {
  std::int64_t batch;    // index into the tensors' batch dimension (0 with variable lengths)
  std::int64_t q_begin;  // first query row in the M dimension
  std::int64_t q_len;
  std::int64_t k_begin;
  std::int64_t k_len;
};

// Where the keys of a KV cache call live (ForwardArgs::kv_cache), read on the host. A contiguous
// cache is one page per sequence: page_size = Mk_max, and sequence b's page is batch_idx[b] (or b).
struct CachePages {
  bool enabled = false;
  std::int64_t page_size = 0;
  std::int64_t pages_per_seq = 0;     // block table columns (1 for a contiguous cache)
  std::int64_t new_keys = 0;          // M_new, appended at seqlens[b] before attending
  std::vector<std::int32_t> seqlens;  // keys held before the call
  std::vector<std::int32_t> pages;    // [batch, pages_per_seq]; checked where a position is in use

  struct Slot {
    std::int64_t page, row;  // the cache tensors' dimensions 0 and 1
  };
  Slot slot(std::int64_t b, std::int64_t position) const {
    return {pages[std::size_t(b * pages_per_seq + position / page_size)], position % page_size};
  }
  std::int64_t keys(std::int64_t b) const { return seqlens[std::size_t(b)] + new_keys; }  // after the append
};

struct Problem {
  std::int64_t batch = 0;  // B, or the number of sequences with variable lengths
  std::int64_t heads_q = 0, heads_k = 0;
  std::int64_t head_dim = 0, head_dim_v = 0;
  std::int64_t seqlen_q = 0, seqlen_k = 0;  // Mq, Mk; the longest sequence with variable lengths
  bool varlen = false;
  // False when the CUDA backend was given length bounds (Varlen::bounded) and the values stay on
  // the device: then the host copies are empty and seqlen_q/seqlen_k are the bounds.
  bool lengths_known = true;
  std::vector<std::int32_t> seqstart_q, seqstart_k, seqlen_k_used;  // host copies (varlen only)
  CachePages cache;  // a KV cache call: seqlen_k is then the longest sequence's keys after the append

  DType dtype = DType::f32;
  double scale = 1.0;
  std::int64_t window_left = kUnbounded, window_right = kUnbounded;
  bool bottom_right = false;

  bool has_bias = false;
  bool bias_broadcast[4] = {false, false, false, false};  // per dimension b, h, i, j
  bool has_dbias = false;

  double dropout_p = 0.0;
  std::uint32_t dropout_threshold = 0;
  std::uint64_t dropout_seed = 0, dropout_offset = 0;

  // B, Mq, Mk (total packed rows with variable lengths) or Hq is 0: no (query, key) pair. The API
  // returns at once (api.cpp, finish_empty) before any backend runs.
  bool empty = false;

  Backend backend = Backend::cpu;  // resolved: cpu, cuda or reference
  int device = -1;                 // CUDA ordinal when backend == cuda

  bool has_dropout() const { return dropout_p > 0.0; }
  bool is_masked() const { return window_left != kUnbounded || window_right != kUnbounded; }
  std::int64_t group_size() const { return heads_k > 0 ? heads_q / heads_k : 0; }  // Hk = 0 only with Hq = 0
  Sequence sequence(std::int64_t b) const;  // needs lengths_known
  // Number of (query, key) pairs that the mask leaves visible, summed over batch and heads; with
  // the lengths unknown, every sequence counts at its bounds (an upper bound).
  double visible_pairs() const;
};

// The (query, key) pairs a mask leaves visible in one sequence of q_len queries and k_len keys:
// query i sees keys j with -left <= j - (i + shift) <= right (kUnbounded: no limit on that side),
// 0 <= j < k_len. O(1), so that the dispatcher can ask per call.
// A double: counts reach 2^62 and beyond (2^40 rows by 2^31 keys).
double visible_pairs_of(std::int64_t q_len, std::int64_t k_len, std::int64_t shift, std::int64_t left,
                        std::int64_t right);

// Whether variable lengths are read on the host even where the CUDA backend was given bounds
// (which lets it leave them on the device): `read` for counts that need every length (flops).
enum class Lengths { as_needed, read };

// The KV cache of a forward call (kv_cache.cpp): its structure, its values (read on the host) and
// the writes it asks for; fills p->cache and the key lengths. Called by build_problem once q, k, v
// and the call's location are checked.
Status check_kv_cache(const KvCache& cache, const Options& options, const TensorRef& q, const TensorRef& k,
                      const TensorRef& v, const TensorRef& bias, Lengths lengths, Problem* p);

// Validates every argument and fills `problem`. Nothing is launched or written.
Status build_problem(const ForwardArgs& args, Problem* problem, Lengths lengths = Lengths::as_needed);
Status build_problem(const BackwardArgs& args, Problem* problem, Lengths lengths = Lengths::as_needed);

// A caller's workspace: 16-byte aligned, and at least `needed` bytes (the chosen plan's).
Status check_workspace(const Options& options, std::size_t needed);

}  // namespace memattn::detail
