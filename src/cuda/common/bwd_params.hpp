// The backward kernels' parameters: everything the forward reads (FwdParams, whose `out` is the
// forward's output O and `lse` its LSE) plus dO, the gradients and the delta workspace.
#pragma once

#include <cstdint>

#include "core/philox.hpp"  // MEMATTN_HD
#include "cuda/common/fwd_params.hpp"

namespace memattn::cuda {

// A gradient's fp32 accumulator in the workspace (rows that need no tensor-core fragment order),
// head-major: element (b, row, h, c) at ((b * heads + h) * rows + row) * ld + c, ld a whole number
// of chunks, so that the rows of one head follow each other ld floats apart (a tile of a head's
// rows is one block when ld is the tile's width: the one-pass rows add dQ to it at constant
// offsets, one_pass_bwd_kernel.hpp).
// `swizzled`: within each 256-byte group of a row, row r's 32-byte granules lie XOR (r % 8) (row
// r of its (b, h)): the wgmma one-pass rows stage dQ that way, conflict-free, and add the staged
// tile as one block (only with ld a multiple of 64).
struct GradAccum {
  float* data;
  std::int64_t batch, rows, heads, ld;
  bool swizzled = false;
};

// The XOR on the column index of row `row` (of its (b, h)) in a swizzled GradAccum: its 32-byte
// granules (8 floats) permuted by row % 8 within each 256-byte group. The one-pass kernel's dQ
// stage and the conversion kernel both use it.
MEMATTN_HD int accum_swizzle(std::int64_t row) { return int(row & 7) << 3; }

struct BwdParams : FwdParams {
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  void* dbias;  // null unless asked for; the bias's strides (dense: no broadcast dimension)
  std::int64_t do_batch_stride, do_row_stride, do_head_stride;
  std::int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  std::int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  std::int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
  std::int64_t dbias_batch_stride, dbias_head_stride, dbias_row_stride, dbias_col_stride;
  std::int64_t dbias_sizes[4];
  // dbias with broadcast dimensions: dS is summed in an fp32 workspace first, then written by
  // reduce_dbias_kernel. By default the dQ kernel adds into a workspace of dbias's reduced shape
  // with atomics (strides 0 along the summed dimensions); with `deterministic` it stores every dS
  // into a workspace of the full [B, Hq, Mq, Mk] shape and the reduction sums in a fixed order.
  float* dbias_accum;  // null: dS goes straight to dbias (no broadcast dimension)
  bool dbias_atomic;
  std::int64_t dbias_reduced_sizes[4];  // dbias's distinct elements: 1 along summed dimensions
  std::int64_t dbias_accum_sizes[4];    // the workspace's shape (compact, row-major)
  std::int64_t dbias_accum_strides[4];  // where the dQ kernel puts dS (b, h, query, key)
  // A dense 16-bit dbias with unit column stride and 16-byte aligned rows, on a kBiasTile row: the
  // dQ kernel stages each tile's dS in the bias tile's shared memory and writes 16 bytes at a time.
  bool dbias_tile;
  // dbias elements that no gradient kernel writes (the tiles a mask skips, the pairs across
  // variable-length sequences) are zeroed before the kernels run: dbias_zero. Without a mask or
  // variable lengths every element is written, and the zeroing (a second pass over a dense
  // [B, H, M, M] dbias) is skipped. A dbias that fills its memory without gaps is zeroed by one
  // memset of dbias_dense_bytes bytes (0: element by element).
  bool dbias_zero;
  std::int64_t dbias_dense_bytes;
  // delta = rowsum(dO * O), fp32 [batch][heads_q][rows of q] with rows_per_batch = q.sizes[1].
  float* delta;
  std::int64_t delta_rows;  // rows per (batch, head): the tensors' M dimension
  GradAccum dq_accum, dk_accum, dv_accum;  // SIMT (FFMA) global-accumulator rows
  // Tensor-core global-accumulator rows: one fp32 slot per resident CTA (dK and dV chunks of a key
  // tile; dQ chunks of a query tile, in MMA-fragment order); the dK/dV grid is capped at
  // kv_grid_ctas CTAs and the dQ grid at grid_ctas. The Hopper backward's persistent grid is
  // kv_grid_ctas CTAs too.
  float* dkdv_slots;
  float* dq_slots;
  std::int64_t dkdv_slot_elems, dq_slot_elems, kv_grid_ctas;
  int num_n_blocks;         // key tiles per (sequence, kv head)
  std::int64_t num_kv_blocks;  // num_n_blocks * heads_k * batch: the work items of dK/dV
  std::int64_t kv_work_groups;  // the same for the (sequence, kv head) pairs of the key tiles
  // The one-pass rows' work items (tail_split.hpp): the key tiles before kv_split_first whole,
  // then each later tile as kv_split_parts items (its parts, one after another); kv_work_items in
  // all. The parts but the last store their dK and dV partial sums in slot
  // (tile - kv_split_first) * (kv_split_parts - 1) + part of kv_split_sums (dK then dV, each
  // block_n x head-dim bucket floats in the accumulators' fragment order) and count themselves
  // in kv_split_arrivals[tile - kv_split_first] (zeroed before the launch).
  std::int64_t kv_work_items;
  std::int64_t kv_split_first;
  int kv_split_parts;
  float* kv_split_sums;
  int* kv_split_arrivals;
  // The Hopper backward's work items past the first kv_grid_ctas, drawn by its CTAs as they finish
  // one (sm90/bwd/tile_scheduler.hpp): how many have been drawn (zeroed before the launch).
  unsigned long long* kv_items_drawn;
  // `deterministic` on the Hopper backward (sm90/bwd/dq_writer.hpp): per (batch, query head, query
  // tile of the kernel's block_m rows) the last key tile whose dQ reduction into it has landed,
  // plus one, [batch][heads_q][dq_order_tiles], zeroed before the launch; null otherwise.
  int* dq_order;
  std::int64_t dq_order_tiles;
};

}  // namespace memattn::cuda
