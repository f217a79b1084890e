// Scheduling: how a chosen row's work items meet the GPU. Four decisions, each from how many CTAs
// of the row the GPU holds at once:
// - the work order's groups of (sequence, head) pairs under a causal mask (work_order.hpp), sized
//   so that a group's heaviest tiles fill the GPU, and on the backward's wgmma one-pass rows
//   shrunk where the pairs in flight would reread more than half of L2;
// - the one-pass backward's last-wave split (tail_split.hpp);
// - the persistent grids of the global-accumulator and TMA rows: one CTA per resident slot, each
//   taking work items in turn;
// - the forward's split keys (key_splits.hpp) where the work items leave the GPU part-empty.
// Options::overrides turns the first two off for comparisons (l2_sized_groups, split_last_wave)
// and sets the split count (num_splits).
#pragma once

#include "core/problem.hpp"
#include "cuda/kernel_table.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

// Fills f's work groups, split keys (num_splits, and num_blocks counts the parts) and
// (global-accumulator and TMA rows) grid CTAs; f's tile counts are set.
Status schedule_forward(const ForwardKernel& k, const detail::Problem& p, const KernelOverrides& overrides,
                        FwdParams* f);

// Fills b's work groups (query and key tiles; on a deterministic TMA row, groups that stagger a
// pair's key tiles), the last-wave split and work items, and (the tensor-core global-accumulator
// and TMA rows) the grid CTAs; b's tile counts are set.
Status schedule_backward(const BackwardKernel& k, const detail::Problem& p, const KernelOverrides& overrides,
                         bool deterministic, BwdParams* b);

}  // namespace memattn::cuda
