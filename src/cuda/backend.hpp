// The CUDA backend's entry points. Without CUDA in the build they report `unsupported`.
#pragma once

#include <cstddef>
#include <string>

#include "core/problem.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

int device_count();

Status workspace_size(const ForwardArgs& args, const detail::Problem& problem, std::size_t* bytes);
Status workspace_size(const BackwardArgs& args, const detail::Problem& problem, std::size_t* bytes);

Status forward(const ForwardArgs& args, const detail::Problem& problem);
Status backward(const BackwardArgs& args, const detail::Problem& problem);

Status describe_forward(const ForwardArgs& args, const detail::Problem& problem, std::string* plan);
Status describe_backward(const BackwardArgs& args, const detail::Problem& problem, std::string* plan);

}  // namespace memattn::cuda
