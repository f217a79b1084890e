// Host side of the Hopper forward (16-bit and fp32 rows): the tensor maps of Q, K, V (and the
// bias), the work items' counter cleared, the launch on the persistent grid the scheduler sized (one CTA per SM,
// at most one per work item), and the resource report.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/fwd_common.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm90/fwd/kernel.hpp"
#include "cuda/sm90/fwd/tf32x3_kernel.hpp"
#include "cuda/sm90/tma_map.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm90 {

// The fp32 rows (Tf32x3FwdTraits) have a kernel and shared memory of their own (tf32x3_kernel.hpp).
template <class Traits>
inline constexpr bool kTf32x3Forward = std::is_same_v<typename Traits::Element, float>;

template <class Traits>
constexpr int fwd_smem_bytes() {
  if constexpr (kTf32x3Forward<Traits>) return int(sizeof(Tf32x3FwdStorage<Traits>));
  else return int(sizeof(FwdSharedStorage<Traits>));
}

template <class Traits>
constexpr auto fwd_kernel() {
  if constexpr (kTf32x3Forward<Traits>) return forward_tf32x3_kernel<Traits>;
  else return forward_kernel<Traits>;
}

// The maps of Q, K and V as the producer addresses them: (column, row, head, batch), a packed
// variable-length batch as one batch of all its rows. A box past the tensor's rows arrives as zeros;
// one past a packed sequence's keys brings in the next rows, whose V the consumers zero
// (mainloop.hpp's zero_v_rows).
template <class Traits>
Status forward_tensor_maps(const FwdParams& p, TmaFwdParams* tp) {
  using Element = typename Traits::Element;
  constexpr DType kDType = std::is_same_v<Element, cute::bfloat16_t> ? DType::bf16
                           : std::is_same_v<Element, cute::half_t>   ? DType::f16
                                                                     : DType::f32;
  const bool varlen = p.seqstart_q != nullptr;
  if (varlen && kTf32x3Forward<Traits>)
    return {StatusCode::internal_error, "sm90 forward: a variable-length problem reached a 3xTF32 TMA row"};
  const std::int64_t q_rows = varlen ? p.packed_q : p.seqlen_q, k_rows = varlen ? p.packed_k : p.seqlen_k;
  const std::int64_t batch = varlen ? 1 : p.batch;
  const TmaTensor q{p.q, kDType, p.head_dim, q_rows, p.heads_q, batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride};
  const TmaTensor k{p.k, kDType, p.head_dim, k_rows, p.heads_k, batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride};
  const TmaTensor v{p.v, kDType, p.head_dim_v, k_rows, p.heads_k, batch,
                    p.v_row_stride, p.v_head_stride, p.v_batch_stride};
  if (Status s = make_tma_map(q, Traits::kBlockM, &tp->q); !s.ok()) return s;
  if (Status s = make_tma_map(k, Traits::kBlockN, &tp->k); !s.ok()) return s;
  if (Status s = make_tma_map(v, Traits::kBlockN, &tp->v); !s.ok()) return s;
  // The output by TMA where its rows are one sequence's per (head, batch) and a map describes it
  // (epilogue.hpp); the fp32 rows' output goes by the threads' stores.
  const TmaTensor o{p.out, kDType, p.head_dim_v, p.seqlen_q, p.heads_q, p.batch,
                    p.o_row_stride, p.o_head_stride, p.o_batch_stride};
  tp->o_by_tma = !varlen && !kTf32x3Forward<Traits> && tma_describable(o);
  if (tp->o_by_tma)
    if (Status s = make_tma_map(o, kWarpgroupRows, &tp->o); !s.ok()) return s;
  if constexpr (Traits::kBiasTile) {
    // (keys, queries, heads, batch); a broadcast dimension (stride 0) as one of size 1.
    if (p.bias == nullptr || p.bias_is_f32 || p.bias_col_stride != 1)
      return {StatusCode::internal_error, "sm90 forward: a bias that no tensor map describes reached a bias row"};
    const TmaTensor bias{p.bias, kDType, p.seqlen_k, p.bias_row_stride != 0 ? p.seqlen_q : 1,
                         p.bias_head_stride != 0 ? p.heads_q : 1, p.bias_batch_stride != 0 ? p.batch : 1,
                         p.bias_row_stride, p.bias_head_stride, p.bias_batch_stride};
    return make_tma_map(bias, Traits::kBlockM, &tp->bias);
  }
  return Status::Ok();
}

// The rows with a bias (kBias | kBiasTile) run the kernel of FwdBiasTraits<Traits>, those with
// dropout (kDropout | kDropoutPaired) FwdDropoutTraits<Traits>'s.
template <class Traits, unsigned kFeatures>
using FwdRowTraits =
    std::conditional_t<tiles_bias(kFeatures), FwdBiasTraits<Traits>,
                       std::conditional_t<(kFeatures & kDropout) != 0, FwdDropoutTraits<Traits>, Traits>>;

template <class Row, unsigned kFeatures>
Status launch_forward(const FwdParams& p, cudaStream_t stream) {
  static_assert(kFeatures == kPlain || kFeatures == (kBias | kBiasTile) || kFeatures == (kDropout | kDropoutPaired),
                "the Hopper forward takes a bias tile, dropout or nothing");
  using Traits = FwdRowTraits<Row, kFeatures>;
  TmaFwdParams tp{};
  tp.p = p;
  if (Status s = forward_tensor_maps<Traits>(p, &tp); !s.ok()) return s;
  if (p.items_drawn == nullptr)
    return {StatusCode::internal_error, "sm90 forward: no workspace for the work items' counter"};
  if (Status s = cuda_status(cudaMemsetAsync(p.items_drawn, 0, sizeof(*p.items_drawn), stream), "work items' counter");
      !s.ok())
    return s;
  // p.grid_ctas: the resident CTAs (schedule.cpp), one per SM.
  return launch_grid(fwd_kernel<Traits>(), Traits::kThreads, fwd_smem_bytes<Traits>(), p.num_blocks, p.grid_ctas, tp,
                     stream);
}

template <class Row, unsigned kFeatures>
Status forward_resources(KernelResources* r) {
  using Traits = FwdRowTraits<Row, kFeatures>;
  return resources(fwd_kernel<Traits>(), Traits::kThreads, fwd_smem_bytes<Traits>(), r);
}

}  // namespace memattn::cuda::sm90
