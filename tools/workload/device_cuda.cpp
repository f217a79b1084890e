// Device mirror through the CUDA runtime.
#include <cuda_runtime_api.h>

#include <string>

#include "workload/device.hpp"

namespace memattn::tools {
namespace {

Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::device_error, std::string(what) + ": " + cudaGetErrorString(err)};
}

// A device copy of an int32 array into *out; an empty array leaves *out null.
Status upload_indices(const std::vector<std::int32_t>& values, std::int32_t** out) {
  if (values.empty()) return Status::Ok();
  const std::size_t bytes = values.size() * sizeof(std::int32_t);
  if (Status s = check(cudaMalloc(reinterpret_cast<void**>(out), bytes), "cudaMalloc"); !s.ok()) return s;
  return check(cudaMemcpy(*out, values.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace

Status Workload::Device::create(std::unique_ptr<Device>* out) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return {StatusCode::unsupported, "no CUDA device is visible"};
  }
  out->reset(new Device());
  return Status::Ok();
}

Status Workload::Device::time_call(const std::function<Status()>& fn, double* ms) {
  cudaEvent_t start, stop;
  if (Status s = check(cudaEventCreate(&start), "cudaEventCreate"); !s.ok()) return s;
  if (Status s = check(cudaEventCreate(&stop), "cudaEventCreate"); !s.ok()) return s;
  cudaEventRecord(start);
  Status result = fn();
  cudaEventRecord(stop);
  Status sync = check(cudaEventSynchronize(stop), "kernel execution");
  float elapsed = 0;
  cudaEventElapsedTime(&elapsed, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  *ms = elapsed;
  if (!result.ok()) return result;
  return sync;
}

namespace {

// What time_graph creates, released whichever way it returns.
struct GraphRun {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* flush = nullptr;
  ~GraphRun() {
    if (flush) cudaFree(flush);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace

Status Workload::Device::time_graph(const std::function<Status(void* stream)>& call, int iters, std::vector<double>* ms) {
  GraphRun g;
  int device = 0, l2_bytes = 0;
  if (Status s = check(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) return s;
  if (Status s = check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "L2 size"); !s.ok()) return s;
  // Writing twice the L2's size leaves none of the call's inputs in it.
  const std::size_t flush_bytes = 2 * std::size_t(l2_bytes > 0 ? l2_bytes : 1);
  if (Status s = check(cudaMalloc(&g.flush, flush_bytes), "cudaMalloc (L2 flush)"); !s.ok()) return s;
  if (Status s = check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreate"); !s.ok()) return s;
  if (Status s = check(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal), "graph capture"); !s.ok())
    return s;
  const Status called = call(g.stream);
  const cudaError_t ended = cudaStreamEndCapture(g.stream, &g.graph);
  if (!called.ok()) return called;
  if (Status s = check(ended, "graph capture"); !s.ok()) return s;
  if (Status s = check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate"); !s.ok()) return s;
  if (Status s = check(cudaEventCreate(&g.start), "cudaEventCreate"); !s.ok()) return s;
  if (Status s = check(cudaEventCreate(&g.stop), "cudaEventCreate"); !s.ok()) return s;
  for (int it = 0; it < iters; ++it) {
    cudaMemsetAsync(g.flush, it & 0xff, flush_bytes, g.stream);
    cudaEventRecord(g.start, g.stream);
    cudaGraphLaunch(g.exec, g.stream);
    cudaEventRecord(g.stop, g.stream);
    if (Status s = check(cudaEventSynchronize(g.stop), "graph replay"); !s.ok()) return s;
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, g.start, g.stop);
    ms->push_back(elapsed);
  }
  return Status::Ok();
}

double Workload::Device::memory_in_use() {
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return double(total - free_bytes);
}

Workload::Device::~Device() {
  for (void* p : ptrs)
    if (p) cudaFree(p);
  for (std::int32_t* p : varlen)
    if (p) cudaFree(p);
  for (std::int32_t* p : cache)
    if (p) cudaFree(p);
  if (workspace) cudaFree(workspace);
}

Status Workload::Device::check_free(std::size_t bytes) {
  std::size_t free_bytes = 0, total = 0;
  if (Status s = check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo"); !s.ok()) return s;
  if (bytes <= free_bytes) return Status::Ok();
  return {StatusCode::out_of_memory, "device memory: the problem's tensors need " + std::to_string(bytes) +
                                         " bytes, and " + std::to_string(free_bytes) + " of " +
                                         std::to_string(total) + " bytes are free on the device"};
}

Status Workload::Device::allocate(int tensor, std::size_t bytes) {
  return check(cudaMalloc(&ptrs[tensor], bytes ? bytes : 1), "cudaMalloc");
}

Status Workload::Device::allocate_workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes) return Status::Ok();
  if (workspace) cudaFree(workspace);
  workspace = nullptr, workspace_bytes = 0;
  if (Status s = check(cudaMalloc(&workspace, bytes), "cudaMalloc (workspace)"); !s.ok()) return s;
  workspace_bytes = bytes;
  return Status::Ok();
}

Status Workload::Device::upload(int tensor, const void* src, std::size_t bytes) {
  return check(cudaMemcpy(ptrs[tensor], src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

Status Workload::Device::download(int tensor, void* dst, std::size_t bytes) const {
  return check(cudaMemcpy(dst, ptrs[tensor], bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

Status Workload::Device::set_varlen(const std::vector<std::int32_t>& sq, const std::vector<std::int32_t>& sk,
                                    const std::vector<std::int32_t>& used) {
  const std::vector<std::int32_t>* arrays[3] = {&sq, &sk, &used};
  for (int a = 0; a < 3; ++a)
    if (Status s = upload_indices(*arrays[a], &varlen[a]); !s.ok()) return s;
  return Status::Ok();
}

Status Workload::Device::set_cache(const std::vector<std::int32_t>& seqlens, const std::vector<std::int32_t>& block_table) {
  if (Status s = upload_indices(seqlens, &cache[0]); !s.ok()) return s;
  return upload_indices(block_table, &cache[1]);
}

}  // namespace memattn::tools
