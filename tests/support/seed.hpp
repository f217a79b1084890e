// The seeds of the tests' random inputs. One run seed, kDefaultTestSeed or the value of the
// environment variable MEMATTN_TEST_SEED (decimal or 0x-hex), and every stream a test draws is a
// pure function of it, the running test's full name and how many streams that test drew before:
// a test draws the same inputs alone (--gtest_filter, one CTest test) as in the whole suite, and
// a failure replays exactly with the seed its report prints ("replay with MEMATTN_TEST_SEED=...",
// from the listener that support/main.cpp installs). Never the clock.
#pragma once

#include <cstdint>
#include <string>

namespace memattn::testing {

inline constexpr std::uint64_t kDefaultTestSeed = 20261124;

// The run seed: MEMATTN_TEST_SEED when set (an unparsable value aborts with a message), else
// kDefaultTestSeed.
std::uint64_t test_seed();

// A stream's seed: the run seed mixed with a stable 64-bit hash of `stream`.
std::uint64_t seed_for(const std::string& stream);

// The next stream of the running test: seed_for("<suite>.<test>#<n>"), n = 0, 1, ... per test.
std::uint64_t next_seed();

// "MEMATTN_TEST_SEED=<run seed>": what to set to replay this run's inputs.
std::string replay_hint();

// Prints the run seed when the tests start and, after each failed test, the line that replays it.
void install_seed_listener();

}  // namespace memattn::testing
