// Row selection: which kernel-table row runs a call. A problem's needs (dtype, head dim,
// alignment, bias and dropout, shared memory, determinism) are read off the arguments, and the
// rows are tried in priority order: the first that fits runs. A row that only pays off over long
// query loops (min_queries_per_key) is taken only when no other row fits. Options::overrides.kernel
// replaces the choice with the named row. When no row fits, the error says why, per row family.
#pragma once

#include "core/problem.hpp"
#include "cuda/kernel_table.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

// The row for a call: the first that fits, or the forced one (overrides.kernel). Errors:
// unsupported when no row fits (with each family's reason), invalid_argument when the forced row
// cannot run the problem (with its reason).
Status choose_forward(const ForwardArgs& args, const detail::Problem& problem, const ForwardKernel** row);
Status choose_backward(const BackwardArgs& args, const detail::Problem& problem, const BackwardKernel** row);

// Whether a tensor's pointer and the strides of its outer dimensions are 16-byte multiples (its
// rows can move 16 bytes at a time when the row length is one too).
bool aligned16(const TensorRef& t);

}  // namespace memattn::cuda
