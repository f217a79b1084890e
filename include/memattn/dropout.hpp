// The dropout mask, exactly as every backend computes it.
//
// Counter-based Philox4x32-10 (Salmon et al., SC'11), key = seed (low word first), and a 128-bit
// counter made of four 32-bit words:
//   c0 = j / 4,   c1 = i,   c2 = b * Hq + h,   c3 = offset
// where b is the batch (or varlen sequence) index, h the query head, i the query row and j the key
// row, both local to the sequence. The four outputs r0..r3 of one Philox call serve the keys
// 4*c0 .. 4*c0+3: key j uses r[j % 4]. Element (b, h, i, j) is kept iff r[j % 4] >= t, where
// t = dropout_threshold(p) = min(round(p * 2^32), 2^32 - 1). Kept values are scaled by 1 / (1 - p).
// Limits that keep the mapping one-to-one: Mk <= 2^34, Mq <= 2^32, B * Hq <= 2^32, offset < 2^32.
#pragma once

#include <cstdint>

namespace memattn {

std::uint32_t dropout_threshold(double p);

// Philox4x32-10 on (counter, key); writes 4 words to out.
void philox4x32_10(const std::uint32_t counter[4], const std::uint32_t key[2], std::uint32_t out[4]);

// The keep decision for one element.
bool dropout_keep(std::uint64_t seed, std::uint64_t offset, std::int64_t b, std::int64_t h,
                  std::int64_t heads_q, std::int64_t i, std::int64_t j, double p);

}  // namespace memattn
