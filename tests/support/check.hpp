// Checks one problem end to end (DESIGN.md §3): fresh random inputs (support/seed.hpp's next
// stream of the running test), poisoned outputs, forward
// then backward on the spec's backend, every output compared with the float64 reference, and
// each error held within 2x of the naive same-dtype implementation's error.
#pragma once

#include <cstdint>
#include <string>

#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {

struct CheckOptions {
  bool backward = true;
  // Outputs within this many times the naive same-dtype implementation's error (DESIGN.md §3: 2).
  // The 3xTF32 rows take 3: their bar is 4x the FMA rows' error (test_cuda_precision), and the FMA
  // rows run at up to 1.5x the naive error.
  double naive_factor = 2;
  // Skip (with the library's reason) when the backend has no backward kernel for the problem.
  bool skip_unsupported_backward = false;
  // Variable lengths: NaN in every packed row of q and dout outside the sequences and every row of
  // k and v no sequence's keys use (past seqused_k too), which must change nothing: a kernel whose
  // tiles run on past a sequence's end must keep those rows out of every result.
  bool nan_outside_sequences = false;
};

void check_case(const tools::ProblemSpec& spec, const CheckOptions& options = {});

// `runs` times a forward and a backward from poisoned outputs: every run's dq, dk, dv (and dbias)
// must be bit-identical to the first, whose gradients must be finite and match the reference.
// With skip_unsupported, skips (with the library's reason) when the backend has no kernel for the
// problem; otherwise that fails.
void check_backward_bit_identical(const tools::ProblemSpec& spec, int runs, bool skip_unsupported = false);

// Keys past each sequence's used ones (spec.seqused_k; no packed rows outside the sequences) are
// seen by nothing, whatever they hold (an unwritten KV cache): the forward's output is finite,
// matches the float64 reference on every element, and equals bit for bit with NaN in those K and V
// rows what it is with finite values there.
void check_unused_keys_unseen(const tools::ProblemSpec& spec);

}  // namespace memattn::testing
