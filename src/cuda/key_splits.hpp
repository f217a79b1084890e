// How many parts a query tile's keys are split into (split_keys.hpp). A forward with fewer work
// items (query tiles x heads x sequences) than the GPU holds at once runs each on one CTA while
// the rest of the GPU idles: decoding (one query row per sequence) with 32 heads fills 32 of the
// H100's 132 SMs and each of those walks every key. Splitting each tile's keys into parts that
// together fill the resident CTAs cuts the time by about the split count while the parts have
// key tiles enough to hide their start and their partial result (one fp32 row per query row),
// and a combine kernel merges the parts.
#pragma once

#include <cstdint>

namespace memattn::cuda {

// At most this many parts; KernelOverrides::num_splits has the same bound.
inline constexpr int kMaxKeySplits = 256;
// The automatic choice gives each part at least this many key tiles and at most kAutoKeySplits
// parts: beyond that the combine reads more than a part's walk saves. One key tile a part beat
// two wherever the slots allow it: H200, B 1 / 32-8 heads, one-warp 16-row tile, CUDA graphs, us
// with parts of two tiles -> one: tensors D = 128 1k / 2k / 4k keys 13 / 14 / 16 -> 11 / 13 / 15,
// D = 64 12 / 12 / 13 -> 11 / 11 / 13; a contiguous cache with an appended key D = 128
// 28 / 29 / 30 -> 21 / 22 / 24, D = 64 23 / 24 / 25 -> 19 / 19 / 20.
inline constexpr int kMinKeyTilesPerSplit = 1;
inline constexpr int kAutoKeySplits = 64;

// Work items that fill the GPU can still leave its last wave mostly idle: 512 query tiles on 396
// resident CTAs (chunked prefill, B 16 x 32 heads, on the three-CTA paged rows) take two waves of
// full-length items where 1.3 would do, and the parts of a 3-way split take 4 waves of a third.
// Beyond this ratio of waves run to waves needed, up to kMaxWaveSplits parts even them out, each
// keeping kMinKeyTilesPerWaveSplit key tiles: a part writes its query rows' partial output in
// fp32, which must stay small beside the keys it reads (B 5 x 32 heads x 512 queries x 512 keys,
// 8 key tiles, split on the H100: 82 -> 220 us).
inline constexpr double kMaxWaveLoss = 1.2;
inline constexpr int kMaxWaveSplits = 4;
inline constexpr int kMinKeyTilesPerWaveSplit = 16;

// `work_items` CTAs of `key_tiles` key tiles each (the most any tile walks), `resident` CTAs at
// once: the parts per tile that fill the resident CTAs, or, when the work items fill them, that
// even out a last wave left mostly idle; 1 when neither applies.
constexpr int plan_key_splits(std::int64_t work_items, std::int64_t resident, std::int64_t key_tiles) {
  if (work_items <= 0 || resident <= 0) return 1;
  const std::int64_t most = key_tiles / kMinKeyTilesPerSplit;
  if (resident > work_items) {
    // The part counts just under and just over one wave: the one that runs fewer waves per part,
    // rounding down on a tie. Rounding up spilled a few parts into a second wave, which cost more
    // than the slots rounding down leaves idle: H100, bf16, D = 128, 792 one-warp slots, CUDA
    // graphs, us: B 16 x 8 kv heads, 6 parts vs 7: 2k keys 75.6 vs 81.8, 8k 207 vs 238, 32k 731
    // vs 903; on a tie (B 16 x 32 heads, 8k keys: a wave of wholes or two of halves) 1 part
    // 711 vs 2 803.
    const std::int64_t under = resident / work_items, over = (resident + work_items - 1) / work_items;
    const auto waves = [&](std::int64_t splits) { return (work_items * splits + resident - 1) / resident; };
    std::int64_t splits = waves(under) * over <= waves(over) * under ? under : over;
    if (splits > kAutoKeySplits) splits = kAutoKeySplits;
    if (splits > most) splits = most;
    return splits > 1 ? int(splits) : 1;
  }
  const std::int64_t waves = (work_items + resident - 1) / resident;
  if (double(waves * resident) <= kMaxWaveLoss * double(work_items)) return 1;
  int best = 1;
  double best_time = double(waves);  // in waves of a whole item
  for (int splits = 2; splits <= kMaxWaveSplits && splits <= key_tiles / kMinKeyTilesPerWaveSplit; ++splits) {
    const double time = double((work_items * splits + resident - 1) / resident) / splits;
    if (time < best_time) best = splits, best_time = time;
  }
  return best;
}

}  // namespace memattn::cuda
