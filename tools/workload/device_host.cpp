// Builds without CUDA have no device mirror.
#include "workload/device.hpp"

namespace memattn::tools {

Status Workload::Device::create(std::unique_ptr<Device>*) {
  return {StatusCode::unsupported, "this build has no CUDA backend, so there is no device memory"};
}
Status Workload::Device::time_call(const std::function<Status()>&, double*) {
  return {StatusCode::unsupported, "no CUDA"};
}
Status Workload::Device::time_graph(const std::function<Status(void*)>&, int, std::vector<double>*) {
  return {StatusCode::unsupported, "no CUDA"};
}
double Workload::Device::memory_in_use() { return 0; }
Status Workload::Device::check_free(std::size_t) { return {StatusCode::unsupported, "no CUDA"}; }
Workload::Device::~Device() = default;
Status Workload::Device::allocate(int, std::size_t) { return {StatusCode::unsupported, "no CUDA"}; }
Status Workload::Device::allocate_workspace(std::size_t) { return {StatusCode::unsupported, "no CUDA"}; }
Status Workload::Device::upload(int, const void*, std::size_t) { return {StatusCode::unsupported, "no CUDA"}; }
Status Workload::Device::download(int, void*, std::size_t) const { return {StatusCode::unsupported, "no CUDA"}; }
Status Workload::Device::set_varlen(const std::vector<std::int32_t>&, const std::vector<std::int32_t>&,
                                    const std::vector<std::int32_t>&) {
  return {StatusCode::unsupported, "no CUDA"};
}
Status Workload::Device::set_cache(const std::vector<std::int32_t>&, const std::vector<std::int32_t>&) {
  return {StatusCode::unsupported, "no CUDA"};
}

}  // namespace memattn::tools
