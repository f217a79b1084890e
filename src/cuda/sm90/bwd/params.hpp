// The Hopper backward's parameters: the backward's parameters and the tensor maps of Q, K, V and
// dO that its TMA loads name (tma_map.hpp), built on the host at each launch and passed by value
// as one __grid_constant__ kernel parameter.
#pragma once

#include <cuda.h>

#include "cuda/common/bwd_params.hpp"

namespace memattn::cuda::sm90 {

struct TmaBwdParams {
  BwdParams p;
  CUtensorMap q, k, v, dout;  // 4-d: (head dim, rows, heads, batch); boxes of 64 columns
};

}  // namespace memattn::cuda::sm90
