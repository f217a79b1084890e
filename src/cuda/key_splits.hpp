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
// parts: beyond that the combine reads more than a part's walk saves.
inline constexpr int kMinKeyTilesPerSplit = 2;
inline constexpr int kAutoKeySplits = 64;

// `work_items` CTAs of `key_tiles` key tiles each (the most any tile walks), `resident` CTAs at
// once: the parts per tile that fill the resident CTAs, or 1 when the work items alone do.
constexpr int plan_key_splits(std::int64_t work_items, std::int64_t resident, std::int64_t key_tiles) {
  if (work_items <= 0 || resident <= work_items) return 1;
  std::int64_t splits = (resident + work_items - 1) / work_items;
  if (splits > kAutoKeySplits) splits = kAutoKeySplits;
  if (splits > key_tiles / kMinKeyTilesPerSplit) splits = key_tiles / kMinKeyTilesPerSplit;
  return splits > 1 ? int(splits) : 1;
}

}  // namespace memattn::cuda
