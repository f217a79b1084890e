// Checking a workload's outputs against the float64 reference, on all of it or on a sample.
#pragma once

#include <string>
#include <vector>

#include "memattn/reference.hpp"
#include "workload/workload.hpp"

namespace memattn::tools {

// A line passes when nothing is unwritten and the relative error is within the tolerance, or, for
// a gradient, when its absolute error (abs_l2) is within the rounding noise of the magnitudes it
// was computed from (noise_l2; see verify.cpp): a gradient whose exact value is zero has only
// noise to compare.
struct CheckLine {
  std::string name;
  ErrorStats error;
  double tolerance = 0;
  double abs_l2 = 0;    // ||x - ref|| (gradients)
  double noise_l2 = 0;  // the noise an exact-zero gradient may show (0: none allowed)
  bool pass() const { return error.ok(tolerance) || (error.bad == 0 && abs_l2 <= noise_l2); }
};

struct VerifyReport {
  std::vector<CheckLine> lines;
  std::string scope;  // "all" or which sequences / kv heads were checked
  bool pass() const;
};

// The whole problem when the reference's work (visible pairs x (D + Dv)) is under `budget`;
// otherwise the first and last sequence and the first and last kv head.
reference::Selection sample_selection(const Workload& w, double budget);

// Compare the host copies of out/lse (forward) or dq/dk/dv/dbias (backward) with the reference.
Status verify_forward(const Workload& w, const reference::Selection& selection,
                      const reference::Progress& progress, VerifyReport* report);
Status verify_backward(const Workload& w, const reference::Selection& selection,
                       const reference::Progress& progress, VerifyReport* report);

}  // namespace memattn::tools
