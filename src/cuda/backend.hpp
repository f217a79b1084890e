// The CUDA backend's entry points. Without CUDA in the build they report `unsupported`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/problem.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

struct FwdParams;

int device_count();

enum class Pass { forward, backward };
inline const char* to_string(Pass pass) { return pass == Pass::forward ? "forward" : "backward"; }

// The pass of the compiled kernel-table row called `name`; none when this build has no such row
// (validation of Options::overrides.kernel).
std::optional<Pass> row_pass(const std::string& name);

Status workspace_size(const ForwardArgs& args, const detail::Problem& problem, std::size_t* bytes);
Status workspace_size(const BackwardArgs& args, const detail::Problem& problem, std::size_t* bytes);

Status forward(const ForwardArgs& args, const detail::Problem& problem);
// A KV cache call's new keys and values, written into the cache on the call's stream (kv_cache.cu).
Status append_kv_cache(const ForwardArgs& args, const detail::Problem& problem);
// A KV cache call's fields of the forward's parameters (FwdParams::cache_*; kv_cache.cu).
void cache_params(const ForwardArgs& args, const detail::Problem& problem, FwdParams* params);
Status backward(const BackwardArgs& args, const detail::Problem& problem);

// Writes `value` into every element of a validated view of device memory, on `stream`
// (cudaStream_t): the outputs no kernel reaches.
Status fill(const TensorRef& view, double value, void* stream);

// The same for the rows of dimension `dim` outside [starts[0], starts[num_seqs]), with `starts` a
// device array whose values are only read on the device (clamped into the dimension).
Status fill_outside(const TensorRef& view, int dim, const std::int32_t* starts, std::int64_t num_seqs,
                    double value, void* stream);

Status describe_forward(const ForwardArgs& args, const detail::Problem& problem, std::string* plan);
Status describe_backward(const BackwardArgs& args, const detail::Problem& problem, std::string* plan);

}  // namespace memattn::cuda
