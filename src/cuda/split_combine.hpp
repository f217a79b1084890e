// Split keys: the combine kernel's launch (split_combine.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/fwd_params.hpp"
#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn::cuda {

// Merges the p.num_splits parts in p.partial_out / p.partial_lse into p.out (of `dtype`, bf16 or
// fp16) and p.lse (when set), on `stream`, after the forward kernel that wrote them.
Status launch_split_combine(const FwdParams& p, DType dtype, cudaStream_t stream);

}  // namespace memattn::cuda
