// `memattn run`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "cli/flags.hpp"

namespace memattn::cli {

struct RunOptions {
  ProblemFlags problem;
  std::string pass;  // fwd, bwd or both; empty: both, or fwd with a KV cache (prepare() settles it)
  int iters = 10;
  bool verify = false;
  bool graph = false;  // time the device's work alone: CUDA graph replays after an L2 flush
  std::string load_dir, save_dir;
  bool json = false;
};

void add_run_flags(CLI::App* app, RunOptions* options);
// Builds the problem for a backend: the spec from the flags (or --load), the workload with its
// inputs (and device mirror). The tensors may take at most `host_limit` bytes when it is >= 0,
// else the host memory available (check_host_memory).
Status prepare(RunOptions& options, Backend backend, tools::ProblemSpec* spec, std::unique_ptr<tools::Workload>* workload,
               std::int64_t host_limit = -1);
// Exit code: 0 done (and verified when asked), 1 verification failed, 2 error.
int run_command(RunOptions& options);

}  // namespace memattn::cli
