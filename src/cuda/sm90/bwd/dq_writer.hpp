// `deterministic` on the Hopper backward: the dQ writer, one thread of the producer warpgroup's
// third warp, adds the staged dQ tiles (dq_out.hpp, DqAdds::key_tile_order) to the fp32 workspace
// in key-tile order.
//
// A query tile's dQ is the sum of the bulk reductions that the key tiles seeing it add, and fp32
// addition is not associative: for bit-identical gradients run after run they must land in one
// order, the key tiles'. Each query tile (b, h, i) has a word in the workspace (zeroed before the
// launch) that names the last key tile whose reduction into it has landed, plus one: key tile n
// waits until it reads n (tile n - 1 done), or 0 where n is the first tile whose steps reach query
// tile i, adds, waits for its reduction to land and writes n + 1. The tiles touching a query tile
// are contiguous (the rows seeing a key tile begin and end no earlier than the previous tile's),
// so tile n's predecessor there is n - 1 whenever n - 1's rows reach past the tile's first row:
// one bound per work item decides it for every step. The steps start at query-tile boundaries
// (decode_work_item), so that each reduction covers one counted tile; the rows before the first
// that sees the key tile are masked out (zero dS). The key tiles walk their query tiles downwards
// (KeyTileSteps), so that tile n reaches each query tile at the step tile n - 1 did.
//
// No deadlock however few CTAs run: the work order draws a pair's key tiles in tile order
// (schedule.cpp, deterministic_work_groups) and the CTAs draw the items in index order
// (tile_scheduler.hpp), so an item waits only for items drawn before it, which never wait for it.
// A split tile's parts touch disjoint query tiles.
#pragma once

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/common/bwd_common.hpp"
#include "cuda/common/bwd_params.hpp"
#include "cuda/common/one_pass_bwd_tail_split.hpp"  // load_acquire
#include "cuda/sm90/bwd/dq_out.hpp"
#include "cuda/sm90/bwd/storage.hpp"
#include "cuda/sm90/bwd/tile_scheduler.hpp"

namespace memattn::cuda::sm90 {

// Key tile n_block's turn at each query tile.
template <int kBlockM, int kBlockN>
struct DqTurn {
  std::int64_t previous_rows_end;  // where the rows seeing key tile n_block - 1 end
  int n_block;

  __device__ __forceinline__ DqTurn(const detail::MaskRule& rule, const SequenceInfo& seq, int n) : n_block(n) {
    std::int64_t begin = 0, end = 0;
    if (n > 0) {
      const std::int64_t j0 = std::int64_t(n - 1) * kBlockN;
      rule.query_range(j0, j0 + kBlockN, seq.q_len, &begin, &end);
    }
    previous_rows_end = end;
  }

  // Waits for the turn at the query tile from row m0 of head h of sequence b, adds the staged
  // tile, and names this key tile once the reduction has landed.
  template <int kHeadDim>
  __device__ __forceinline__ void add(const BwdParams& p, int b, const SequenceInfo& seq, int h, std::int64_t m0,
                                      const float* stage) const {
    int* word = p.dq_order + (std::int64_t(b) * p.heads_q + h) * p.dq_order_tiles + m0 / kBlockM;
    const int turn = m0 < previous_rows_end ? n_block : 0;
    while (load_acquire(word) != turn) __nanosleep(32);
    asm volatile("fence.proxy.async.global;" ::: "memory");  // the reduction (async proxy) after the acquire
    const int rows = int(min(std::int64_t(kBlockM), seq.q_len - m0));
    add_dq_tile<kHeadDim>(accum_row(p.dq_accum, seq.batch, seq.q_begin + m0, h), rows, stage, p.dq_accum.ld);
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(word), "r"(n_block + 1) : "memory");
  }
};

// The writer's loop: each work item the drawer hands this CTA, each of its steps' tiles as the
// consumers hand it over, its stage freed once the reduction has landed.
template <class Traits>
__device__ void write_dq_in_order(const BwdParams& p, BwdSharedStorage<Traits>& s) {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  RingPosition<kDqStages> at;
  for_each_handed_item<kBlockM, kBlockN, DqAdds::key_tile_order>(p, s.items, [&](const BwdWorkItem<kBlockM>& w) {
    const DqTurn<kBlockM, kBlockN> turn(mask_rule(p, w.seq), w.seq, w.tile.n_block);
    constexpr DqAdds kOrder = DqAdds::key_tile_order;
    StepPos step_at = w.steps.template start<kOrder>();
    for (int step = 0; step < w.steps.count; ++step, step_at = w.steps.template after<kOrder>(step_at)) {
      s.dq_handoff.barriers.wait(at);
      turn.template add<kHeadDim>(p, w.tile.b, w.seq, step_at.h, step_at.m0, s.dq[at.stage]);
      s.dq_handoff.barriers.release(at);
      at.advance();
    }
  });
}

}  // namespace memattn::cuda::sm90
