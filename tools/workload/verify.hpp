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
  bool exact = false;   // a bit-for-bit check (a KV cache's append): error.bad counts the elements that differ
  // noise_l2 = 0 allows no noise: without that test every line without a noise bound (out, lse)
  // passed whatever its error, abs_l2 <= noise_l2 being 0 <= 0 there.
  bool pass() const { return error.ok(tolerance) || (noise_l2 > 0 && error.bad == 0 && abs_l2 <= noise_l2); }
};

struct VerifyReport {
  std::vector<CheckLine> lines;
  std::string scope;  // "all" or which sequences / kv heads were checked
  bool pass() const;
};

// The whole problem when the reference's work (visible pairs x (D + Dv)) is under `budget`;
// otherwise the first and last sequence and the first and last kv head.
reference::Selection sample_selection(const Workload& w, double budget);

// The forward's reference from the host inputs as they are now, and the comparison of out and lse
// with it. With a KV cache, take the reference before the forward: the forward appends to the
// cache (the reference reads the new keys from k_new, and the cache before the append).
Status forward_reference(const Workload& w, const reference::Selection& selection, const reference::Progress& progress,
                         reference::ForwardResult* result);
void check_forward(const Workload& w, const reference::Selection& selection, const reference::ForwardResult& ref,
                   VerifyReport* report);

// A KV cache's tensors as they are before the forward, and the check after it: lines k_cache and
// v_cache pass when the cache is the one before with k_new and v_new at the new keys' slots, bit
// for bit (every other slot, the NaN of unused ones included, unchanged).
struct CacheSnapshot {
  std::vector<unsigned char> k, v;
};
CacheSnapshot snapshot_cache(const Workload& w);
void check_cache_append(const Workload& w, const CacheSnapshot& before, VerifyReport* report);

// Compare the host copies of out/lse (forward) or dq/dk/dv/dbias (backward) with the reference.
// verify_forward is forward_reference and check_forward: for problems without a cache.
Status verify_forward(const Workload& w, const reference::Selection& selection,
                      const reference::Progress& progress, VerifyReport* report);
Status verify_backward(const Workload& w, const reference::Selection& selection,
                       const reference::Progress& progress, VerifyReport* report);

}  // namespace memattn::tools
