// The one-pass backward's last-wave split (src/cuda/tail_split.hpp): which key tiles are split and
// into how many parts. Host arithmetic only; the split kernels run in the GPU tests.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/tail_split.hpp"

namespace memattn::cuda {
namespace {

// The suite's non-causal rows on 132 CTAs: D = 128 (2048 tiles of 128 or 256 steps, 68 in the
// last wave) and D = 64 (4096 tiles, 4 in the last wave).
TEST(TailSplit, SplitsThePartFullLastWave) {
  constexpr TailSplit d128 = plan_tail_split(2048, 132, 128);
  EXPECT_EQ(d128.first, 2048 - 68);
  EXPECT_EQ(d128.parts, 3);  // 204 parts: two waves of a third of a tile and a bit
  const TailSplit d64 = plan_tail_split(4096, 132, 64);
  EXPECT_EQ(d64.first, 4096 - 4);
  EXPECT_EQ(d64.parts, kMaxTailParts);  // 32 parts: one wave of an eighth
}

TEST(TailSplit, LeavesWholeWavesAndSmallProblemsAlone) {
  for (const TailSplit t : {plan_tail_split(2112, 132, 128), plan_tail_split(100, 132, 128),
                            plan_tail_split(0, 132, 128), plan_tail_split(2048, 132, 7),
                            plan_tail_split(2048, 0, 128)}) {
    EXPECT_EQ(t.parts, 1);
  }
  EXPECT_EQ(plan_tail_split(2112, 132, 128).first, 2112);
}

// A last wave that is nearly full gains nothing from parts: each would end after one tile's time.
TEST(TailSplit, KeepsANearlyFullLastWave) { EXPECT_EQ(plan_tail_split(132 + 131, 132, 128).parts, 1); }

// Over many shapes: the split tiles are the last wave's, parts keep kMinPartSteps steps, and the
// modelled end of the split wave comes before one whole tile's time.
TEST(TailSplit, EveryChoiceEndsBeforeAWholeTile) {
  int splits = 0;  // the checks below the `continue` run for split shapes only
  for (std::int64_t resident : {66, 132, 264})
    for (std::int64_t tiles = resident; tiles < 5 * resident; tiles += 7)
      for (std::int64_t steps : {8, 16, 31, 128, 1000}) {
        const TailSplit t = plan_tail_split(tiles, resident, steps);
        if (t.parts == 1) {
          EXPECT_EQ(t.first, tiles);
          continue;
        }
        ++splits;
        const std::int64_t tail = tiles - t.first;
        EXPECT_EQ(tail, tiles % resident);
        EXPECT_LE(t.parts, kMaxTailParts);
        EXPECT_GE(steps / t.parts, kMinPartSteps);
        const std::int64_t waves = (tail * t.parts + resident - 1) / resident;
        const double part_steps = double(steps) / t.parts + kPartOverheadSteps + (t.parts - 1);
        EXPECT_LT(waves * part_steps, double(steps)) << tiles << " tiles, " << steps << " steps";
      }
  EXPECT_GT(splits, 0);
}

}  // namespace
}  // namespace memattn::cuda
