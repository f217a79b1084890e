#include "cli/command_line.hpp"

#include <iostream>

#include "cli/kernels.hpp"

namespace memattn::cli {

CommandLine::CommandLine() : app_(std::make_unique<CLI::App>("memattn: exact, memory-efficient attention (forward and backward)")) {
  app_->require_subcommand(1);
  app_->set_version_flag("--version", std::string(memattn::version()));
  run_cmd_ = app_->add_subcommand("run", "Run forward and/or backward on a problem, time it, verify it");
  add_run_flags(run_cmd_, &run_);
  kernels_cmd_ = app_->add_subcommand("kernels", "List the implementations and the one a problem would use");
  add_problem_flags(kernels_cmd_, &kernels_);
  kernels_cmd_->add_flag("--resources", resources_, "Also show registers, spills, shared memory and occupancy (needs a GPU)");
}

int CommandLine::parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  command_ = Command::none;
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app_->exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app_->exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app_->exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    app_->exit(e, out, err);
    return 2;
  }
  command_ = *run_cmd_ ? Command::run : Command::kernels;
  return -1;
}

int CommandLine::execute() {
  switch (command_) {
    case Command::run: return run_command(run_);
    case Command::kernels: return kernels_command(kernels_, resources_);
    case Command::none: break;
  }
  return 2;
}

}  // namespace memattn::cli
