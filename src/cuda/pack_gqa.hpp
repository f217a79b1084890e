// Decoding with grouped heads: the query heads of one kv head as the rows of one problem.
//
// With one query row per sequence, a query tile holds one row: its CTA runs the MMAs of a whole
// tile for it, and each of a kv head's g = Hq / Hk query heads reads that head's K and V again.
// One row sees one key range under any mask, the same for every head, so the call is rewritten
// before planning: q [B, 1, Hq, D] as [B, g, Hk, D] (query head hk * g + r becomes row r of kv
// head hk; out and lse alike, the bias's head dimension split the same way), K and V narrowed to
// the row's keys, and the mask dropped. A tile then holds g rows and K/V are read once per kv
// head. Not with dropout (its mask is keyed by head and row) nor variable lengths. With a KV cache
// (the row is each sequence's last position) only where no window bounds it on the left: it then
// sees every key of its sequence, and the cache is used as it is.
#pragma once

#include "core/problem.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

// Fills *packed and *packed_problem and returns true where the rewrite applies; false otherwise
// (both untouched).
bool pack_gqa_rows(const ForwardArgs& args, const detail::Problem& p, ForwardArgs* packed,
                   detail::Problem* packed_problem);

}  // namespace memattn::cuda
