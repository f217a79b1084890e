// The tests' main: GoogleTest's, plus the listener that prints the run seed and, after a failed
// test, how to replay it (support/seed.hpp).
#include <gtest/gtest.h>

#include "support/seed.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  memattn::testing::test_seed();  // an unparsable MEMATTN_TEST_SEED stops here, before any test
  memattn::testing::install_seed_listener();
  return RUN_ALL_TESTS();
}
