// The small public helpers of src/core/types.cpp: Status text.
#include <gtest/gtest.h>

#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn {
namespace {

TEST(Types, StatusText) {
  const Status s(StatusCode::invalid_argument, "q: bad");
  EXPECT_EQ(s.to_string(), "invalid argument: q: bad");
  EXPECT_EQ(Status::Ok().to_string(), "ok");
}

}  // namespace
}  // namespace memattn
