// `memattn run`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/flags.hpp"

namespace memattn::cli {

struct RunOptions {
  ProblemFlags problem;
  std::string pass = "both";
  int iters = 10;
  bool verify = false;
  std::string load_dir, save_dir;
  bool json = false;
};

void add_run_flags(CLI::App* app, RunOptions* options);
// Exit code: 0 done (and verified when asked), 1 verification failed, 2 error.
int run_command(RunOptions& options);

}  // namespace memattn::cli
