// Checks that a backend's forward (and backward) apply exactly the dropout mask of dropout_keep().
#pragma once

#include "memattn/types.hpp"

namespace memattn::testing {

void check_dropout_masks(Backend backend, bool backward);

}  // namespace memattn::testing
