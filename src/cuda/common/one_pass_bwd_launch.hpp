// Host side of the one-pass backward (one_pass_bwd_kernel.hpp): one CTA per key tile, or one
// cluster of kHeadSplit CTAs per key tile for the rows that split the head dim (sm_90).
#pragma once

#include "cuda/common/bwd_launch.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/launch.hpp"
#include "cuda/common/one_pass_bwd_kernel.hpp"

namespace memattn::cuda {

template <class Traits, unsigned kFeatures>
constexpr int kOnePassBwdSmemBytes = int(sizeof(OnePassBwdSharedStorage<Traits, kFeatures>));

// The one-pass rows (one_pass_bwd_kernel.hpp), with the split tiles' arrival counts zeroed first.
// The wgmma rows stage dQ swizzled and add it as one block (GradAccum::swizzled) where the
// workspace's rows are the tile's width.
template <class Traits, unsigned kFeatures>
Status launch_backward_one_pass(const BwdParams& params, cudaStream_t stream) {
  BwdParams p = params;
  p.dq_accum.swizzled = Traits::Gemms::kBulkDq && p.dq_accum.ld == Traits::kHeadDim;
  return launch_backward_dq_atomics<typename Traits::Element>(p, stream, [&] {
    if (Status s = clear_split_counts(p, stream); !s.ok()) return s;
    return launch_split(one_pass_bwd_kernel<Traits, kFeatures>, Traits::kThreads, kOnePassBwdSmemBytes<Traits, kFeatures>,
                        Traits::kHeadSplit, p.kv_work_items, 0, p, stream);
  });
}

template <class Traits, unsigned kFeatures>
Status backward_one_pass_resources(KernelResources* r) {
  return resources(one_pass_bwd_kernel<Traits, kFeatures>, Traits::kThreads, kOnePassBwdSmemBytes<Traits, kFeatures>, r);
}

}  // namespace memattn::cuda
