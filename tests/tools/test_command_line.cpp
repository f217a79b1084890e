// cli/command_line.cpp: the CLI's parser as a function (the fuzz target tests/fuzz/fuzz_tools.cpp
// calls it in-process): it returns an exit code or a command, writes its text to the given
// streams, and never exits the process.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/command_line.hpp"

namespace memattn::cli {
namespace {

struct Parsed {
  int code;
  std::string out, err;
};

Parsed parse(CommandLine& cl, std::vector<const char*> args) {
  args.insert(args.begin(), "memattn");
  std::ostringstream out, err;
  const int code = cl.parse(int(args.size()), args.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST(CommandLine, ARunCommandIsReadyToExecute) {
  CommandLine cl;
  const Parsed p = parse(cl, {"run", "--batch", "2", "--dtype", "fp16", "--causal"});
  EXPECT_EQ(p.code, -1) << p.err;
  EXPECT_EQ(cl.command(), CommandLine::Command::run);
  EXPECT_EQ(cl.run_options().problem.batch, 2);
  EXPECT_EQ(cl.run_options().problem.dtype, "fp16");
  EXPECT_TRUE(cl.run_options().problem.causal);
}

TEST(CommandLine, KernelsCommand) {
  CommandLine cl;
  EXPECT_EQ(parse(cl, {"kernels", "--head-dim", "96", "--resources"}).code, -1);
  EXPECT_EQ(cl.command(), CommandLine::Command::kernels);
  EXPECT_EQ(cl.kernels_flags().head_dim, 96);
  EXPECT_TRUE(cl.resources());
}

TEST(CommandLine, HelpAndVersionReturnZeroWithTheirText) {
  CommandLine help;
  const Parsed h = parse(help, {"run", "--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--seqlen-q"), std::string::npos) << h.out;
  CommandLine version;
  const Parsed v = parse(version, {"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find(memattn::version()), std::string::npos) << v.out;
}

TEST(CommandLine, BadCommandLinesReturnTwoWithAMessage) {
  for (const std::vector<const char*>& args : std::vector<std::vector<const char*>>{
           {}, {"frobnicate"}, {"run", "--batch", "0"}, {"run", "--batch", "99999999999999999999"},
           {"run", "--dropout", "1.0"}, {"run", "--no-such-flag"}, {"run", "--dtype", "fp64"}}) {
    CommandLine cl;
    const Parsed p = parse(cl, args);
    EXPECT_EQ(p.code, 2) << (args.empty() ? "(no arguments)" : args.back());
    EXPECT_FALSE(p.err.empty());
    EXPECT_EQ(cl.command(), CommandLine::Command::none);
  }
}

}  // namespace
}  // namespace memattn::cli
