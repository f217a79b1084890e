// Which key tiles a query tile walks, and which of them need the per-element mask: the forward's
// trip counts from the mask (every key tile outside [first, last] is skipped; those inside
// [full_lo, full_hi] are fully visible, with no key past the sequence, and take no mask code).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "core/philox.hpp"  // MEMATTN_HD

namespace memattn::cuda {

// What a key tile of the forward needs (kernels walk each kind in a loop of its own, so that the
// tiles inside the window carry no mask code): the per-element mask (the tiles at the edges of the
// window, and past the keys), or none, with the softmax scale applied to the scores first or in
// the softmax's exp2 FFMA.
enum class KeyTile { masked, unmasked, unmasked_scale_in_softmax };
template <KeyTile kKind>
using KeyTileKind = std::integral_constant<KeyTile, kKind>;

struct KeyTiles {
  int first, last;       // the key tiles any of the rows sees
  int full_lo, full_hi;  // those every row sees whole (empty when full_lo > full_hi)
};

// The key tiles of kBlockN keys that query rows [m0, m0 + rows) see under `rule` (whose k_len is
// the sequence's keys); false when they see no key at all. Host and device (test_key_tiles checks
// it against every pair); the kernels call it through tile_scheduler.hpp's key_tiles(p, seq, ...).
template <int kBlockN>
MEMATTN_HD bool key_tiles(const detail::MaskRule& rule, std::int64_t m0, int rows, KeyTiles* t) {
  std::int64_t key_begin = 0, key_end = 0;
  rule.key_range(m0, m0 + rows, &key_begin, &key_end);
  if (key_begin >= key_end) return false;
  t->first = int(key_begin / kBlockN);
  t->last = int((key_end - 1) / kBlockN);
  const std::int64_t lo = rule.first_key(m0 + rows - 1);  // tile_visible: first_key(i1 - 1) <= j0
  const std::int64_t hi = rule.end_key(m0);  // j1 <= end_key(i0), which is at most k_len
  t->full_lo = int((lo + kBlockN - 1) / kBlockN);
  t->full_hi = int(hi / kBlockN) - 1;
  return true;
}

}  // namespace memattn::cuda
