// The one-pass backward's last wave. Without a mask every key tile is the same work, and the CTAs
// take them in waves of `resident` (every SM full); when the tiles are not a whole number of
// waves the last one runs part-full while the rest of the GPU idles behind it. On the H100
// (132 CTAs at once) 2048 tiles are 15.5 waves and 4096 are 31.03: measured, a problem with
// 2048 tiles ran as long as one with 2112 (D = 128, S = 8192) and 4096 as long as 4224 (D = 64),
// 2.4% and 3.4% of the time lost.
//
// So the key tiles of the last, part-full wave are each split into `parts` CTAs along their query
// loop (the same keys, a share of the query steps each). Every part but the last stores its dK
// and dV partial sums in a workspace slot; the last part (the CTA launched last: the others have
// started before it, so waiting for them cannot deadlock) waits for them, adds them to its own
// and writes dK and dV. That is stream-K's fix-up, for the last wave only.
#pragma once

#include <cstdint>

namespace memattn::cuda {

struct TailSplit {
  std::int64_t first;  // the first split tile (tiles before it run whole)
  int parts;           // CTAs per split tile (1: none)
  // The work items (one CTA each) of `tiles` key tiles: the whole ones, then every part.
  constexpr std::int64_t work_items(std::int64_t tiles) const { return first + (tiles - first) * parts; }
};

// Each part costs its share of the steps plus about kPartOverheadSteps (K and V loaded, the
// pipeline filled, the partial sums stored), and the last part one step more per other part
// (their sums read back); a part keeps at least kMinPartSteps steps.
inline constexpr int kMaxTailParts = 8;
inline constexpr int kMinPartSteps = 4;
inline constexpr int kPartOverheadSteps = 2;

// `tiles` work items of `steps` query steps each, `resident` CTAs at once. The split tiles are
// the last `tiles % resident`; each is cut into the number of parts that, spread over every
// resident CTA, ends soonest (in waves of parts: ceil(tail * parts / resident) of them), and only
// when that ends before one whole tile would.
constexpr TailSplit plan_tail_split(std::int64_t tiles, std::int64_t resident, std::int64_t steps) {
  TailSplit none{tiles, 1};
  if (resident <= 0 || tiles < resident || steps < 2 * kMinPartSteps) return none;
  const std::int64_t tail = tiles % resident;
  if (tail == 0) return none;
  const auto cost = [&](int parts) {  // in steps, times `parts` to stay in integers
    const std::int64_t waves = (tail * parts + resident - 1) / resident;
    return waves * (steps + std::int64_t(parts) * (kPartOverheadSteps + parts - 1));
  };
  int best = 1;
  std::int64_t best_cost = steps;  // one part, times 1
  for (int parts = 2; parts <= kMaxTailParts && steps / parts >= kMinPartSteps; ++parts) {
    // cost(parts) / parts < best_cost / best, cross-multiplied
    if (cost(parts) * best < best_cost * parts) best = parts, best_cost = cost(parts);
  }
  if (best == 1) return none;
  return {tiles - tail, best};
}

}  // namespace memattn::cuda
