// --load and --save of `memattn run`: problems and results as .npy files.
#pragma once

#include <string>

#include "workload/npy.hpp"
#include "workload/workload.hpp"

namespace memattn::cli {

// Arrays read from a --load folder: q, k, v always; bias and dout when their files exist.
struct LoadedInputs {
  tools::NpyArray q, k, v, bias, dout;
  bool has_bias = false, has_dout = false;
};

// Reads DIR/q.npy, k.npy, v.npy and, when present, bias.npy and do.npy; sets the spec's sizes
// (and bias pattern) from their shapes.
Status load_inputs(const std::string& dir, tools::ProblemSpec* spec, LoadedInputs* inputs);

// Copies the loaded arrays into the workload's input buffers, rounding to its dtype.
void fill_inputs(const LoadedInputs& inputs, tools::Workload* workload);

// Writes out.npy and lse.npy, and after a backward dq.npy, dk.npy, dv.npy (and dbias.npy); also
// the inputs (q.npy k.npy v.npy do.npy, bias.npy) so that the folder can be given to --load.
// bf16 arrays are written as float32 (numpy has no bf16).
enum class Results { forward, forward_and_backward };  // the forward's always: the backward needs it
Status save_results(const std::string& dir, const tools::Workload& workload, Results results);

}  // namespace memattn::cli
