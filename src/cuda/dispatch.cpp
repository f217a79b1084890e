// CUDA dispatch: chooses a kernel-table row for a problem and launches it.
#include "cuda/backend.hpp"

namespace memattn::cuda {
namespace {
Status no_kernels() {
  return {StatusCode::unsupported, "backend cuda: this build has no CUDA attention kernels yet"};
}
}  // namespace

Status workspace_size(const ForwardArgs&, const detail::Problem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}
Status workspace_size(const BackwardArgs&, const detail::Problem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}
Status forward(const ForwardArgs&, const detail::Problem&) { return no_kernels(); }
Status backward(const BackwardArgs&, const detail::Problem&) { return no_kernels(); }
Status describe_forward(const ForwardArgs&, const detail::Problem&, std::string*) { return no_kernels(); }
Status describe_backward(const BackwardArgs&, const detail::Problem&, std::string*) { return no_kernels(); }

}  // namespace memattn::cuda
