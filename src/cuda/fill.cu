// Writes one value into every element of a strided device view: the outputs no kernel reaches
// (an empty problem's zero gradients, out 0 and LSE -inf of packed rows outside every sequence).
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
};

template <class T>
__global__ void fill_kernel(T* data, View view, T value) {
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < view.numel; e += step) {
    std::int64_t rem = e, offset = 0;
    for (int d = view.rank - 1; d >= 0; --d) {
      offset += (rem % view.sizes[d]) * view.strides[d];
      rem /= view.sizes[d];
    }
    data[offset] = value;
  }
}

template <class T>
cudaError_t launch(const TensorRef& t, const View& view, T value, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU; each thread strides over the rest (no grid-size limit to hit).
  constexpr std::int64_t kMaxBlocks = 4096;
  const unsigned blocks = unsigned(std::min<std::int64_t>((view.numel + kThreads - 1) / kThreads, kMaxBlocks));
  fill_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(t.data), view, value);
  return cudaGetLastError();
}

}  // namespace

Status fill(const TensorRef& t, double value, void* stream) {
  View view{t.rank, {}, {}, 1};
  for (int d = 0; d < t.rank; ++d) {
    view.sizes[d] = t.sizes[d];
    view.strides[d] = t.strides[d];
    view.numel *= t.sizes[d];
  }
  if (view.numel == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (t.dtype) {
    case DType::f32: err = launch(t, view, float(value), s); break;
    case DType::f16: err = launch(t, view, __double2half(value), s); break;
    case DType::bf16: err = launch(t, view, __double2bfloat16(value), s); break;
    default: return {StatusCode::internal_error, std::string("fill: dtype ") + to_string(t.dtype) + " on the GPU"};
  }
  if (err != cudaSuccess) return {StatusCode::device_error, std::string("fill kernel: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace memattn::cuda
