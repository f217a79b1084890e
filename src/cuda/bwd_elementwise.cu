// The backward's elementwise kernels and their launches (bwd_launch.hpp declares them): delta with
// the dQ workspace cleared, the gradients' conversion from fp32 workspaces, dbias zeroed and summed
// over its broadcast dimensions, zero gradients for keys past seqused_k. Compiled once, for the
// sm80 family's targets (they run on every GPU), where every unit of backward rows had compiled
// its own copies of them for each dtype it held (16 s of nvcc for the three dtypes here).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_launch.hpp"

namespace memattn::cuda {
namespace {

// The elementwise kernels below (delta, the gradients' conversion from fp32 workspaces) stream
// the rows of a [batch][heads][rows] index space: blockIdx.y picks (b, h), grid-strided, and
// blockIdx.x a run of kRowPasses x kElementwiseThreads / kGroup of its rows, whose pointers follow
// from one row stride (the index taken apart once per CTA). A row is read by kGroup lanes, and
// every pass's loads are issued before any is used. Each (b, h)'s rows are contiguous in delta and
// in the workspaces, so a CTA's stores there are one contiguous run.
// Lanes per row: the fewest of 8, 16, 32 whose chunks cover the row, so that short rows leave no
// lane idle (a warp per D = 64 row of dQ's conversion left half its lanes idle: 88 us against
// D = 128's 61 us for the same bytes, H200).
constexpr int kElementwiseThreads = 256;
constexpr int kRowPasses = 4;
// CTAs per SM the registers must allow (64 a thread): left alone nvcc took 126 for delta and 96
// for the conversion (two CTAs per SM).
constexpr int kElementwiseCtasPerSm = 4;
template <int kGroup>
constexpr int kRowsPerCta = kRowPasses * kElementwiseThreads / kGroup;

template <int kChunkElems>
constexpr int lanes_per_row(std::int64_t cols) {
  return cols <= 8 * kChunkElems ? 8 : cols <= 16 * kChunkElems ? 16 : 32;
}

// f(b, h, bh) for each (b, h) of this CTA's column of the grid (bh = b * heads + h).
template <class F>
__device__ __forceinline__ void for_each_head(std::int64_t batch, int heads, F&& f) {
  for (std::int64_t bh = blockIdx.y; bh < batch * heads; bh += gridDim.y) f(bh / heads, int(bh % heads), bh);
}

// This thread's rows in this CTA's run: row(i) in pass i, which exists where live(i).
template <int kGroup>
struct RunRows {
  static constexpr int kPerPass = kElementwiseThreads / kGroup;
  static_assert(kPerPass % 8 == 0, "a row's workspace swizzle (accum_swizzle) is the same in every pass");
  std::int64_t first, rows;  // the run's first row; the rows of a (b, h)
  std::int64_t row0;         // this thread's in the first pass
  __device__ __forceinline__ explicit RunRows(std::int64_t rows_) : rows(rows_) {
    first = std::int64_t(blockIdx.x) * kRowsPerCta<kGroup>;
    row0 = first + int(threadIdx.x) / kGroup;
  }
  __device__ __forceinline__ std::int64_t row(int i) const { return row0 + i * kPerPass; }
  __device__ __forceinline__ bool live(int i) const { return row(i) < rows; }
  // The run's rows that exist, times `width`.
  __device__ __forceinline__ std::int64_t extent(std::int64_t width) const {
    return (min(rows, first + kRowsPerCta<kGroup>) - first) * width;
  }
};

// kN neighbouring elements as one load (16 or 8 bytes, or a single element), held packed until
// used.
template <class Element, int kN>
using Chunk = std::conditional_t<kN * sizeof(Element) == 16, uint4,
                                 std::conditional_t<kN * sizeof(Element) == 8, uint2, Element>>;

template <class Element, int kN>
__device__ __forceinline__ float dot_chunks(const Chunk<Element, kN>& a, const Chunk<Element, kN>& b) {
  if constexpr (kN == 1) {
    return float(a) * float(b);
  } else {
    constexpr int kWords = sizeof(Chunk<Element, kN>) / 4;
    const auto* wa = reinterpret_cast<const std::uint32_t*>(&a);
    const auto* wb = reinterpret_cast<const std::uint32_t*>(&b);
    float sum = 0.0f;
    CUTE_UNROLL
    for (int k = 0; k < kWords; ++k) {
      if constexpr (sizeof(Element) == 2) {
        const float2 x = unpack_pair<Element>(wa[k]), y = unpack_pair<Element>(wb[k]);
        sum += x.x * y.x + x.y * y.y;
      } else {
        sum += __uint_as_float(wa[k]) * __uint_as_float(wb[k]);
      }
    }
    return sum;
  }
}

// delta[b][h][row] = sum over the value dim of dO * O, and `zero` (the dQ workspace of the rows
// that add into one, whose rows are delta's: no memset pass of its own) cleared beside it. Loads
// of kN elements: 16 bytes where the tensors allow (8 bytes had run at 2.3-2.8 TB/s of the H200's
// 4.8), else 4 elements, else one (backward_prologue, bwd_launch.hpp).
template <class Element, int kGroup, int kN>
__global__ void __launch_bounds__(kElementwiseThreads, kElementwiseCtasPerSm)
    delta_kernel(const __grid_constant__ BwdParams p, GradAccum zero) {
  using Loaded = Chunk<Element, kN>;
  const int gl = int(threadIdx.x) % kGroup;
  const RunRows<kGroup> run(p.delta_rows);
  for_each_head(p.seqstart_q ? 1 : p.batch, p.heads_q, [&](std::int64_t b, int h, std::int64_t bh) {
    const Element* o = o_at<const Element>(p, b, run.row0, h);
    const Element* d = do_at<Element>(p, b, run.row0, h);
    const std::int64_t o_pass = run.kPerPass * p.o_row_stride, d_pass = run.kPerPass * p.do_row_stride;
    float sum[kRowPasses] = {};
#pragma unroll 1
    for (int e = kN * gl; e < p.head_dim_v; e += kN * kGroup) {
      Loaded x[kRowPasses], y[kRowPasses];
      CUTE_UNROLL
      for (int i = 0; i < kRowPasses; ++i)
        if (run.live(i))
          x[i] = *reinterpret_cast<const Loaded*>(o + i * o_pass + e),
          y[i] = *reinterpret_cast<const Loaded*>(d + i * d_pass + e);
      CUTE_UNROLL
      for (int i = 0; i < kRowPasses; ++i)
        if (run.live(i)) sum[i] += dot_chunks<Element, kN>(x[i], y[i]);
    }
    CUTE_UNROLL
    for (int i = 0; i < kRowPasses; ++i) {
      CUTE_UNROLL
      for (int offset = 1; offset < kGroup; offset *= 2) sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], offset);
      if (run.live(i) && gl == 0) p.delta[bh * run.rows + run.row(i)] = sum[i];
    }
    if (zero.data != nullptr) {  // its rows are whole 16-byte chunks
      float4* cleared = reinterpret_cast<float4*>(zero.data + (bh * run.rows + run.first) * zero.ld);
      const std::int64_t chunks = run.extent(zero.ld / 4);
      for (std::int64_t e = threadIdx.x; e < chunks; e += kElementwiseThreads)
        cleared[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  });
}

// Keys of a sequence past seqused_k get zero gradients (one CTA per sequence).
template <class Element>
__global__ void __launch_bounds__(256) zero_unused_keys_kernel(const __grid_constant__ BwdParams p) {
  const SequenceInfo seq = sequence_info(p, blockIdx.x);
  const std::int64_t begin = seq.k_begin + seq.k_len, end = seq.k_end;
  const std::int64_t width = std::int64_t(p.head_dim) + p.head_dim_v;
  const std::int64_t n = (end - begin) * p.heads_k * width;
  for (std::int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const std::int64_t c = e % width, rest = e / width;
    const std::int64_t h = rest % p.heads_k, row = begin + rest / p.heads_k;
    if (c < p.head_dim)
      static_cast<Element*>(p.dk)[row * p.dk_row_stride + h * p.dk_head_stride + c] = Element(0.0f);
    else
      static_cast<Element*>(p.dv)[row * p.dv_row_stride + h * p.dv_head_stride + c - p.head_dim] = Element(0.0f);
  }
}

// out[b][row][h][c] = scale * accum (in out's dtype and strides), for every element of a gradient:
// kGroup lanes per row; with kVec (out's rows allow four elements a store), eight columns a lane
// at a time (one 32-byte granule of a swizzled workspace, read as two float4s), else one.
// (Element by element, with the indices taken apart per element, dQ's conversion took 277 us at
// the suite's 16384 tokens x 2048, ncu on the H100: a tenth of a backward at S = 2048.)
template <class Element, int kGroup, bool kVec>
__global__ void __launch_bounds__(kElementwiseThreads, kElementwiseCtasPerSm)
    finish_gradient_kernel(GradAccum g, Element* out, std::int64_t batch_stride, std::int64_t row_stride,
                           std::int64_t head_stride, int cols, float scale) {
  const int gl = int(threadIdx.x) % kGroup;
  const RunRows<kGroup> run(g.rows);
  for_each_head(g.batch, int(g.heads), [&](std::int64_t b, int h, std::int64_t bh) {
    // The workspace's rows are whole 16-byte chunks; column c of a row is at c ^ its swizzle.
    const float* src = g.data + (bh * g.rows + run.row0) * g.ld;
    Element* dst = out + b * batch_stride + run.row0 * row_stride + std::int64_t(h) * head_stride;
    const std::int64_t src_pass = run.kPerPass * g.ld, dst_pass = run.kPerPass * row_stride;
    // Passes are kPerPass rows apart, a multiple of the swizzle's period of 8 rows.
    const int swizzle = g.swizzled ? accum_swizzle(run.row0) : 0;
    if constexpr (kVec) {
#pragma unroll 1
      for (int c = 8 * gl; c < cols; c += 8 * kGroup) {
        const bool second = c + 4 < cols;
        float4 v[kRowPasses][2];
        CUTE_UNROLL
        for (int i = 0; i < kRowPasses; ++i) {
          if (!run.live(i)) continue;
          const float* at = src + i * src_pass + (c ^ swizzle);
          v[i][0] = *reinterpret_cast<const float4*>(at);
          if (second) v[i][1] = *reinterpret_cast<const float4*>(at + 4);
        }
        CUTE_UNROLL
        for (int i = 0; i < kRowPasses; ++i) {
          if (!run.live(i)) continue;
          Element* to = dst + i * dst_pass + c;
          store4(to, make_float4(scale * v[i][0].x, scale * v[i][0].y, scale * v[i][0].z, scale * v[i][0].w));
          if (second)
            store4(to + 4, make_float4(scale * v[i][1].x, scale * v[i][1].y, scale * v[i][1].z, scale * v[i][1].w));
        }
      }
    } else {
      CUTE_UNROLL
      for (int i = 0; i < kRowPasses; ++i)
        if (run.live(i))
          for (int c = gl; c < cols; c += kGroup)
            dst[i * dst_pass + c] = Element(scale * src[i * src_pass + (c ^ swizzle)]);
    }
  });
}

// dbias = 0 over its sizes (BwdParams::dbias_zero, when its memory has gaps): a CTA per row, the
// row's (b, h, i) worked out once.
template <class Element>
__global__ void __launch_bounds__(256) zero_dbias_kernel(const __grid_constant__ BwdParams p) {
  const std::int64_t* n = p.dbias_sizes;
  for (std::int64_t row = blockIdx.x; row < n[0] * n[1] * n[2]; row += gridDim.x) {
    const std::int64_t i = row % n[2], h = (row / n[2]) % n[1], b = row / (n[2] * n[1]);
    const std::int64_t off = b * p.dbias_batch_stride + h * p.dbias_head_stride + i * p.dbias_row_stride;
    for (std::int64_t j = threadIdx.x; j < n[3]; j += blockDim.x) {
      if (p.bias_is_f32) static_cast<float*>(p.dbias)[off + j * p.dbias_col_stride] = 0.0f;
      else static_cast<Element*>(p.dbias)[off + j * p.dbias_col_stride] = Element(0.0f);
    }
  }
}

// dbias from its fp32 workspace: each dbias element is the sum of the workspace elements that
// map to it (one with atomics, where the workspace has dbias's reduced shape; the broadcast
// copies in a fixed order otherwise).
template <class Element>
__global__ void __launch_bounds__(256) reduce_dbias_kernel(const __grid_constant__ BwdParams p) {
  const std::int64_t* reduced = p.dbias_reduced_sizes;
  const std::int64_t* w = p.dbias_accum_sizes;
  std::int64_t copies[4], stride[4];
  for (int d = 0; d < 4; ++d) copies[d] = w[d] / reduced[d];
  stride[3] = 1;
  for (int d = 2; d >= 0; --d) stride[d] = stride[d + 1] * w[d + 1];
  const std::int64_t total = reduced[0] * reduced[1] * reduced[2] * reduced[3];
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = e % reduced[3], i = (e / reduced[3]) % reduced[2];
    const std::int64_t h = (e / (reduced[3] * reduced[2])) % reduced[1], b = e / (reduced[3] * reduced[2] * reduced[1]);
    float sum = 0.0f;
    for (std::int64_t cb = 0; cb < copies[0]; ++cb)
      for (std::int64_t ch = 0; ch < copies[1]; ++ch)
        for (std::int64_t ci = 0; ci < copies[2]; ++ci) {
          const float* row = p.dbias_accum + (b + cb) * stride[0] + (h + ch) * stride[1] + (i + ci) * stride[2] + j;
          for (std::int64_t cj = 0; cj < copies[3]; ++cj) sum += row[cj];
        }
    const std::int64_t off = b * p.dbias_batch_stride + h * p.dbias_head_stride + i * p.dbias_row_stride + j * p.dbias_col_stride;
    if (p.bias_is_f32) static_cast<float*>(p.dbias)[off] = sum;
    else static_cast<Element*>(p.dbias)[off] = Element(sum);
  }
}

inline unsigned elementwise_grid(std::int64_t items, int per_block) {
  return unsigned(std::min<std::int64_t>((items + per_block - 1) / per_block, 65536));
}

// The grid of the row-streaming kernels (bwd_common.hpp): runs of `rows_per_cta` rows along x, the
// (b, h) pairs along y (the kernels stride over those past 65535).
inline dim3 head_rows_grid(std::int64_t batch_heads, std::int64_t rows, int rows_per_cta) {
  return dim3(unsigned((rows + rows_per_cta - 1) / rows_per_cta), unsigned(std::min<std::int64_t>(batch_heads, 65535)));
}

// pick(std::integral_constant<int, kGroup>) for the lanes per row that lanes_per_row chose: the
// elementwise kernel instantiated for them.
template <class Pick>
auto kernel_for_lanes(int lanes, const Pick& pick) {
  return lanes == 8    ? pick(std::integral_constant<int, 8>{})
         : lanes == 16 ? pick(std::integral_constant<int, 16>{})
                       : pick(std::integral_constant<int, 32>{});
}

// Whether every row of a tensor (its base and strides) starts on a multiple of `bytes`.
inline bool rows_aligned(const void* base, std::int64_t element_bytes, std::initializer_list<std::int64_t> strides,
                         std::int64_t bytes) {
  bool aligned = reinterpret_cast<std::uintptr_t>(base) % std::uintptr_t(bytes) == 0;
  for (std::int64_t stride : strides) aligned = aligned && stride * element_bytes % bytes == 0;
  return aligned;
}

}  // namespace

template <class Element>
void finish_gradient(const GradAccum& g, void* out, std::int64_t batch_stride, std::int64_t row_stride,
                     std::int64_t head_stride, int cols, float scale, cudaStream_t stream) {
  if (g.batch * g.rows * g.heads * cols == 0) return;
  const int lanes = lanes_per_row<8>(cols);
  const bool vec = cols % 4 == 0 && rows_aligned(out, sizeof(Element), {batch_stride, row_stride, head_stride},
                                                 4 * sizeof(Element));
  const auto kernel = kernel_for_lanes(lanes, [&](auto group) {
    constexpr int kGroup = decltype(group)::value;
    return vec ? finish_gradient_kernel<Element, kGroup, true> : finish_gradient_kernel<Element, kGroup, false>;
  });
  kernel<<<head_rows_grid(g.batch * g.heads, g.rows, kRowPasses * kElementwiseThreads / lanes), kElementwiseThreads, 0,
           stream>>>(g, static_cast<Element*>(out), batch_stride, row_stride, head_stride, cols, scale);
}

template <class Element>
Status backward_prologue(const BwdParams& p, UnusedKeys unused_keys, cudaStream_t stream,
                         const GradAccum* zero) {
  const std::int64_t batch_heads = (p.seqstart_q ? 1 : p.batch) * p.heads_q;
  const std::int64_t delta_rows = batch_heads * p.delta_rows;
  GradAccum cleared{};
  if (zero != nullptr) {
    if (zero->rows == p.delta_rows && zero->heads == p.heads_q && zero->batch * zero->rows * zero->heads == delta_rows)
      cleared = *zero;
    else if (Status s = clear_accum(*zero, "gradient workspace", stream); !s.ok()) return s;
  }
  if (delta_rows > 0) {
    // Elements a load: 16 bytes, 4, or 1, as O's and dO's rows allow.
    const auto rows_allow = [&](int n) {
      const std::int64_t bytes = n * sizeof(Element);
      return p.head_dim_v % n == 0 &&
             rows_aligned(p.out, sizeof(Element), {p.o_batch_stride, p.o_row_stride, p.o_head_stride}, bytes) &&
             rows_aligned(p.dout, sizeof(Element), {p.do_batch_stride, p.do_row_stride, p.do_head_stride}, bytes);
    };
    constexpr int kWide = 16 / sizeof(Element);
    const int chunk = rows_allow(kWide) ? kWide : rows_allow(4) ? 4 : 1;
    const int lanes = lanes_per_row<kWide>(p.head_dim_v);
    const auto kernel = kernel_for_lanes(lanes, [&](auto group) {
      constexpr int kGroup = decltype(group)::value;
      return chunk == kWide ? delta_kernel<Element, kGroup, kWide>
             : chunk == 4   ? delta_kernel<Element, kGroup, 4>
                            : delta_kernel<Element, kGroup, 1>;
    });
    kernel<<<head_rows_grid(batch_heads, p.delta_rows, kRowPasses * kElementwiseThreads / lanes), kElementwiseThreads, 0,
             stream>>>(p, cleared);
  }
  if (p.dbias_accum) {
    const std::int64_t* w = p.dbias_accum_sizes;
    if (Status s = cuda_status(cudaMemsetAsync(p.dbias_accum, 0, std::size_t(w[0] * w[1] * w[2] * w[3]) * sizeof(float), stream),
                               "dbias workspace");
        !s.ok())
      return s;
  } else if (p.dbias_zero && p.dbias_dense_bytes > 0) {
    if (Status s = cuda_status(cudaMemsetAsync(p.dbias, 0, std::size_t(p.dbias_dense_bytes), stream), "dbias zeroing");
        !s.ok())
      return s;
  } else if (p.dbias_zero) {
    const std::int64_t rows = p.dbias_sizes[0] * p.dbias_sizes[1] * p.dbias_sizes[2];
    if (rows > 0 && p.dbias_sizes[3] > 0) zero_dbias_kernel<Element><<<elementwise_grid(rows, 1), 256, 0, stream>>>(p);
  }
  if (unused_keys == UnusedKeys::zeroed_by_prologue && p.seqused_k)
    zero_unused_keys_kernel<Element><<<unsigned(p.batch), 256, 0, stream>>>(p);
  return cuda_status(cudaGetLastError(), "backward preprocessing");
}

template <class Element>
Status backward_epilogue(const BwdParams& p, cudaStream_t stream) {
  if (!p.dbias_accum) return Status::Ok();
  const std::int64_t* r = p.dbias_reduced_sizes;
  const std::int64_t n = r[0] * r[1] * r[2] * r[3];
  if (n > 0) reduce_dbias_kernel<Element><<<elementwise_grid(n, 256), 256, 0, stream>>>(p);
  return cuda_status(cudaGetLastError(), "dbias reduction");
}

// The instantiations the backward rows link against: bf16, fp16, fp32.
template void finish_gradient<cute::bfloat16_t>(const GradAccum&, void*, std::int64_t, std::int64_t, std::int64_t, int,
                                                float, cudaStream_t);
template void finish_gradient<cute::half_t>(const GradAccum&, void*, std::int64_t, std::int64_t, std::int64_t, int, float,
                                            cudaStream_t);
template void finish_gradient<float>(const GradAccum&, void*, std::int64_t, std::int64_t, std::int64_t, int, float,
                                     cudaStream_t);
template Status backward_prologue<cute::bfloat16_t>(const BwdParams&, UnusedKeys, cudaStream_t, const GradAccum*);
template Status backward_prologue<cute::half_t>(const BwdParams&, UnusedKeys, cudaStream_t, const GradAccum*);
template Status backward_prologue<float>(const BwdParams&, UnusedKeys, cudaStream_t, const GradAccum*);
template Status backward_epilogue<cute::bfloat16_t>(const BwdParams&, cudaStream_t);
template Status backward_epilogue<cute::half_t>(const BwdParams&, cudaStream_t);
template Status backward_epilogue<float>(const BwdParams&, cudaStream_t);

}  // namespace memattn::cuda
