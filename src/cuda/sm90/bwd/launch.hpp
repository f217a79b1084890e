// Host side of the Hopper backward: the tensor maps of Q, K, V and dO, the launch between the
// delta kernel (which zeroes the dQ workspace) and the dQ conversion, and the resource report.
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>

#include "cuda/common/bwd_launch.hpp"
#include "cuda/common/fwd_common.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/sm90/bwd/kernel.hpp"
#include "cuda/sm90/tma_map.hpp"
#include "memattn/status.hpp"

namespace memattn::cuda::sm90 {

template <class Traits>
constexpr int kBwdSmemBytes = int(sizeof(BwdSharedStorage<Traits>));

// The maps as the producer addresses them: (column, row, head, batch), a packed variable-length
// batch as one batch of all its rows. A box past the tensor's rows or the head dim arrives as
// zeros; one past a packed sequence's rows brings in the next rows, which the kernel zeroes
// (producer.hpp: Q and dO; mainloop.hpp: K and V).
template <class Traits>
Status backward_tensor_maps(const BwdParams& p, TmaBwdParams* tp) {
  constexpr DType kDType = std::is_same_v<typename Traits::Element, cute::bfloat16_t> ? DType::bf16 : DType::f16;
  const bool varlen = p.seqstart_q != nullptr;
  const std::int64_t q_rows = varlen ? p.packed_q : p.seqlen_q, k_rows = varlen ? p.packed_k : p.seqlen_k;
  const std::int64_t batch = varlen ? 1 : p.batch;
  const TmaTensor q{p.q, kDType, p.head_dim, q_rows, p.heads_q, batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride};
  const TmaTensor dout{p.dout, kDType, p.head_dim_v, q_rows, p.heads_q, batch,
                       p.do_row_stride, p.do_head_stride, p.do_batch_stride};
  const TmaTensor k{p.k, kDType, p.head_dim, k_rows, p.heads_k, batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride};
  const TmaTensor v{p.v, kDType, p.head_dim_v, k_rows, p.heads_k, batch,
                    p.v_row_stride, p.v_head_stride, p.v_batch_stride};
  if (Status s = make_tma_map(q, Traits::kBlockM, &tp->q); !s.ok()) return s;
  if (Status s = make_tma_map(dout, Traits::kBlockM, &tp->dout); !s.ok()) return s;
  if (Status s = make_tma_map(k, Traits::kBlockN, &tp->k); !s.ok()) return s;
  return make_tma_map(v, Traits::kBlockN, &tp->v);
}

// The rows with dropout (kDropout | kDropoutPaired) run the kernel of BwdDropoutTraits<Row>.
template <class Row, unsigned kFeatures>
using BwdRowTraits = std::conditional_t<(kFeatures & kDropout) != 0, BwdDropoutTraits<Row>, Row>;

template <class Row, unsigned kFeatures>
Status launch_backward(const BwdParams& params, cudaStream_t stream) {
  using Traits = BwdRowTraits<Row, kFeatures>;
  static_assert(Traits::kFeatures == kFeatures, "the Hopper backward takes plain problems or dropout");
  static_assert(sizeof(BwdSharedStorage<Traits>) <= kSmemPerCta);
  BwdParams p = params;
  p.dq_accum.swizzled = p.dq_accum.ld == Traits::kHeadDim;  // the stage is the workspace's tile
  TmaBwdParams tp{};
  tp.p = p;
  if (Status s = backward_tensor_maps<Traits>(p, &tp); !s.ok()) return s;
  return launch_backward_dq_atomics<typename Traits::Element>(p, stream, [&] {
    if (Status s = clear_split_counts(p, stream); !s.ok()) return s;
    const std::size_t order_bytes =
        p.dq_order != nullptr ? std::size_t(p.batch) * std::size_t(p.heads_q) * std::size_t(p.dq_order_tiles) * sizeof(int)
                              : 0;
    if (Status s = cuda_status(cudaMemsetAsync(p.kv_items_drawn, 0, sizeof(*p.kv_items_drawn) + order_bytes, stream),
                               "work items' counter and dQ order counts");
        !s.ok())
      return s;
    // deterministic: the kernel that adds dQ in key-tile order (dq_writer.hpp)
    const auto kernel = p.dq_order != nullptr ? backward_kernel<Traits, DqAdds::key_tile_order>
                                              : backward_kernel<Traits, DqAdds::any_order>;
    return launch_grid(kernel, Traits::kThreads, kBwdSmemBytes<Traits>, p.kv_work_items,
                       p.kv_grid_ctas, tp, stream);
  });
}

template <class Row, unsigned kFeatures>
Status backward_resources(KernelResources* r) {
  using Traits = BwdRowTraits<Row, kFeatures>;
  return resources(backward_kernel<Traits, DqAdds::any_order>, Traits::kThreads, kBwdSmemBytes<Traits>, r);
}

}  // namespace memattn::cuda::sm90
