// memattn: exact, memory-efficient attention, forward and backward.
//
// Layout is BMHK: Q [B, Mq, Hq, D], K [B, Mk, Hk, D], V [B, Mk, Hk, Dv], O [B, Mq, Hq, Dv],
// LSE [B, Hq, Mq] float32 (natural log). Query head h reads kv head h / (Hq / Hk).
// S = scale * Q K^T + bias, masked entries -inf, P = softmax(S), O = dropout(P) V.
// A query row with every key masked gives O = 0, LSE = -inf and zero gradients.
//
// Empty problems are valid: when B, Mq, Mk or Hq is 0 (with variable lengths: the packed rows of q
// or of k, or no sequence), the call validates everything as usual and returns before any kernel
// runs. A tensor with zero elements may have a null data pointer (a null pointer is refused for
// any other tensor; the backward's lse may be null where it has no elements). The results, the
// same on every backend: every gradient is 0 and every query row sees no key, so outputs that have
// elements are written as out = 0, LSE = -inf, dq = dk = dv = dbias = 0 (on CUDA by a fill kernel
// on the call's stream); outputs without elements are not touched. Hq = 0 is allowed with any Hk;
// Hk = 0 only with Hq = 0. D = 0 or Dv = 0 is refused (invalid_argument naming q's D or v's Dv).
//
// Non-finite values propagate as in float64 math attention: a NaN score makes its row's out and
// LSE NaN; a +inf score gives NaN (inf - inf in the softmax); scale must be finite. On the CPU, a
// scale beyond float32's range is inf in the float32 path (scores +-inf or NaN), with no
// undefined behaviour on the way.
//
// Every call validates all arguments on the host before anything runs; on error nothing is
// written and the Status message names the argument.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn {

// Overrides of the CUDA dispatcher's choices, for benchmarks, A/B comparisons and debugging; the
// defaults are the library's own choices. The kernel is checked like every argument: it must be
// a compiled row of the call's pass (fwd_... for forward(), bwd_... for backward()), and on the
// CPU and reference backends, which have no rows, it must be empty (an error rather than ignored,
// so that a measurement never silently runs something other than what it names). A forced row
// that cannot run the problem fails the call with its reason (invalid_argument); forced, a row
// runs where the dispatcher would pass over it (a row tuned for longer sequences, a fallback tile).
// The CPU backends make no scheduling choices and ignore the two flags and num_splits.
struct KernelOverrides {
  std::string kernel;           // a row name from list_kernels() / `memattn kernels`: the only row of its pass that may run
  bool l2_sized_groups = true;  // false: the causal backward's work groups stay sized for load balance where the
                                // pairs in flight would reread more than half of L2 (by default they shrink to fit)
  bool split_last_wave = true;  // false: the one-pass backward runs a part-full last wave of key tiles whole
                                // instead of splitting each of those tiles over several CTAs
  int num_splits = 0;  // forward: over how many CTAs each query tile's keys are split, the parts then combined
                       // by their LSE (0: the dispatcher's choice, which splits only where the query tiles
                       // leave SMs idle, as in decoding; 1: never; 2..256: that many, on a row that can split)
};

// Settings shared by the forward and the backward pass.
struct Options {
  Mask mask;
  Dropout dropout;
  std::optional<double> scale;  // default 1 / sqrt(D)
  Varlen varlen;
  Backend backend = Backend::automatic;
  Precision precision = Precision::automatic;  // fp32 products on the CUDA backend (types.hpp)
  void* stream = nullptr;  // cudaStream_t for the CUDA backend; ignored on the CPU
  // Scratch memory where the tensors live. When `workspace` is null the library allocates what it
  // needs itself; when it is set it must hold at least the size the *_workspace_size query gives.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // Or, with `workspace` null, the caller's allocator: asked once per call, after validation and
  // planning, for the bytes the call needs (never 0). It returns 16-byte aligned memory of the
  // tensors' device that stays usable by the work the call issues to `stream` (a stream-ordered
  // caching allocator's block, handed back when the call returns, is), or null, which fails the
  // call. This plans once per call, where the size query and the call would plan twice.
  std::function<void*(std::size_t)> allocate_workspace;
  KernelOverrides overrides;  // the CUDA dispatcher's choices, overridden (see above)
};

// A KV cache (inference): the forward's keys and values come from a cache that the call may first
// append to. Enabled by `seqlens`; then ForwardArgs::k and ::v are the cache's two tensors:
// - contiguous: [B_cache, Mk_max, Hk, D] and [B_cache, Mk_max, Hk, Dv]; sequence b lives in cache
//   row batch_idx[b] (without batch_idx: row b, and B_cache = B);
// - paged (block_table given): [num_pages, page_size, Hk, D] and [num_pages, page_size, Hk, Dv],
//   any page_size >= 1; key position j of sequence b lives in page block_table[b, j / page_size],
//   row j % page_size. Entries for positions past a sequence's keys are never read.
// seqlens[b] keys of sequence b are in the cache before the call. k_new [B, M_new, Hk, D] and
// v_new [B, M_new, Hk, Dv] (optional, together) are written at positions seqlens[b] to
// seqlens[b] + M_new - 1; the call then attends to all seqlens[b] + M_new keys, the Mq queries
// being the last Mq positions, so a mask must be aligned bottom_right (causal decoding and chunked
// prefill). seqlens itself is not updated: the caller adds M_new.
// Validation reads seqlens, batch_idx and block_table on the host and checks, before anything is
// written: every length within the cache's capacity, the page of every position in use in
// [0, num_pages), and that no new key's slot is any other position's of the call (nor, with
// batch_idx, two sequences one row). Not with a cache: bias, dropout, variable lengths; the
// backward takes no cache. The CUDA backend runs cache calls on its paged rows (bf16/fp16, D and
// Dv <= 256, up to 2^31 - 1 keys per sequence); it copies the index arrays to the host to check
// them, waiting for the call's stream, unless max_seqlen_k bounds every sequence's keys after the
// append: then it reads no index on the host (nothing waits; a CUDA graph can capture the call)
// and its kernels clamp each length to the bound and each page into the cache, so malformed
// indices never make them read or write outside the tensors, but such a call's output and
// appended slots are unspecified (overlapping writes included). The CPU backends always read and
// check every value, the bound included.
struct KvCache {
  IndexRef seqlens;        // [B]: keys in the cache per sequence before the call; enables the cache
  IndexRef batch_idx;      // optional [B], contiguous caches: the cache row of each sequence
  IndexTable block_table;  // optional [B, max_pages]: the pages of each sequence, in order
  TensorRef k_new, v_new;  // optional: appended, then attended to
  std::int64_t max_seqlen_k = kUnknownLength;  // optional: every sequence's keys after the append, at most

  bool enabled() const {
    return seqlens.defined() || batch_idx.defined() || block_table.defined() || k_new.defined() || v_new.defined();
  }
};

struct ForwardArgs : Options {
  TensorRef q, k, v;  // inputs (with a KV cache: the cache, written where new keys go)
  TensorRef bias;     // optional: dtype of q or f32, broadcastable to [B, Hq, Mq, Mk] (see below)
  TensorRef out;      // [B, Mq, Hq, Dv], dtype of q
  TensorRef lse;      // optional: [B, Hq, Mq], f32
  KvCache kv_cache;   // optional (see above)
};

struct BackwardArgs : Options {
  TensorRef q, k, v, bias;  // as given to the forward
  TensorRef out, lse;       // the forward's results (lse is required)
  TensorRef dout;           // [B, Mq, Hq, Dv], dtype of q
  TensorRef dq, dk, dv;     // gradients, shaped like q, k, v
  TensorRef dbias;          // optional: the bias's sizes; broadcast dimensions are summed
  bool deterministic = false;  // bit-reproducible gradients (no atomics)
};

// Bias broadcasting: the bias is a rank-4 view whose dimension is either the full size
// (B, Hq, Mq, Mk) or 1; a dimension of size 1, or of full size with stride 0, is broadcast.
// dbias must have the bias's sizes; along a broadcast dimension it must have size 1 or stride 0,
// and it receives the sum over that dimension. With variable lengths, B is num_seqs and Mq/Mk
// are at least the longest sequence (the bias is indexed with positions local to a sequence).

Status forward(const ForwardArgs& args);
Status backward(const BackwardArgs& args);

// Validation alone (what forward/backward do first).
Status validate(const ForwardArgs& args);
Status validate(const BackwardArgs& args);

// Scratch bytes the chosen backend needs for these arguments (0 when none).
Status forward_workspace_size(const ForwardArgs& args, std::size_t* bytes);
Status backward_workspace_size(const BackwardArgs& args, std::size_t* bytes);

// Which backend and kernel a call would use, in words (e.g. "cpu-fast" or a kernel-table row).
Status describe_plan(const ForwardArgs& args, std::string* plan);
Status describe_plan(const BackwardArgs& args, std::string* plan);

// Floating-point operations of the forward's two matrix products over the (query, key) pairs
// the mask leaves visible: 2 * pairs * (D + Dv). The backward counts 2.5 times this (the
// FlashAttention convention). Variable lengths are read on the host even where a CUDA call with
// bounds would leave them on the device (a copy that waits for the device).
Status forward_flops(const ForwardArgs& args, double* flops);

// True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

const char* version();

}  // namespace memattn
