// The forward's split keys (src/cuda/key_splits.hpp): into how many parts a query tile's keys go.
// Host arithmetic only; the split kernels and the combine run in the GPU tests
// (CudaForwardSplitKeys).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "cuda/key_splits.hpp"

namespace memattn::cuda {
namespace {

// Decoding on an H100 with two CTAs of the 64-row tile per SM (264 at once): 32 query tiles
// (B 1, 32 heads, or 8 kv heads of 4 packed query heads each with B 4) of 512 key tiles.
TEST(KeySplits, FillTheResidentCtas) {
  EXPECT_EQ(plan_key_splits(8, 264, 128), 33);   // B 1, 8 kv heads: 264 CTAs of 3-4 key tiles
  EXPECT_EQ(plan_key_splits(1, 264, 4096), kAutoKeySplits);
}

// Parts just under one wave, unless rounding up runs fewer waves per part.
TEST(KeySplits, OneWaveRatherThanASpilledSecond) {
  EXPECT_EQ(plan_key_splits(32, 264, 512), 8);    // 256 CTAs; 9 parts would spill 24 of 288
  EXPECT_EQ(plan_key_splits(128, 792, 512), 6);   // B 16 x 8 kv heads, six one-warp CTAs per SM
  EXPECT_EQ(plan_key_splits(400, 792, 512), 1);   // a tie (a wave of wholes, two of halves): down
  EXPECT_EQ(plan_key_splits(512, 792, 512), 1);   // B 16 x 32 heads: likewise
  for (std::int64_t items = 1; items < 264; ++items) {  // never more waves per part than rounding up
    const std::int64_t over = (264 + items - 1) / items, splits = plan_key_splits(items, 264, 4096);
    const auto waves = [&](std::int64_t s) { return double((items * s + 263) / 264) / double(s); };
    if (over <= kAutoKeySplits) EXPECT_LE(waves(splits), waves(over)) << items;
    EXPECT_GE(splits, std::min<std::int64_t>(264 / items, kAutoKeySplits)) << items;
  }
}

TEST(KeySplits, EachPartKeepsKeyTiles) {
  EXPECT_EQ(plan_key_splits(8, 264, 10), 10 / kMinKeyTilesPerSplit);
  EXPECT_EQ(plan_key_splits(8, 264, 3), 3 / kMinKeyTilesPerSplit);
  EXPECT_EQ(plan_key_splits(8, 264, 1), 1);  // one key tile: nothing to split
  EXPECT_EQ(plan_key_splits(8, 264, 0), 1);
}

TEST(KeySplits, LeavesAFullGpuAlone) {
  for (const int splits : {plan_key_splits(264, 264, 512), plan_key_splits(2048, 264, 512),
                           plan_key_splits(0, 264, 512), plan_key_splits(32, 0, 512)}) {
    EXPECT_EQ(splits, 1);
  }
}

// Chunked prefill, B 16 x 32 heads of one 64-row tile each, on three CTAs per SM (396): two
// waves where 1.29 would do; three parts take 4 waves of a third (1.33). On two CTAs per SM (264)
// the two waves are 1.94 needed: left alone, as is a long training forward.
TEST(KeySplits, EvenOutAMostlyIdleLastWave) {
  EXPECT_EQ(plan_key_splits(512, 396, 128), 3);
  EXPECT_EQ(plan_key_splits(512, 264, 128), 1);
  EXPECT_EQ(plan_key_splits(4096, 264, 32), 1);
  EXPECT_EQ(plan_key_splits(512, 396, 2 * kMinKeyTilesPerWaveSplit), 2);  // parts keep their key tiles
  EXPECT_EQ(plan_key_splits(512, 396, 2 * kMinKeyTilesPerWaveSplit - 1), 1);
  EXPECT_EQ(plan_key_splits(640, 264, 8), 1);  // a short training forward: the fp32 parts would cost more
  // Every choice runs no more waves of whole items than no split.
  for (std::int64_t items = 264; items < 264 * 6; items += 7) {
    const int splits = plan_key_splits(items, 264, 64);
    ASSERT_GE(splits, 1);
    ASSERT_LE(splits, kMaxWaveSplits);
    EXPECT_LE(double((items * splits + 263) / 264) / splits, double((items + 263) / 264)) << items;
  }
}

}  // namespace
}  // namespace memattn::cuda
