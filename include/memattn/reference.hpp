// The float64 CPU reference: naive, readable, every feature, used to check everything else.
// It takes the same argument structs as forward()/backward() (host pointers), validates them the
// same way, and returns float64 results instead of writing the output tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "memattn/attention.hpp"

namespace memattn::reference {

// Called with (work done, total work) while the reference runs, for progress displays.
using Progress = std::function<void(long long done, long long total)>;

struct ForwardResult {
  std::vector<double> out;  // [B, Mq, Hq, Dv], contiguous
  std::vector<double> lse;  // [B, Hq, Mq], contiguous
};

struct BackwardResult {
  std::vector<double> dq;     // [B, Mq, Hq, D], contiguous
  std::vector<double> dk;     // [B, Mk, Hk, D]
  std::vector<double> dv;     // [B, Mk, Hk, Dv]
  std::vector<double> dbias;  // the bias's sizes with broadcast dimensions set to 1, contiguous
};

// A part of the problem to compute, for checking large problems by sampling: the listed
// sequences (batch entries) and kv heads (each with its group of query heads). Empty = all.
// Results outside the selection are NaN; so is dbias when the bias broadcasts over batch or
// heads and the selection leaves some out (its sums would be partial).
struct Selection {
  std::vector<std::int64_t> sequences;
  std::vector<std::int64_t> kv_heads;
};

// The output tensors named in args (out, lse, dq, ...) are validated but not written.
Status forward(const ForwardArgs& args, ForwardResult* result, const Progress& progress = {},
               const Selection& selection = {});
// The reference recomputes the forward itself in float64; args.out and args.lse are validated
// but not read.
Status backward(const BackwardArgs& args, BackwardResult* result, const Progress& progress = {},
                const Selection& selection = {});

}  // namespace memattn::reference
