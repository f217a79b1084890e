// The device mirror of a Workload: one device allocation per tensor plus the varlen arrays and a
// KV cache's seqlens and block table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "workload/workload.hpp"

namespace memattn::tools {

struct Workload::Device {
  static Status create(std::unique_ptr<Device>* out);
  static Status time_call(const std::function<Status()>& fn, double* ms);
  // `call(stream)` captured once in a CUDA graph, then replayed `iters` times, each after an L2
  // flush: the replays' times (ms) in *ms.
  static Status time_graph(const std::function<Status(void* stream)>& call, int iters, std::vector<double>* ms);
  static double memory_in_use();
  ~Device();
  // out_of_memory, naming both numbers, when `bytes` exceed the device's free memory: the
  // problem is refused before anything is allocated.
  static Status check_free(std::size_t bytes);
  Status allocate(int tensor, std::size_t bytes);
  Status allocate_workspace(std::size_t bytes);
  void* pointer(int tensor) const { return ptrs[tensor]; }
  Status upload(int tensor, const void* src, std::size_t bytes);
  Status download(int tensor, void* dst, std::size_t bytes) const;
  Status set_varlen(const std::vector<std::int32_t>& sq, const std::vector<std::int32_t>& sk,
                    const std::vector<std::int32_t>& used);
  const std::int32_t* seqstart_q() const { return varlen[0]; }
  const std::int32_t* seqstart_k() const { return varlen[1]; }
  const std::int32_t* seqused_k() const { return varlen[2]; }
  // Empty vectors stay null (no cache, or a contiguous one without a block table).
  Status set_cache(const std::vector<std::int32_t>& seqlens, const std::vector<std::int32_t>& block_table);
  const std::int32_t* cache_seqlens() const { return cache[0]; }
  const std::int32_t* block_table() const { return cache[1]; }

  void* ptrs[int(Tensor::count)] = {};
  std::int32_t* varlen[3] = {nullptr, nullptr, nullptr};
  std::int32_t* cache[2] = {nullptr, nullptr};
  void* workspace = nullptr;  // reserve_workspace's, when asked for
  std::size_t workspace_bytes = 0;
};

}  // namespace memattn::tools
