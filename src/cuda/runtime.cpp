// CUDA runtime queries for validation: where pointers live, device count, small copies.
// A machine without a GPU (or driver) answers "host" for every pointer.
#include <cuda_runtime_api.h>

#include <cstring>

#include "core/memory.hpp"
#include "cuda/backend.hpp"

namespace memattn {
namespace detail {

PointerInfo locate(const void* ptr) {
  if (ptr == nullptr || cuda::device_count() == 0) return {Location::host, -1};
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    return {Location::host, -1};
  }
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
    return {Location::device, attr.device};
  return {Location::host, -1};
}

Status copy_to_host(void* dst, const void* src, std::size_t bytes, Location from, void* stream) {
  if (from == Location::host) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  // Not cudaMemcpy: the legacy default stream does not wait for a non-blocking stream's work.
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  if (err != cudaSuccess)
    return {StatusCode::device_error, std::string("copy to host: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

int current_cuda_device() {
  int device = -1;
  if (cuda::device_count() == 0 || cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

std::string describe(const PointerInfo& info) {
  if (info.location == Location::host) return "host memory";
  return "memory of CUDA device " + std::to_string(info.device);
}

}  // namespace detail

namespace cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

}  // namespace cuda
}  // namespace memattn
