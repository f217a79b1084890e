// `memattn kernels`.
#pragma once

#include "cli/flags.hpp"

namespace memattn::cli {

// Lists the implementations (CPU paths, CUDA kernel table) and the choice for the given problem.
// resources: also the registers, spills, shared memory and occupancy of every row.
int kernels_command(ProblemFlags& flags, bool resources);

}  // namespace memattn::cli
