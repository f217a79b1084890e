// Row selection: which kernel-table row runs a call. A problem's needs (dtype, head dim,
// alignment, bias and dropout, shared memory, determinism) are read off the arguments, and the
// rows are tried in priority order: the first that fits runs. Rows marked experimental are passed
// over, and a row that only pays off over long query loops (min_queries_per_key) is taken only
// when no other row fits. MEMATTN_KERNEL=<row name> limits the choice of its pass to that row.
// When no row fits, the error says why, per row family.
#pragma once

#include "core/problem.hpp"
#include "cuda/kernel_table.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

// The row for a call: the first that fits; unsupported, with each family's reason, when none
// does.
Status choose_forward(const ForwardArgs& args, const detail::Problem& problem, const ForwardKernel** row);
Status choose_backward(const BackwardArgs& args, const detail::Problem& problem, const BackwardKernel** row);

}  // namespace memattn::cuda
