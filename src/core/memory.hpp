// Where a pointer lives, and small copies to the host. Without the CUDA backend every pointer is
// host memory; with it, the CUDA runtime is asked (and a machine without a GPU answers "host").
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "memattn/status.hpp"

namespace memattn::detail {

enum class Location { host, device };

struct PointerInfo {
  Location location = Location::host;
  int device = -1;  // CUDA device ordinal for device (or managed) memory
};

PointerInfo locate(const void* ptr);

// Copies `bytes` from `src` (host or device memory) into host memory. From the device, in the order
// of `stream` (cudaStream_t: the call's, whose earlier work may write `src`), waiting for it.
Status copy_to_host(void* dst, const void* src, std::size_t bytes, Location from, void* stream);

// The CUDA device that calls run on (the current device), or -1 when there is none.
int current_cuda_device();

std::string describe(const PointerInfo& info);

// Bytes of host memory still available (MemAvailable plus free swap), when the system says.
std::optional<double> host_memory_available();

struct Problem;
// The largest host allocations the CPU or reference backend makes for a call (an upper bound).
double host_scratch_bytes(const Problem& p, bool backward);

}  // namespace memattn::detail
