// A naive attention in the working dtype, the way a framework's unfused math path computes it:
// every matrix product accumulates in float and rounds its result to the dtype, softmax runs in
// float and rounds its output. DESIGN.md §3 asks every kernel's error to stay within 2x of this
// implementation's error (both measured against the float64 reference).
//
// The naive backward takes what the API's backward takes: it recomputes P = exp(S - LSE) from
// the float32 LSE the forward returned, and delta = rowsum(dO * O) from the forward's rounded O.
// (Rounding LSE costs up to half an ulp of |LSE| in every exponent, and rounding O shifts delta,
// which no backward that receives O and a float32 LSE can avoid.)
#pragma once

#include <vector>

#include "workload/workload.hpp"

namespace memattn::testing {

struct NaiveForward {
  std::vector<double> out, lse;  // contiguous, like the reference's results
};

struct NaiveBackward {
  std::vector<double> dq, dk, dv, dbias;
};

NaiveForward naive_forward(const tools::Workload& w);
NaiveBackward naive_backward(const tools::Workload& w);

}  // namespace memattn::testing
