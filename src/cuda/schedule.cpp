// Scheduling decisions (schedule.hpp): resident CTAs, the causal work order's groups (sized for
// balance, and for L2 on the wgmma one-pass rows), the last-wave split, the global rows' grids.
#include "cuda/schedule.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/device_info.hpp"
#include "cuda/key_splits.hpp"
#include "cuda/tail_split.hpp"
#include "cuda/workspace.hpp"

namespace memattn::cuda {
namespace {

// CTAs of a row that fit on the current GPU at once. Plans run on every call and the occupancy
// query is not free, so the answer is kept per row and device.
template <class Row>
Status resident_ctas(const Row& k, std::int64_t* ctas) {
  static std::mutex mutex;
  static std::map<std::pair<const Row*, int>, std::int64_t> cache;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find({&k, device}); it != cache.end()) {
    *ctas = it->second;
    return Status::Ok();
  }
  KernelResources r;
  if (Status s = k.resources(&r); !s.ok()) return s;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  *ctas = std::int64_t(sms) * std::max(1, r.blocks_per_sm);
  cache[{&k, device}] = *ctas;
  return Status::Ok();
}

// The work order's groups of (sequence, head) pairs (work_order.hpp, rank_work) for `tiles`
// tiles per pair; 0: one pair after another. Only a causal-type mask (a right bound, no left
// bound) makes the tiles uneven with the heaviest where the order puts them first (the last query
// tiles, the first key tiles). Then a group's work should span every resident CTA with the
// heaviest tile: its tiles average half the heaviest's work, so a group takes at least
// 2 * resident / tiles pairs. In a model of the schedule that puts the suite's causal rows (and
// those of 1.5x the hidden size) within 3.1% of the ideal time, from up to 15%.
// `reused_bytes`: what a pair's CTAs read again from L2 (0: not considered). The pairs of the
// groups in flight share it, and where the balanced group's would overflow half of L2 but a group
// of resident / tiles pairs (the fewest whose heaviest tiles still fill the GPU) fits, the group
// is that: on the wgmma one-pass rows at D = 256 and S = 512 causal the kernel took 0.60 ms with
// the balanced group of 33 pairs (1 MB each: Q, dO and dQ workspace rows), 0.57 with 17 and 0.79
// with 66 (H100); S = 1024 -1.6%, S = 2048 within +-1%; at S = 8192 (16 MB a pair) the balanced
// group stays.
template <class Row>
Status work_groups(const Row& k, const detail::Problem& p, int tiles, std::int64_t pairs, std::int64_t* groups,
                   std::int64_t reused_bytes = 0) {
  *groups = 0;
  if (p.window_right == kUnbounded || p.window_left != kUnbounded || tiles <= 0 || pairs <= 1) return Status::Ok();
  std::int64_t resident = 0;
  if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
  std::int64_t group = (2 * resident + tiles - 1) / tiles;
  if (reused_bytes > 0) {
    const std::int64_t lean = (resident + tiles - 1) / tiles;
    const std::int64_t budget = std::int64_t(device_attribute(cudaDevAttrL2CacheSize)) / 2;
    if (group * reused_bytes > budget && lean * reused_bytes <= budget) group = lean;
  }
  *groups = std::max<std::int64_t>(1, pairs / std::max<std::int64_t>(group, 1));
  return Status::Ok();
}

// The one-pass rows' last wave (tail_split.hpp): only where every key tile is the same work (no
// mask, no variable lengths) and the work items fit one CTA each.
Status choose_tail_split(const BackwardKernel& k, const detail::Problem& p, const BwdParams& b, TailSplit* split) {
  *split = {b.num_kv_blocks, 1};
  if (!k.tail_split || p.is_masked() || p.varlen) return Status::Ok();
  std::int64_t resident = 0;
  if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
  const std::int64_t steps = (p.heads_q / p.heads_k) * ((p.seqlen_q + k.block_m - 1) / k.block_m);
  const TailSplit t = plan_tail_split(b.num_kv_blocks, resident, steps);
  if (t.work_items(b.num_kv_blocks) <= kMaxGridCtas) *split = t;  // one item per CTA: the parts' wait needs it
  return Status::Ok();
}

// Split keys (key_splits.hpp): the parts per query tile, from the resident CTAs (or the row's
// split_ctas_per_sm) and the key tiles a query tile can see (a window bounded on both sides sees
// at most its width).
Status choose_key_splits(const ForwardKernel& k, const detail::Problem& p, const KernelOverrides& overrides,
                         FwdParams* f) {
  f->num_splits = 1;
  if (overrides.num_splits > 1 && !k.split_keys)
    return {StatusCode::invalid_argument,
            "overrides.num_splits = " + std::to_string(overrides.num_splits) + ": kernel " + k.name +
                " cannot split a query tile's keys (the sm80 register forward rows can: bf16/fp16, D and Dv <= 256)"};
  if (!k.split_keys || overrides.num_splits == 1 || f->num_blocks == 0) return Status::Ok();
  if (overrides.num_splits > 1) {
    f->num_splits = overrides.num_splits;
  } else {
    std::int64_t keys = p.seqlen_k;
    if (p.window_left != kUnbounded && p.window_right != kUnbounded)
      keys = std::min(keys, p.window_left + p.window_right + k.block_m + k.block_n);
    std::int64_t resident = 0;
    if (k.split_ctas_per_sm > 0)
      resident = std::int64_t(device_attribute(cudaDevAttrMultiProcessorCount)) * k.split_ctas_per_sm;
    else if (Status s = resident_ctas(k, &resident); !s.ok())
      return s;
    f->num_splits = plan_key_splits(f->num_blocks, resident, (keys + k.block_n - 1) / k.block_n);
  }
  f->num_blocks *= f->num_splits;
  return Status::Ok();
}

// Deterministic on the Hopper backward (sm90/bwd/dq_writer.hpp): key tile n adds into each query
// tile after tile n - 1's reduction there has landed, and both walk their query tiles downwards
// from the last (tile_scheduler.hpp), so tile n must start a little after tile n - 1. The work
// order gives it that lead: rank by rank across a group of pairs, tile n of a pair is drawn a
// group's worth of items after tile n - 1, that is group * item_steps / resident steps later
// while `resident` CTAs each finish an item of item_steps steps. Groups for a step of lead, two
// under a mask (its light last tiles are drawn in quick succession). H200, bf16, against the
// default's speed: 0.96-1.00x unmasked, causal 0.92-0.96x (S = 2048 to 16384; a lead of 3 the
// same, 6 lost 3-7% at S = 2048 as the rows a group rereads outgrow L2). One group of every pair
// left every read to memory (0.66-0.72x); one pair after another, whose tiles start together
// and then wait on each other, ran at 0.02-0.5x.
std::int64_t deterministic_work_groups(const BackwardKernel& k, const detail::Problem& p, std::int64_t resident) {
  const std::int64_t pairs = p.batch * p.heads_k;
  const std::int64_t q_tiles = (p.seqlen_q + k.block_m - 1) / k.block_m;
  const bool masked = p.window_right != kUnbounded || p.window_left != kUnbounded;
  const std::int64_t item_steps = std::max<std::int64_t>(1, q_tiles * p.group_size() / (masked ? 2 : 1));
  const std::int64_t lead = masked ? 2 : 1;
  const std::int64_t group = std::max<std::int64_t>(1, (lead * resident + item_steps - 1) / item_steps);
  return std::max<std::int64_t>(1, pairs / group);
}

}  // namespace

Status schedule_forward(const ForwardKernel& k, const detail::Problem& p, const KernelOverrides& overrides,
                        FwdParams* f) {
  if (Status s = work_groups(k, p, f->num_m_blocks, p.batch * p.heads_q, &f->work_groups); !s.ok()) return s;
  if (Status s = choose_key_splits(k, p, overrides, f); !s.ok()) return s;
  if (k.accumulator != Accumulator::global && !k.tma) return Status::Ok();
  // Persistent grids, whose CTAs take the work items in turn: one workspace slot (the output
  // accumulator of one query tile) per resident CTA in the global-accumulator rows; one CTA per
  // SM in the TMA rows, whose producer draws the next item from a counter and loads its tiles
  // during the last one's epilogue.
  std::int64_t resident = 0;
  if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
  f->grid_ctas = std::min(f->num_blocks, resident);
  return Status::Ok();
}

Status schedule_backward(const BackwardKernel& k, const detail::Problem& p, const KernelOverrides& overrides,
                         bool deterministic, BwdParams* b) {
  // The wgmma one-pass rows' CTAs read their pair's Q, dO and dQ workspace rows at every key tile
  // (the mma.sync one-pass rows gained nothing from the smaller group at D = 64 and 128).
  const std::int64_t reused = k.atomics && k.math == Math::wgmma && overrides.l2_sized_groups
                                  ? (p.heads_q / p.heads_k) * p.seqlen_q *
                                        ((p.head_dim + p.head_dim_v) * std::int64_t(dtype_size(p.dtype)) +
                                         accum_ld(p.head_dim) * 4)
                                  : 0;
  if (Status s = work_groups(k, p, b->num_n_blocks, p.batch * p.heads_k, &b->kv_work_groups, reused); !s.ok())
    return s;
  if (Status s = work_groups(k, p, b->num_m_blocks, p.batch * p.heads_q, &b->work_groups); !s.ok()) return s;
  TailSplit split{b->num_kv_blocks, 1};  // every key tile whole
  if (overrides.split_last_wave)
    if (Status s = choose_tail_split(k, p, *b, &split); !s.ok()) return s;
  b->kv_split_first = split.first;
  b->kv_split_parts = split.parts;
  b->kv_work_items = split.work_items(b->num_kv_blocks);
  if (k.tma) {
    // Persistent: one CTA per SM, each drawing the next work item as it finishes one, so that the
    // next item's Q and dO load during the last one's final steps.
    std::int64_t resident = 0;
    if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
    if (deterministic) b->kv_work_groups = deterministic_work_groups(k, p, resident);
    b->kv_grid_ctas = std::min(b->kv_work_items, resident);
  }
  if (gradient_store(k) == GradientStore::cta_slots) {
    // One dK/dV slot and one dQ slot per resident CTA (the workspace's); the CTAs take the key
    // tiles, then the query tiles, in turn.
    std::int64_t resident = 0;
    if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
    b->kv_grid_ctas = std::min(b->num_kv_blocks, resident);
    b->grid_ctas = std::min(b->num_blocks, resident);
  }
  return Status::Ok();
}

}  // namespace memattn::cuda
