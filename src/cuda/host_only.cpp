// Built when the library has no CUDA backend: every pointer is host memory and CUDA calls report
// that the backend is missing.
#include <cstring>

#include "core/memory.hpp"
#include "cuda/backend.hpp"
#include "memattn/kernels.hpp"

namespace memattn {
namespace detail {

PointerInfo locate(const void*) { return {Location::host, -1}; }

Status copy_to_host(void* dst, const void* src, std::size_t bytes, Location, void*) {
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

int current_cuda_device() { return -1; }

std::string describe(const PointerInfo&) { return "host memory"; }

}  // namespace detail

std::vector<KernelInfo> list_kernels(bool) { return {}; }

namespace cuda {
namespace {
Status missing() {
  return {StatusCode::unsupported, "backend: this build of memattn has no CUDA backend (configure with -DMEMATTN_ENABLE_CUDA=ON)"};
}
}  // namespace

int device_count() { return 0; }
std::optional<Pass> row_pass(const std::string&) { return std::nullopt; }  // no kernel table
Status workspace_size(const ForwardArgs&, const detail::Problem&, std::size_t*) { return missing(); }
Status workspace_size(const BackwardArgs&, const detail::Problem&, std::size_t*) { return missing(); }
Status forward(const ForwardArgs&, const detail::Problem&) { return missing(); }
Status append_kv_cache(const ForwardArgs&, const detail::Problem&) { return missing(); }
Status backward(const BackwardArgs&, const detail::Problem&) { return missing(); }
Status fill(const TensorRef&, double, void*) { return missing(); }
Status fill_outside(const TensorRef&, int, const std::int32_t*, std::int64_t, double, void*) { return missing(); }
Status describe_forward(const ForwardArgs&, const detail::Problem&, std::string*) { return missing(); }
Status describe_backward(const BackwardArgs&, const detail::Problem&, std::string*) { return missing(); }

}  // namespace cuda
}  // namespace memattn
