// The command line of `memattn`: its subcommands and flags, parsed in-process. Parsing never
// exits the process and lets no exception out (the fuzz target tests/fuzz/fuzz_tools.cpp calls it
// on arbitrary arguments); main() runs the command it names.
#pragma once

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <memory>

#include "cli/flags.hpp"
#include "cli/run.hpp"

namespace memattn::cli {

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses argv (argv[0] is the program). Returns -1 when a command is ready to run, else the
  // exit code to end with: 0 after --help or --version, 2 for a bad command line, with the text
  // written to `out` (help, version) or `err` (the error).
  int parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

  enum class Command { none, run, kernels };
  Command command() const { return command_; }
  // The parsed flags. They stay tied to this object: ProblemFlags::size_options points into it.
  RunOptions& run_options() { return run_; }
  ProblemFlags& kernels_flags() { return kernels_; }
  bool resources() const { return resources_; }

  // Runs the parsed command; its exit code.
  int execute();

 private:
  std::unique_ptr<CLI::App> app_;
  CLI::App* run_cmd_ = nullptr;
  CLI::App* kernels_cmd_ = nullptr;
  RunOptions run_;
  ProblemFlags kernels_;
  bool resources_ = false;
  Command command_ = Command::none;
};

}  // namespace memattn::cli
