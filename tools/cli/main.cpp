// memattn command-line tool: `memattn run` and `memattn kernels`.
#include <iostream>

#include "cli/command_line.hpp"

int main(int argc, char** argv) {
  memattn::cli::CommandLine command_line;
  if (const int code = command_line.parse(argc, argv, std::cout, std::cerr); code >= 0) return code;
  return command_line.execute();
}
