// The work order of the kernels whose CTAs stride over (pair, tile) work items: which tile of
// which (sequence, head) pair work item `index` is. Host and device code (the CPU tests check
// that it is a one-to-one map for every grouping the dispatcher can choose).
#pragma once

#include <cstdint>

#include "core/philox.hpp"  // MEMATTN_HD

namespace memattn::cuda {

// Work item `index` as (pair, rank): the rank-th heaviest of the `tiles` tiles of a (sequence,
// head) pair. One pair after another (groups 0), under a causal mask the last pair's heaviest
// tile starts when little other work is left and most of the GPU idles behind it (a model of the
// hardware's scheduler puts the suite's causal forward 10-15% over its ideal time). So the pairs
// go in `groups` groups (sizes differing by at most one, the larger first), each tile rank by tile
// rank across its pairs: the heaviest tiles of a group start together, and the host makes a group
// large enough that its work covers every resident CTA (the dispatcher's work_groups()), and no
// larger, so that the K and V (or Q and dO) its CTAs share stay few (smaller still where L2 would
// not hold the rows a group's pairs reread).
struct TileRank {
  std::int64_t pair;
  int rank;
};

MEMATTN_HD TileRank rank_work(std::int64_t index, int tiles, std::int64_t pairs, std::int64_t groups) {
  if (groups <= 0 || groups >= pairs) return {index / tiles, int(index % tiles)};
  const std::int64_t small = pairs / groups, large_groups = pairs % groups;  // those have small + 1 pairs
  const std::int64_t large_items = large_groups * (small + 1) * tiles;
  std::int64_t first, size;  // the group's first pair and its pairs
  if (index < large_items) {
    size = small + 1;
    first = index / (size * tiles) * size;
  } else {
    size = small;
    first = large_groups * (small + 1) + (index - large_items) / (size * tiles) * size;
  }
  const std::int64_t r = index - first * tiles;  // within the group
  return {first + r % size, int(r / size)};
}

}  // namespace memattn::cuda
