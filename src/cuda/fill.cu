// Writes one value into every element of a strided device view, or into the rows of one dimension
// outside a range read on the device: the outputs no kernel reaches (an empty problem's zero
// gradients, out 0 and LSE -inf of packed rows outside every sequence).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "cuda/backend.hpp"

namespace memattn::cuda {
namespace {

struct View {
  int rank;
  std::int64_t sizes[4];
  std::int64_t strides[4];
  std::int64_t numel;
  // Set for fill_outside: the rows [starts[0], starts[last]) of dimension `dim` are left alone.
  const std::int32_t* starts;
  std::int64_t last;
  int dim;
};

__device__ std::int64_t clamp_row(std::int32_t x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : std::int64_t(x));
}

template <class T>
__global__ void fill_kernel(T* data, View view, T value) {
  // The kept rows are read here, not on the host (which would wait for the stream), and clamped
  // so that malformed values only change which rows get the value.
  std::int64_t kept_begin = 0, kept = 0;
  if (view.starts != nullptr) {
    const std::int64_t rows = view.sizes[view.dim];
    kept_begin = clamp_row(view.starts[0], 0, rows);
    kept = clamp_row(view.starts[view.last], kept_begin, rows) - kept_begin;
    view.numel = view.numel / rows * (rows - kept);
    view.sizes[view.dim] = rows - kept;
  }
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < view.numel; e += step) {
    std::int64_t rem = e, offset = 0;
    for (int d = view.rank - 1; d >= 0; --d) {
      std::int64_t i = rem % view.sizes[d];
      if (view.starts != nullptr && d == view.dim && i >= kept_begin) i += kept;
      offset += i * view.strides[d];
      rem /= view.sizes[d];
    }
    data[offset] = value;
  }
}

template <class T>
cudaError_t launch(const TensorRef& t, const View& view, T value, std::int64_t max_blocks, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Each thread strides over the rest (no grid-size limit to hit).
  const unsigned blocks = unsigned(std::min<std::int64_t>((view.numel + kThreads - 1) / kThreads, max_blocks));
  fill_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(t.data), view, value);
  return cudaGetLastError();
}

Status fill_view(const TensorRef& t, View view, double value, std::int64_t max_blocks, void* stream) {
  view.rank = t.rank;
  view.numel = 1;
  for (int d = 0; d < t.rank; ++d) {
    view.sizes[d] = t.sizes[d];
    view.strides[d] = t.strides[d];
    view.numel *= t.sizes[d];
  }
  if (view.numel == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (t.dtype) {
    case DType::f32: err = launch(t, view, float(value), max_blocks, s); break;
    case DType::f16: err = launch(t, view, __double2half(value), max_blocks, s); break;
    case DType::bf16: err = launch(t, view, __double2bfloat16(value), max_blocks, s); break;
    default: return {StatusCode::internal_error, std::string("fill: dtype ") + to_string(t.dtype) + " on the GPU"};
  }
  if (err != cudaSuccess) return {StatusCode::device_error, std::string("fill kernel: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

// Enough blocks to fill the GPU.
constexpr std::int64_t kFillBlocks = 4096;
// Rows outside every sequence are few or none, and the grid is sized before the kernel knows how
// many: a small grid keeps the common case (none) at one short launch.
constexpr std::int64_t kOutsideBlocks = 256;

}  // namespace

Status fill(const TensorRef& t, double value, void* stream) {
  return fill_view(t, View{}, value, kFillBlocks, stream);
}

Status fill_outside(const TensorRef& t, int dim, const std::int32_t* starts, std::int64_t num_seqs, double value,
                    void* stream) {
  View view{};
  view.starts = starts;
  view.last = num_seqs;
  view.dim = dim;
  return fill_view(t, view, value, kOutsideBlocks, stream);
}

}  // namespace memattn::cuda
