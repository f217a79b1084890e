// memattn command-line tool: `memattn run` and `memattn kernels`.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/kernels.hpp"
#include "cli/run.hpp"

int main(int argc, char** argv) {
  CLI::App app{"memattn: exact, memory-efficient attention (forward and backward)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(memattn::version()));

  memattn::cli::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Run forward and/or backward on a problem, time it, verify it");
  memattn::cli::add_run_flags(run_cmd, &run);

  memattn::cli::ProblemFlags kflags;
  CLI::App* kernels_cmd = app.add_subcommand("kernels", "List the implementations and the one a problem would use");
  memattn::cli::add_problem_flags(kernels_cmd, &kflags);
  bool resources = false;
  kernels_cmd->add_flag("--resources", resources, "Also show registers, spills, shared memory and occupancy (needs a GPU)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  if (*run_cmd) return memattn::cli::run_command(run);
  return memattn::cli::kernels_command(kflags, resources);
}
