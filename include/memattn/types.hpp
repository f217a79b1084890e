// memattn public types: element types, strided tensor views, masks, dropout, variable lengths.
// No CUDA, CuTe or torch types appear here; device handles are passed as void*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace memattn {

// f64 is served by the float64 reference alone (Backend::reference; `automatic` picks it for f64
// host tensors): it exists for exact checks such as finite-difference gradient tests.
enum class DType : int { f32, f16, bf16, f64 };

const char* to_string(DType dtype);
std::size_t dtype_size(DType dtype);

// Which implementation runs a call. `automatic` follows the tensors: device pointers run on
// CUDA, host pointers on the fast CPU path. `reference` is the naive float64 CPU implementation
// (slow; for checking).
enum class Backend : int { automatic, cpu, cuda, reference };

const char* to_string(Backend backend);

// How the CUDA backend multiplies fp32 inputs (16-bit inputs ignore it: their products are exact in
// fp32). `ieee`: plain fp32 FMAs on CUDA cores. `tf32x3`: tensor cores, each fp32 product as three
// TF32 products (big and small parts of each operand), within DESIGN's fp32 tolerance
// (docs/decisions.md, fp32 precision). The backward has 3xTF32 rows for problems without bias or
// dropout, head dims up to 256, 16-byte aligned, not `deterministic`: they recompute the forward's
// 3xTF32 scores bit for bit; elsewhere it takes the FMA rows, which take the forward's LSE as exact
// for scores they recompute differently (given a 3xTF32 forward's LSE, dV's error was 5e-5 at
// logits of 100 and NaN at scores of 1e8). `automatic`: tf32x3, but ieee for a forward that writes
// the LSE of a problem the 3xTF32 backward rows do not take (a KV cache call's LSE meets no
// backward: tf32x3); the two passes agree unless the
// backward asks `deterministic` or its gradients are not 16-byte aligned (then ask ieee of both).
// The CPU backends always compute with fp32 (or float64) FMAs.
enum class Precision : int { automatic, ieee, tf32x3 };

const char* to_string(Precision precision);

// A strided view of up to 4 dimensions. Sizes and strides count elements, not bytes. The last
// dimension must be contiguous (stride 1); any other stride is free, 0 included (broadcast).
// Inputs are read through `data` and never written.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::int64_t sizes[4] = {0, 0, 0, 0};
  std::int64_t strides[4] = {0, 0, 0, 0};

  bool defined() const { return data != nullptr; }
  std::int64_t numel() const;
};

// A contiguous (row-major) view.
TensorRef make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> sizes);
// A view with explicit strides (elements).
TensorRef make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                      std::initializer_list<std::int64_t> strides);

enum class Alignment : int { top_left, bottom_right };

const char* to_string(Alignment alignment);

// A window bound meaning "no limit on this side".
constexpr std::int64_t kUnbounded = -1;

// One mask type covers none / causal / sliding window / local attention, for both alignments.
// For query row i, the diagonal is d = i (top_left) or d = i + Mk - Mq (bottom_right); key j is
// visible iff d - window_left <= j <= d + window_right. Causal is window_right = 0.
struct Mask {
  std::int64_t window_left = kUnbounded;
  std::int64_t window_right = kUnbounded;
  Alignment alignment = Alignment::top_left;

  static Mask none() { return {}; }
  static Mask causal(Alignment a = Alignment::top_left) { return {kUnbounded, 0, a}; }
  static Mask window(std::int64_t left, std::int64_t right, Alignment a = Alignment::top_left) {
    return {left, right, a};
  }
  bool is_none() const { return window_left == kUnbounded && window_right == kUnbounded; }
};

// Dropout with probability p in [0, 1). The keep decision for element (b, h, i, j) is a pure
// function of (seed, offset, b, h, i, j): see dropout.hpp for the exact Philox4x32-10 mapping.
struct Dropout {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;  // must be < 2^32: it is one word of the Philox counter
};

// A 1-D view of int32 values: element i is data[i * stride] (stride in elements, >= 0). Absent
// when data is null and size is 0.
struct IndexRef {
  const std::int32_t* data = nullptr;
  std::int64_t size = 0;
  std::int64_t stride = 1;

  bool defined() const { return data != nullptr || size != 0; }
};

// A contiguous view of `size` values.
inline IndexRef make_index(const std::int32_t* data, std::int64_t size) { return {data, size, 1}; }

// A 2-D view of int32 values, [rows, cols]: element (r, c) is data[r * row_stride + c] (the last
// dimension contiguous). Absent when data is null and both sizes are 0.
struct IndexTable {
  const std::int32_t* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  std::int64_t row_stride = 0;

  bool defined() const { return data != nullptr || rows != 0 || cols != 0; }
};

// Variable-length batches over packed tensors (batch dimension 1), enabled when any of the three
// views is given; then both seqstarts are required. num_seqs = seqstart_q.size - 1 (0 is an empty
// batch). Sequence b owns query rows [seqstart_q[b], seqstart_q[b+1]) and key rows starting at
// seqstart_k[b]: seqused_k[b] of them when seqused_k is given, else seqstart_k[b+1] - seqstart_k[b].
// Packed rows outside every sequence (before seqstart[0], from seqstart[num_seqs] on, and keys past
// seqused_k) see nothing and are seen by nothing: out 0, LSE -inf and zero gradients there.
// The arrays live where the tensors live (host memory for the CPU, device memory for CUDA, which
// reads them contiguous: stride 1). Bias, if any, is indexed [b, h, i, j] with i and j local to
// the sequence, so its shape is broadcastable to [num_seqs, Hq, max_seqlen_q, max_seqlen_k].
//
// max_seqlen_q and max_seqlen_k bound the sequences' query rows and used keys (kUnknownLength: not
// given). Without both, the values are read on the host and checked in full, which on the CUDA
// backend copies them from the device and waits for the stream. With both, the CUDA backend reads
// no value on the host (nothing synchronises): the kernels clamp each value into the packed
// tensors and each length to its bound, so malformed arrays never make them read or write out of
// bounds, but the results of such a call are unspecified. The CPU backend always checks the
// values, the bounds included.
constexpr std::int64_t kUnknownLength = -1;

struct Varlen {
  IndexRef seqstart_q;  // [num_seqs + 1]
  IndexRef seqstart_k;  // [num_seqs + 1]
  IndexRef seqused_k;   // optional, [num_seqs]
  std::int64_t max_seqlen_q = kUnknownLength;
  std::int64_t max_seqlen_k = kUnknownLength;

  bool enabled() const { return seqstart_q.defined() || seqstart_k.defined() || seqused_k.defined(); }
  std::int64_t num_seqs() const { return seqstart_q.size - 1; }
  bool bounded() const { return max_seqlen_q != kUnknownLength && max_seqlen_k != kUnknownLength; }
};

}  // namespace memattn
