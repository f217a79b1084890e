// How each step's dQ tile leaves the Hopper backward's consumer warpgroups (mainloop.hpp) for the
// fp32 workspace: by bulk reductions (cp.reduce.async.bulk) from one of two shared-memory stages.
//
// DqAdds::any_order (the default): the consumers' first thread issues a step's reduction at the
// next step's barrier, where every thread's part is staged, and waits for its reads before the
// barrier after that, so that the stage is written again only once it has been read.
//
// DqAdds::key_tile_order (`deterministic`): the tile is handed to the dQ writer, a warp of the
// producer warpgroup (dq_writer.hpp), which waits for the tile's turn. The stages alternate with
// every tile, across work items too, and the writer walks the work items' steps itself, so a
// stage is all that is handed over: `full` completes when every consumer thread has staged its
// part (each arrives after fencing its stores for the bulk copy's proxy), `empty` once the
// writer's reduction has read the stage, which the consumers' first thread waits for before the
// step's barrier. Doing the ordering's bookkeeping in the consumer loop instead made ptxas spill
// there (180 -> 450 bytes at D = 64; 0.68-0.73x the default's speed). The default keeps the first
// way: with the writer it measured 1-5% slower (H200, every suite shape at D = 64 and 128).
#pragma once

#include <cstdint>

#include "cuda/sm90/bulk_reduce.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

enum class DqAdds { any_order, key_tile_order };

inline constexpr int kDqStages = 2;

// One staged tile of `rows` query rows added at dst: one bulk reduction where the workspace's rows
// (ld floats apart) are the tile's width (its tile is one block, laid out as the stage), else one
// per row.
template <int kHeadDim>
__device__ __forceinline__ void add_dq_tile(float* dst, int rows, const float* stage, std::int64_t ld) {
  if (ld == kHeadDim) {
    bulk_reduce_add(dst, stage, rows * kHeadDim * int(sizeof(float)));
  } else {
    for (int r = 0; r < rows; ++r) bulk_reduce_add(dst + r * ld, stage + r * kHeadDim, int(ld * sizeof(float)));
  }
}

// The stages' barriers between the consumers and the writer (key_tile_order).
struct DqHandoff {
  RingBarriers<kDqStages> barriers;
  // By one thread, before the CTA's first barrier: `full` takes every consumer thread's arrival,
  // `empty` the writer's.
  __device__ void init(int consumer_threads) { barriers.init(1, consumer_threads); }
};

// DqAdds::any_order, a work item's (a fresh one per item).
struct DqFromConsumers {
  float* dst = nullptr;  // the staged tile's
  int rows = 0;          // 0: nothing staged
  int buf = 0;

  // By every consumer thread; tid: its index, rebuilt per step (mainloop.hpp).
  __device__ __forceinline__ void before_barrier(DqHandoff&, int tid) const {
    if (tid == 0) wait_bulk_reads();  // the reduction issued a step ago has read this step's stage
  }
  // After a barrier (the item's last too): the last step's tile.
  template <int kHeadDim, class Stages>
  __device__ __forceinline__ void issue(const Stages& stages, std::int64_t ld, int tid) const {
    if (tid == 0 && rows != 0) add_dq_tile<kHeadDim>(dst, rows, stages[buf], ld);
  }
  __device__ __forceinline__ int stage(int step) const { return step & 1; }
  __device__ __forceinline__ void staged(DqHandoff&) {}
  __device__ __forceinline__ void step_done(float* tile_dst, int tile_rows, int step) {
    dst = tile_dst;
    rows = tile_rows;
    buf = step & 1;
  }
};

// DqAdds::key_tile_order, the CTA's (its stages alternate across work items).
struct DqToWriter {
  RingPosition<kDqStages> at;

  __device__ __forceinline__ void before_barrier(DqHandoff& h, int tid) const {
    if (tid == 0) h.barriers.wait_free(at);  // the writer has read the stage
  }
  template <int kHeadDim, class Stages>
  __device__ __forceinline__ void issue(const Stages&, std::int64_t, int) const {}
  __device__ __forceinline__ int stage(int) const { return at.stage; }
  // After the thread's stores into the stage and their proxy fence: to the writer.
  __device__ __forceinline__ void staged(DqHandoff& h) {
    h.barriers.arrive(at);
    at.advance();
  }
  __device__ __forceinline__ void step_done(float*, int, int) {}
};

// The way a step's dQ leaves: to the writer (key_tile_order), else from the consumers.
template <DqAdds kAdds>
__device__ __forceinline__ auto& dq_route(DqToWriter& to_writer, DqFromConsumers& from_consumers) {
  if constexpr (kAdds == DqAdds::key_tile_order) return to_writer;
  else return from_consumers;
}

}  // namespace memattn::cuda::sm90
