// Which tensors a TMA tensor map can describe (src/cuda/sm90/tma_map.hpp): the rule the dispatcher
// applies before it picks a TMA row, so that a tensor no map describes goes to the other rows
// instead of failing at launch. Host arithmetic only: the maps themselves are encoded and used in
// the GPU tests (the Hopper forward rows).
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/sm90/tma_map.hpp"

namespace memattn::cuda::sm90 {
namespace {

// A [B = 4, M = 1000, H = 16, D = 128] bf16 tensor, BMHK-contiguous at a 16-byte aligned address
// (never dereferenced).
TmaTensor bmhk() {
  return {reinterpret_cast<const void*>(std::uintptr_t(1) << 20), DType::bf16, 128, 1000, 16, 4,
          16 * 128, 128, 1000 * 16 * 128};
}

TEST(TmaMap, DescribesStridedLayouts) {
  EXPECT_TRUE(tma_describable(bmhk()));
  TmaTensor bhmd = bmhk();  // SDPA's [B, H, M, D] read as BMHK
  bhmd.row_stride = 128, bhmd.head_stride = 1000 * 128;
  EXPECT_TRUE(tma_describable(bhmd));
  TmaTensor padded = bmhk();  // rows padded to 136 elements (272 bytes)
  padded.row_stride = 16 * 136;
  EXPECT_TRUE(tma_describable(padded));
  TmaTensor fp16 = bmhk();
  fp16.dtype = DType::f16;
  EXPECT_TRUE(tma_describable(fp16));
  TmaTensor fp32 = bmhk();  // the fp32 forward's rows (strides in elements: twice the bytes)
  fp32.dtype = DType::f32;
  EXPECT_TRUE(tma_describable(fp32));
}

TEST(TmaMap, RefusesBroadcastStridesOnly) {
  TmaTensor t = bmhk();
  t.batch_stride = 0;  // K/V shared by the batch
  EXPECT_FALSE(tma_describable(t));
  t.batch = 1;  // a dimension of one element is never stepped along
  EXPECT_TRUE(tma_describable(t));
  TmaTensor heads = bmhk();
  heads.head_stride = 0;
  EXPECT_FALSE(tma_describable(heads));
}

TEST(TmaMap, RefusesWhatTheCopyEngineCannotAddress) {
  TmaTensor t = bmhk();
  t.data = reinterpret_cast<const void*>((std::uintptr_t(1) << 20) + 2);  // 2-byte aligned
  EXPECT_FALSE(tma_describable(t));
  t = bmhk();
  t.row_stride = 16 * 128 + 4;  // rows 8 bytes off a 16-byte multiple
  EXPECT_FALSE(tma_describable(t));
  t = bmhk();
  t.cols = 100;  // 200-byte rows
  EXPECT_FALSE(tma_describable(t));
  t = bmhk();
  t.dtype = DType::f32;
  t.cols = 61;  // 244-byte rows
  EXPECT_FALSE(tma_describable(t));
  t = bmhk();
  t.rows = std::int64_t(1) << 31;  // past the signed 32-bit box coordinates
  EXPECT_FALSE(tma_describable(t));
  t = bmhk();
  t.batch_stride = (std::int64_t(1) << 40) / 2;  // 2^40 bytes
  EXPECT_FALSE(tma_describable(t));
}

TEST(TmaMap, MakeRefusesWhatNoMapDescribes) {
  TmaTensor t = bmhk();
  t.head_stride = 0;
  CUtensorMap map;
  const Status s = make_tma_map(t, 128, &map);
  EXPECT_EQ(s.code(), StatusCode::internal_error) << s.to_string();
}

}  // namespace
}  // namespace memattn::cuda::sm90
