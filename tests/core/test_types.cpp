// The small public helpers of src/core/types.cpp: enum names, dtype sizes, Status text and the
// strided views make_tensor builds.
#include <gtest/gtest.h>

#include <string>

#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn {
namespace {

TEST(Types, DtypeNamesAndSizes) {
  EXPECT_STREQ(to_string(DType::f32), "f32");
  EXPECT_STREQ(to_string(DType::f16), "f16");
  EXPECT_STREQ(to_string(DType::bf16), "bf16");
  EXPECT_STREQ(to_string(DType::f64), "f64");
  EXPECT_STREQ(to_string(DType(7)), "unknown");
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType(7)), 0u);
}

TEST(Types, BackendAndAlignmentNames) {
  EXPECT_STREQ(to_string(Backend::automatic), "auto");
  EXPECT_STREQ(to_string(Backend::cpu), "cpu");
  EXPECT_STREQ(to_string(Backend::cuda), "cuda");
  EXPECT_STREQ(to_string(Backend::reference), "reference");
  EXPECT_STREQ(to_string(Alignment::top_left), "top-left");
  EXPECT_STREQ(to_string(Alignment::bottom_right), "bottom-right");
}

TEST(Types, StatusText) {
  const Status s(StatusCode::invalid_argument, "q: bad");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "invalid argument: q: bad");
  EXPECT_EQ(Status::Ok().to_string(), "ok");
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status(StatusCode::unsupported, "no row").to_string(), "unsupported: no row");
  EXPECT_EQ(Status(StatusCode::device_error, "x").to_string(), "device error: x");
  EXPECT_EQ(Status(StatusCode::internal_error, "x").to_string(), "internal error: x");
  EXPECT_STREQ(to_string(StatusCode::ok), "ok");
}

TEST(Types, MakeTensorIsRowMajor) {
  const float data[1] = {0};
  const TensorRef t = make_tensor(data, DType::f16, {2, 3, 4, 5});
  EXPECT_EQ(t.data, static_cast<const void*>(data));
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype, DType::f16);
  EXPECT_EQ(t.rank, 4);
  const std::int64_t sizes[4] = {2, 3, 4, 5}, strides[4] = {60, 20, 5, 1};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(t.sizes[d], sizes[d]) << d;
    EXPECT_EQ(t.strides[d], strides[d]) << d;
  }
  EXPECT_EQ(t.numel(), 120);
  const TensorRef lse = make_tensor(data, DType::f32, {2, 7, 9});
  EXPECT_EQ(lse.rank, 3);
  EXPECT_EQ(lse.strides[0], 63);
  EXPECT_EQ(lse.strides[1], 9);
  EXPECT_EQ(lse.strides[2], 1);
  EXPECT_EQ(make_tensor(data, DType::f32, {4, 0, 3}).numel(), 0);
  EXPECT_FALSE(TensorRef{}.defined());
}

TEST(Types, MakeTensorWithStrides) {
  const float data[1] = {0};
  const TensorRef t = make_tensor(data, DType::bf16, {2, 5, 3, 8}, {0, 48, 16, 1});  // batch broadcast, padded heads
  EXPECT_EQ(t.rank, 4);
  const std::int64_t sizes[4] = {2, 5, 3, 8}, strides[4] = {0, 48, 16, 1};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(t.sizes[d], sizes[d]) << d;
    EXPECT_EQ(t.strides[d], strides[d]) << d;
  }
  EXPECT_EQ(t.numel(), 240) << "numel counts elements of the view, not of the memory";
}

}  // namespace
}  // namespace memattn
