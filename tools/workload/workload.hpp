// Test and CLI support: build a problem from a spec, own its buffers (host, and a device mirror
// in CUDA builds), fill inputs with random normals, poison outputs, and compare results.
// Not part of the installed library.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memattn/attention.hpp"

namespace memattn::tools {

// Which bias dimensions (b, h, i, j) broadcast; the named kinds are those of the CLI's --bias.
using BiasPattern = std::array<bool, 4>;
enum class BiasKind { none, dense, broadcast_batch, broadcast_heads, row };
const char* to_string(BiasKind kind);
bool parse_bias_kind(const std::string& text, BiasKind* kind);
std::optional<BiasPattern> bias_pattern(BiasKind kind);
std::string describe_bias(const BiasPattern& pattern);

// A KV cache (ForwardArgs::kv_cache) in place of plain k and v, as in decoding and chunked
// prefill: each sequence's cache holds cache_len keys before the call, and new_keys more
// (kv_cache.k_new, v_new) are appended after them and attended to, so every query sees
// cache_len + new_keys keys (the spec's seqlen_k). Paged caches list their pages in a shuffled
// order, so that a kernel which ignored the block table would read the wrong keys; every slot
// that holds no cached key is NaN before the call, so that a read of one shows in the output.
enum class CacheLayout { none, contiguous, paged };
const char* to_string(CacheLayout layout);

struct CacheSpec {
  CacheLayout layout = CacheLayout::none;
  std::int64_t page_size = 16;  // paged: keys per page, >= 1
  std::int64_t cache_len = 0;   // keys each sequence holds before the call
  std::int64_t new_keys = 0;    // appended at cache_len, then attended to

  bool enabled() const { return layout != CacheLayout::none; }
};

// The first two sizes of the cache tensors k and v: paged, [num_pages, page_size] with
// pages_per_seq pages per sequence and one page that no sequence lists; contiguous, [B, keys].
// False when the counts overflow int64 or the pages are more than int32 block-table entries name.
struct CacheShape {
  std::int64_t rows = 0, cols = 0, pages_per_seq = 0;
};
bool cache_shape(std::int64_t batch, const CacheSpec& cache, CacheShape* shape);

struct ProblemSpec {
  std::int64_t batch = 1;
  std::int64_t seqlen_q = 128, seqlen_k = 128;
  std::int64_t heads_q = 4, heads_k = 4;
  std::int64_t head_dim = 64, head_dim_v = 64;
  DType dtype = DType::bf16;
  Mask mask;
  std::optional<BiasPattern> bias;  // none: no bias
  bool bias_f32 = false;       // bias in float32 instead of the dtype of q
  bool bias_expanded = false;  // broadcast dims as full size with stride 0 (torch .expand style)
  Dropout dropout;
  std::optional<double> scale;
  std::vector<std::int32_t> varlen_q, varlen_k;  // per-sequence lengths; empty = fixed lengths
  std::vector<std::int32_t> seqused_k;           // optional, with varlen
  std::int32_t varlen_outside = 0;  // with varlen: packed rows of q and k before the first sequence
                                    // and after the last, outside every sequence
  // With varlen, >= 0: Varlen's length bounds are given, the longest lengths plus this (the CUDA
  // backend then leaves the lengths on the device).
  std::int64_t varlen_bound_slack = -1;
  bool kv_broadcast_batch = false;  // K and V with batch stride 0 (one K/V shared by the batch)
  std::int64_t padding = 0;         // extra elements after each row and head: non-contiguous strides
  bool with_lse = true;
  bool with_dbias = true;  // when there is a bias
  bool deterministic = false;
  Backend backend = Backend::automatic;
  Precision precision = Precision::automatic;
  // Options::overrides of each pass (the CUDA dispatcher's): a forced row is a row of one pass.
  KernelOverrides forward_overrides, backward_overrides;
  // With a cache the workload has no backward tensors (the backward takes no cache), and the
  // Workload sets seqlen_k to cache_len + new_keys.
  CacheSpec cache;

  bool varlen() const { return !varlen_q.empty(); }
  std::int64_t num_seqs() const { return varlen() ? std::int64_t(varlen_q.size()) : batch; }
  // The lengths a bias covers: the longest sequence's, or the bounds given.
  std::int64_t max_q() const;
  std::int64_t max_k() const;
  std::string describe() const;
};

// Bytes of host memory that Workload(spec) allocates for its tensors, computed with checked
// arithmetic (workload/checked.hpp) before anything is allocated; false when the count does not
// fit in int64.
bool workload_bytes(const ProblemSpec& spec, std::int64_t* bytes);

// One tensor: its bytes and its view.
struct Buffer {
  std::vector<unsigned char> bytes;
  TensorRef view;
};

// With a KV cache, k and v are the cache tensors (written by the append) and k_new, v_new the
// new keys and values.
enum class Tensor { q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, k_new, v_new, count };
const char* to_string(Tensor t);

class Workload {
 public:
  explicit Workload(const ProblemSpec& spec);
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  ~Workload();

  const ProblemSpec& spec() const { return spec_; }

  // Arguments pointing at the device mirror after to_device(), else at the host buffers.
  ForwardArgs forward_args() const { return make_forward_args(where()); }
  BackwardArgs backward_args() const { return make_backward_args(where()); }
  // Arguments pointing at the host buffers, for the reference (without the spec's overrides: the
  // reference has no kernels to choose).
  ForwardArgs host_forward_args() const;
  BackwardArgs host_backward_args() const;

  // Random normal inputs (q, k, v, bias, dout, k_new, v_new), a pure function of seed and element
  // index; with a cache, NaN in every slot of k and v that holds no cached key.
  void fill_inputs(std::uint64_t seed);
  // NaN into every output buffer (out, lse, dq, dk, dv, dbias), host and device.
  void poison_outputs();

  Buffer& host(Tensor t) { return buffers_[int(t)]; }
  const Buffer& host(Tensor t) const { return buffers_[int(t)]; }
  bool has(Tensor t) const { return buffers_[int(t)].view.defined(); }

  // Device mirror (CUDA builds): allocate, copy inputs over; args then point at the device.
  Status to_device();
  bool on_device() const { return device_ != nullptr; }
  // The outputs, and with a KV cache also k and v (which the append writes).
  Status copy_outputs_to_host();
  Status copy_inputs_to_device();
  // One device workspace for the forward and (with dout) the backward, which their args then
  // carry, as a caller that runs many steps would keep one: without it the library allocates per
  // call from the stream-ordered pool, whose memory goes back to the driver at every
  // synchronisation and is mapped again on the next call (~0.7 ms for a backward's 134 MB dQ
  // workspace, which a synchronised timing counts).
  Status reserve_workspace();
  std::size_t device_bytes() const;
  std::size_t host_bytes() const;

  // Elements of an output (or input) gathered in contiguous order as float64.
  std::vector<double> to_double(Tensor t) const;
  // The same with broadcast (stride-0) dimensions taken once: dbias as the reference gives it.
  std::vector<double> to_double_reduced(Tensor t) const;
  // Sets a tensor's elements from values in contiguous order (rounded to its dtype), on the host;
  // call copy_inputs_to_device() afterwards for a device mirror.
  void set_values(Tensor t, const std::vector<double>& values);

  // With a cache: where key position j of sequence b lives, as (page or cache row, row within it):
  // the slot's elements are k's [first, second, h, e].
  std::pair<std::int64_t, std::int64_t> cache_slot(std::int64_t b, std::int64_t j) const;
  const std::vector<std::int32_t>& block_table() const { return block_table_; }  // [B, pages_per_seq], paged

 private:
  enum class Memory { host, device };  // the host buffers, or the device mirror
  Memory where() const { return on_device() ? Memory::device : Memory::host; }
  ForwardArgs make_forward_args(Memory memory) const;
  BackwardArgs make_backward_args(Memory memory) const;
  TensorRef view(Tensor t, Memory memory) const;
  void build_cache(std::int64_t batch);  // the cache's buffers, seqlens and block table
  void poison_unused_slots();           // NaN where no cached key is
  void set_cache_args(Memory memory, ForwardArgs* args) const;
  ProblemSpec spec_;
  Buffer buffers_[int(Tensor::count)];
  std::vector<std::int32_t> seqstart_q_, seqstart_k_, seqused_k_;
  CacheShape cache_shape_;
  std::vector<std::int32_t> cache_seqlens_, block_table_;

 public:
  struct Device;  // the CUDA mirror (device.hpp)

 private:
  std::unique_ptr<Device> device_;
};

// Error of x against ref: ref NaN marks elements that are not written (skipped); infinities must
// match exactly; any NaN in x where ref is a number counts as unwritten.
struct ErrorStats {
  double max_abs = 0.0;
  double rel_l2 = 0.0;        // ||x - ref|| / ||ref|| over finite ref elements
  std::int64_t bad = 0;       // NaN where ref is a number, or infinities that differ
  std::int64_t compared = 0;
  bool ok(double tolerance) const { return bad == 0 && rel_l2 <= tolerance; }
};
ErrorStats compare(const std::vector<double>& x, const std::vector<double>& ref);

// Relative-error limits of DESIGN.md §3 for outputs; gradients get twice these.
double output_tolerance(DType dtype);

std::string format_bytes(double bytes);

// Runs fn once and measures it: CUDA events around it when on_device, else the host clock.
Status time_call(bool on_device, const std::function<Status()>& fn, double* ms);
// CUDA graph replays of call(stream) after L2 flushes (Workload::Device::time_graph).
Status time_graph(const std::function<Status(void* stream)>& call, int iters, std::vector<double>* ms);
// Peak device memory in use (bytes) as the CUDA runtime sees it; 0 without CUDA.
double device_memory_in_use();

}  // namespace memattn::tools
