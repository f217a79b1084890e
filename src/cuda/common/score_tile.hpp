// Where a tile of scores sits in its (sequence, head) and which (query, key) each of its elements
// is: the vocabulary the score transform (score_mods.hpp), dropout (dropout.hpp) and the backward's
// gradient step share. Elements are addressed through a coordinate tensor partitioned like the
// accumulator, so this works for any fragment layout.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

namespace memattn::cuda {

using namespace cute;

// Where one tile of scores sits: sequence b (the b of bias and dropout), query head h, query rows
// from m0 and key columns from n0 (local to the sequence), and the valid extents.
struct TileOrigin {
  int b, h;
  std::int64_t m0, n0;
  std::int64_t q_len, k_len;
};

// Which way round a tile of scores is: rows of queries (S = Q K^T: the forward and the dQ side of
// the backward; coordinates (query, key)) or rows of keys (S^T = K Q^T: the backward's dK/dV
// kernels, whose results are then already the A operands of dV and dK; coordinates (key, query)).
enum class ScoreRows { queries, keys };

// The (query, key) position of element e of a tile of kScoreRows.
template <ScoreRows kScoreRows, class Coords>
__device__ __forceinline__ void query_key(const TileOrigin& t, const Coords& coord, int e, std::int64_t* i,
                                          std::int64_t* j) {
  constexpr bool kKeyRows = kScoreRows == ScoreRows::keys;
  *i = t.m0 + (kKeyRows ? get<1>(coord(e)) : get<0>(coord(e)));
  *j = t.n0 + (kKeyRows ? get<0>(coord(e)) : get<1>(coord(e)));
}

// The same within the tile: query row r and key column c of element e (a shared bias tile's
// element, whichever way round the scores are).
template <ScoreRows kScoreRows, class Coords>
__device__ __forceinline__ void tile_row_col(const Coords& coord, int e, int* r, int* c) {
  constexpr bool kKeyRows = kScoreRows == ScoreRows::keys;
  *r = kKeyRows ? get<1>(coord(e)) : get<0>(coord(e));
  *c = kKeyRows ? get<0>(coord(e)) : get<1>(coord(e));
}

}  // namespace memattn::cuda
