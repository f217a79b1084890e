#include "support/seed.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace memattn::testing {
namespace {

// splitmix64's finaliser.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a: the same on every platform and run (std::hash promises neither).
std::uint64_t hash(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::uint64_t parse_seed() {
  const char* text = std::getenv("MEMATTN_TEST_SEED");
  if (text == nullptr || *text == '\0') return kDefaultTestSeed;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || *text == '-') {
    std::fprintf(stderr, "MEMATTN_TEST_SEED=%s: not an unsigned 64-bit integer (decimal or 0x-hex)\n", text);
    std::exit(2);
  }
  return std::uint64_t(v);
}

// The streams the running test has drawn: reset when a test starts (the listener) or when the
// running test changes (binaries without the listener).
struct Streams {
  std::mutex mutex;
  std::string test;
  std::uint64_t drawn = 0;
};

Streams& streams() {
  static Streams s;
  return s;
}

std::string running_test() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : std::string();
}

class SeedListener : public ::testing::EmptyTestEventListener {
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    const char* env = std::getenv("MEMATTN_TEST_SEED");
    std::printf("Note: random inputs from %s%s\n", replay_hint().c_str(),
                env && *env ? "" : " (the default; set MEMATTN_TEST_SEED to draw others)");
    std::fflush(stdout);
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    Streams& s = streams();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.test = std::string(info.test_suite_name()) + "." + info.name();
    s.drawn = 0;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::printf("[   SEED   ] %s.%s: replay with %s --gtest_filter='%s.%s'\n", info.test_suite_name(), info.name(),
                replay_hint().c_str(), info.test_suite_name(), info.name());
    std::fflush(stdout);
  }
};

}  // namespace

std::uint64_t test_seed() {
  static const std::uint64_t seed = parse_seed();
  return seed;
}

std::uint64_t seed_for(const std::string& stream) { return mix(test_seed() ^ mix(hash(stream))); }

std::uint64_t next_seed() {
  Streams& s = streams();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const std::string now = running_test();
  if (now != s.test) s.test = now, s.drawn = 0;
  return seed_for(s.test + "#" + std::to_string(s.drawn++));
}

std::string replay_hint() { return "MEMATTN_TEST_SEED=" + std::to_string(test_seed()); }

void install_seed_listener() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
}

}  // namespace memattn::testing
