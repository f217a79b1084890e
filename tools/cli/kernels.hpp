// `memattn kernels`.
#pragma once

#include "cli/flags.hpp"

namespace memattn::cli {

// Lists the implementations (CPU paths, CUDA kernel table) and the choice for the given problem.
int kernels_command(ProblemFlags& flags);

}  // namespace memattn::cli
