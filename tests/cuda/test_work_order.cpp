// The CTAs' work order (src/cuda/work_order.hpp, rank_work): every (pair, tile) once, whatever the
// grouping the dispatcher chooses (work_groups: balanced, L2-sized, or none), each pair's tiles
// heaviest first, and a group's pairs rank by rank. Host arithmetic; the kernels use the same code.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/work_order.hpp"

namespace memattn::cuda {
namespace {

// The order of `pairs` x `tiles` work items in `groups` groups, checked item by item.
void expect_one_to_one(std::int64_t pairs, int tiles, std::int64_t groups) {
  std::vector<int> next_rank(std::size_t(pairs), 0);  // each pair's tiles come heaviest (rank 0) first
  for (std::int64_t index = 0; index < pairs * tiles; ++index) {
    const TileRank t = rank_work(index, tiles, pairs, groups);
    ASSERT_GE(t.pair, 0);
    ASSERT_LT(t.pair, pairs);
    ASSERT_EQ(t.rank, next_rank[std::size_t(t.pair)])
        << "pairs " << pairs << " tiles " << tiles << " groups " << groups << " index " << index;
    ++next_rank[std::size_t(t.pair)];
  }
  for (std::int64_t pair = 0; pair < pairs; ++pair) EXPECT_EQ(next_rank[std::size_t(pair)], tiles);
}

TEST(WorkOrder, EveryTileOnceForEveryGrouping) {
  for (std::int64_t pairs = 1; pairs <= 40; ++pairs)
    for (int tiles = 1; tiles <= 12; ++tiles)
      for (std::int64_t groups = 0; groups <= pairs + 1; ++groups) expect_one_to_one(pairs, tiles, groups);
}

// The suite's causal D = 256 S = 512 backward on 132 CTAs: 256 pairs of 8 key tiles, in the
// balanced groups (33 pairs: 7 groups) and the L2-sized ones (17 pairs: 15 groups).
TEST(WorkOrder, TheSuitesGroupings) {
  for (std::int64_t groups : {0, 1, 7, 15, 256}) expect_one_to_one(256, 8, groups);
}

// A group's heaviest tiles start together: with 4 groups of 10 pairs the first 10 items are rank
// 0 of pairs 0-9, the next 10 rank 1 of the same pairs.
TEST(WorkOrder, AGroupGoesRankByRank) {
  for (std::int64_t index = 0; index < 20; ++index) {
    const TileRank t = rank_work(index, 5, 40, 4);
    EXPECT_EQ(t.pair, index % 10);
    EXPECT_EQ(t.rank, int(index / 10));
  }
  const TileRank first_of_second_group = rank_work(50, 5, 40, 4);
  EXPECT_EQ(first_of_second_group.pair, 10);
  EXPECT_EQ(first_of_second_group.rank, 0);
}

}  // namespace
}  // namespace memattn::cuda
