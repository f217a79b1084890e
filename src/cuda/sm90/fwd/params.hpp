// The Hopper forward's parameters: the forward's plain parameters and the tensor maps of Q, K, V
// (and the bias, on the rows with one) that its TMA loads name (tma_map.hpp), built on the host at each launch and passed by value as
// one __grid_constant__ kernel parameter (a tensor map must sit in parameter, constant or global
// memory).
#pragma once

#include <cuda.h>

#include "cuda/common/fwd_params.hpp"

namespace memattn::cuda::sm90 {

struct TmaFwdParams {
  FwdParams p;
  CUtensorMap q, k, v;  // 4-d: (head dim, rows, heads, batch); boxes of 64 columns (tma_map.hpp)
  // The bias as (keys, queries, heads, batch), a broadcast head or batch dimension as one of size 1
  // (read at coordinate 0: FwdParams's bias stride of 0 says which); boxes of 64 keys x the query tile.
  CUtensorMap bias;
  // The output's map (boxes of a consumer warpgroup's 64 rows), where the epilogue stores by TMA
  // (o_by_tma: fixed lengths and an output a map describes; epilogue.hpp).
  CUtensorMap o;
  bool o_by_tma;
};

}  // namespace memattn::cuda::sm90
