// The CUDA kernel table as users can see it: every compiled kernel in the order the dispatcher
// tries them. describe_plan() says which one a given problem would use.
#pragma once

#include <string>
#include <vector>

namespace memattn {

struct KernelInfo {
  std::string name;         // e.g. fwd_sm80_bf16_d128_m128n64w8_vec_plain
  std::string description;  // family, dtype, head-dim bucket, tile, accumulator, alignment, features
  int priority;             // lower is tried first
  std::string resources;    // registers, spills, shared memory, occupancy (when asked for)
};

// Empty when the build has no CUDA backend. with_resources asks the driver about each kernel
// (needs a CUDA device).
std::vector<KernelInfo> list_kernels(bool with_resources = false);

}  // namespace memattn
