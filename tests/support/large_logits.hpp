// Large logits: a backward that recomputes P = exp(S - LSE) from the forward's
// LSE gets P = 1 exactly on a row with one dominant key only if it recomputes the forward's scores
// bit for bit, in the LSE's own (natural) domain; otherwise S - LSE is off by a few roundings of
// |S| (dV off by 1.4e-2 relative at scores of 1e5 in fp32).
//
// check_one_hot_dv's problems give every query row one dominant key by construction: q_i is a copy
// of key a(i), so its score against a(i) exceeds every other by far more than float32's exp can
// resolve. The exact dV of key j is then the sum of dO over the rows whose dominant key is j, and
// the only errors left are the float32 summation of those rows and the rounding of dV to the dtype.
#pragma once

#include <string>

#include "memattn/attention.hpp"

namespace memattn::testing {

struct LargeLogitCase {
  DType dtype;
  double logit;            // the dominant scores' size: scale * |k|^2 with |k|^2 about D
  double input_magnitude;  // q and k multiplied by this (1: unit normals)
  std::string name;
  int head_dim = 96;  // with scale logit / (D m^2), a scale product with a rounding (not a power of two)
};

// Forward and backward on `backend` (cpu or cuda), then every dV element within the bound of P = 1.
void check_one_hot_dv(const LargeLogitCase& c, Backend backend);

}  // namespace memattn::testing
