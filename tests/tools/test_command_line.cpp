// cli/command_line.cpp: the CLI's parser as a function (the fuzz target tests/fuzz/fuzz_tools.cpp
// calls it in-process): it returns an exit code or a command, writes its text to the given
// streams, and never exits the process.
#include <gtest/gtest.h>

#include <memory>
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

// The spec a parsed `run` command line makes (after the CPU's size defaults).
Status spec_of(CommandLine& cl, std::vector<const char*> args, tools::ProblemSpec* spec) {
  args.insert(args.begin(), "run");
  const Parsed p = parse(cl, args);
  if (p.code != -1) return {StatusCode::invalid_argument, "parse: " + p.err};
  apply_backend_defaults(&cl.run_options().problem, Backend::cpu);
  return make_spec(cl.run_options().problem, spec);
}

TEST(CommandLine, KvCacheFlagsMakeACacheSpec) {
  CommandLine cl;
  tools::ProblemSpec s;
  Status st = spec_of(cl, {"--kv-cache", "paged", "--page-size", "7", "--cache-len", "100", "--new-keys", "3", "--causal",
                           "--seqlen-q", "3"}, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(s.cache.layout, tools::CacheLayout::paged);
  EXPECT_EQ(s.cache.page_size, 7);
  EXPECT_EQ(s.cache.cache_len, 100);
  EXPECT_EQ(s.cache.new_keys, 3);
  EXPECT_EQ(s.seqlen_k, 103) << "--seqlen-k defaults to the cached plus the new keys";
  EXPECT_EQ(s.mask.alignment, Alignment::bottom_right) << "a cache's default alignment";
  EXPECT_EQ(s.mask.window_right, 0);

  // Without --cache-len the cache holds --seqlen-k less the new keys; pages default to 16 keys.
  CommandLine contiguous;
  st = spec_of(contiguous, {"--kv-cache", "contiguous", "--seqlen-q", "8", "--seqlen-k", "20", "--new-keys", "8"}, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(s.cache.layout, tools::CacheLayout::contiguous);
  EXPECT_EQ(s.cache.cache_len, 12);
  EXPECT_EQ(s.seqlen_k, 20);
  CommandLine paged;
  st = spec_of(paged, {"--kv-cache", "paged", "--seqlen-q", "8"}, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(s.cache.page_size, 16);
  EXPECT_EQ(s.cache.cache_len, 8);
  EXPECT_EQ(s.cache.new_keys, 0);

  // An explicit top-left reaches the library (which refuses it, saying why); without a cache
  // the default stays top-left.
  CommandLine top_left;
  ASSERT_TRUE(spec_of(top_left, {"--kv-cache", "paged", "--causal", "--alignment", "top-left"}, &s).ok());
  EXPECT_EQ(s.mask.alignment, Alignment::top_left);
  CommandLine plain;
  ASSERT_TRUE(spec_of(plain, {"--causal"}, &s).ok());
  EXPECT_FALSE(s.cache.enabled());
  EXPECT_EQ(s.mask.alignment, Alignment::top_left);
}

// Each bad combination is refused with a message that starts with the flag to change.
TEST(CommandLine, BadKvCacheFlagsNameTheFlag) {
  struct Case {
    std::vector<const char*> args;
    const char* flag;
  };
  const std::vector<Case> parse_errors = {
      {{"--kv-cache", "paged", "--page-size", "0"}, "--page-size: must be >= 1"},
      {{"--kv-cache", "paged", "--page-size", "-4"}, "--page-size: must be >= 1"},
      {{"--kv-cache", "paged", "--cache-len", "-1"}, "--cache-len: must be >= 0"},
      {{"--kv-cache", "paged", "--new-keys", "-3"}, "--new-keys: must be >= 0"},
      {{"--kv-cache", "ring"}, "--kv-cache"},
  };
  for (const Case& c : parse_errors) {
    CommandLine cl;
    std::vector<const char*> args = c.args;
    args.insert(args.begin(), "run");
    const Parsed p = parse(cl, args);
    EXPECT_EQ(p.code, 2) << c.flag;
    EXPECT_NE(p.err.find(c.flag), std::string::npos) << p.err;
  }
  const std::vector<Case> spec_errors = {
      {{"--page-size", "8"}, "--page-size: "},
      {{"--kv-cache", "contiguous", "--page-size", "8"}, "--page-size: "},
      {{"--cache-len", "4"}, "--cache-len: "},
      {{"--new-keys", "1"}, "--new-keys: "},
      {{"--kv-cache", "paged", "--varlen", "3,4"}, "--varlen: "},
      {{"--kv-cache", "paged", "--varlen-k", "3,4"}, "--varlen-k: "},
      {{"--kv-cache", "paged", "--bias", "dense"}, "--bias: "},
      {{"--kv-cache", "contiguous", "--dropout", "0.2"}, "--dropout: "},
      {{"--kv-cache", "paged", "--cache-len", "10", "--new-keys", "2", "--seqlen-k", "13"}, "--cache-len: "},
      {{"--kv-cache", "paged", "--seqlen-k", "4", "--new-keys", "5"}, "--new-keys: "},
      {{"--kv-cache", "paged", "--cache-len", "3000000000"}, "--cache-len: "},
      {{"--kv-cache", "paged", "--page-size", "1", "--batch", "3", "--cache-len", "1000000000"}, "--page-size: "},
  };
  for (const Case& c : spec_errors) {
    CommandLine cl;
    tools::ProblemSpec s;
    const Status st = spec_of(cl, c.args, &s);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << c.flag;
    EXPECT_EQ(st.message().rfind(c.flag, 0), 0u) << st.message();
  }
  // run's own flags: the backward takes no cache, and .npy folders hold problems without one.
  const std::vector<Case> run_errors = {
      {{"--kv-cache", "paged", "--pass", "both"}, "--pass: "},
      {{"--kv-cache", "paged", "--pass", "bwd"}, "--pass: "},
      {{"--kv-cache", "paged", "--save", "/nonexistent/memattn"}, "--save: "},
      {{"--kv-cache", "paged", "--load", "/nonexistent/memattn"}, "--load: "},
  };
  for (const Case& c : run_errors) {
    CommandLine cl;
    std::vector<const char*> args = c.args;
    args.insert(args.begin(), "run");
    ASSERT_EQ(parse(cl, args).code, -1) << c.flag;
    tools::ProblemSpec s;
    std::unique_ptr<tools::Workload> w;
    const Status st = prepare(cl.run_options(), Backend::cpu, &s, &w);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << c.flag;
    EXPECT_EQ(st.message().rfind(c.flag, 0), 0u) << st.message();
    EXPECT_EQ(w, nullptr);
  }
  // Leaving --pass out runs the forward alone.
  CommandLine cl;
  ASSERT_EQ(parse(cl, {"run", "--kv-cache", "paged", "--seqlen-q", "4", "--heads-q", "2", "--head-dim", "8"}).code, -1);
  tools::ProblemSpec s;
  std::unique_ptr<tools::Workload> w;
  const Status st = prepare(cl.run_options(), Backend::cpu, &s, &w);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cl.run_options().pass, "fwd");
}

}  // namespace
}  // namespace memattn::cli
