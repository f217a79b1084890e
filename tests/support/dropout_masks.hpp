// Checks that a backend's forward (and backward) apply exactly the dropout mask of dropout_keep(),
// in the given dtype (on CUDA the dtype and the head dims (D = 8, Dv = 48) pick the kernel row).
#pragma once

#include "memattn/attention.hpp"

namespace memattn::testing {

// The overrides (a forced row) go to the pass they are for; `precision` lets a forced 3xTF32 row run.
void check_dropout_masks(Backend backend, bool backward, DType dtype = DType::f32,
                         const KernelOverrides& forward_overrides = {}, const KernelOverrides& backward_overrides = {},
                         Precision precision = Precision::automatic);

}  // namespace memattn::testing
