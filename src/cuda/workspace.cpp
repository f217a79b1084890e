// Workspace planning and layout (workspace.hpp).
#include "cuda/workspace.hpp"

#include <algorithm>
#include <utility>

namespace memattn::cuda {
namespace {

// The bytes a tensor spans when its elements fill them without gaps or overlaps (any order of
// the dimensions), else 0.
std::int64_t dense_bytes(const TensorRef& t) {
  int order[4] = {0, 1, 2, 3};
  const int rank = std::clamp(t.rank, 0, 4);
  for (int i = 1; i < rank; ++i)  // insertion sort by stride (std::sort drew g++'s -Warray-bounds here)
    for (int j = i; j > 0 && t.strides[order[j]] < t.strides[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  std::int64_t expected = 1;
  for (int i = 0; i < rank; ++i) {
    const int d = order[i];
    if (t.sizes[d] == 0) return 0;
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return 0;
    expected *= t.sizes[d];
  }
  return expected * std::int64_t(dtype_size(t.dtype));
}

// dbias over broadcast dimensions goes through an fp32 workspace (BwdParams::dbias_accum): of
// dbias's reduced shape with atomics, or of the full [B, Hq, Mq, Mk] shape when deterministic.
// Returns its size in elements (0: dS is written to dbias directly).
std::int64_t plan_dbias_accum(const detail::Problem& p, bool deterministic, BwdParams* b) {
  const std::int64_t full[4] = {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k};
  for (int d = 0; d < 4; ++d) {
    b->dbias_reduced_sizes[d] = dbias_sums_over(p, d) ? 1 : full[d];
    b->dbias_accum_sizes[d] = deterministic ? full[d] : b->dbias_reduced_sizes[d];
  }
  if (!dbias_summed(p)) return 0;
  b->dbias_atomic = !deterministic;
  std::int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    const bool collapsed = b->dbias_accum_sizes[d] == 1 && full[d] > 1;
    b->dbias_accum_strides[d] = collapsed ? 0 : stride;
    stride *= b->dbias_accum_sizes[d];
  }
  return stride;
}

}  // namespace

bool dbias_sums_over(const detail::Problem& p, int d) {
  const std::int64_t full[4] = {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k};
  return p.bias_broadcast[d] && full[d] > 1;
}

bool dbias_summed(const detail::Problem& p) {
  for (int d = 0; d < 4; ++d)
    if (dbias_sums_over(p, d)) return true;
  return false;
}

GradientStore gradient_store(const BackwardKernel& k) {
  if (k.atomics) return GradientStore::dq_accum;
  if (k.accumulator == Accumulator::global)
    return k.math == Math::mma ? GradientStore::cta_slots : GradientStore::grad_accums;
  return GradientStore::tensors;
}

std::size_t plan_forward_workspace(const ForwardKernel& k, const detail::Problem& p, FwdParams* f) {
  if (f->num_splits > 1) {
    f->partial_batch = p.varlen ? 1 : p.batch;
    f->partial_rows = p.varlen ? f->packed_q : p.seqlen_q;
    const std::size_t rows = std::size_t(f->num_splits) * std::size_t(f->partial_batch) * std::size_t(p.heads_q) *
                             std::size_t(f->partial_rows);
    return partial_lse_offset(*f) + rows * sizeof(float);
  }
  if (k.tma) return sizeof(*f->items_drawn);
  if (k.accumulator != Accumulator::global) return 0;
  f->o_accum_slot_elems = std::int64_t(k.block_m) * accum_ld(p.head_dim_v);
  return std::size_t(f->grid_ctas) * std::size_t(f->o_accum_slot_elems) * sizeof(float);
}

std::size_t partial_lse_offset(const FwdParams& f) {
  constexpr std::size_t kAlign = 256;
  const std::size_t out = std::size_t(f.num_splits) * std::size_t(f.partial_batch) * std::size_t(f.heads_q) *
                          std::size_t(f.partial_rows) * std::size_t(f.head_dim_v) * sizeof(float);
  return (out + kAlign - 1) / kAlign * kAlign;
}

void bind_forward_workspace(const ForwardKernel& k, void* base, FwdParams* f) {
  if (k.tma) {
    f->items_drawn = static_cast<unsigned long long*>(base);
  } else if (f->num_splits > 1) {
    f->partial_out = static_cast<float*>(base);
    f->partial_lse = reinterpret_cast<float*>(static_cast<char*>(base) + partial_lse_offset(*f));
  } else {
    f->o_accum = static_cast<float*>(base);
  }
}

void plan_backward_workspace(const BackwardKernel& k, const BackwardArgs& a, const detail::Problem& p, BwdParams* b,
                             BackwardWorkspace* w) {
  // Delta, then (when needed) the dbias accumulator and the gradient accumulators, each 256-byte
  // aligned.
  constexpr std::size_t kAlign = 256;
  std::size_t bytes = 0;
  const auto reserve = [&](std::size_t n) {
    const std::size_t at = (bytes + kAlign - 1) / kAlign * kAlign;
    bytes = at + n;
    return at;
  };
  reserve(std::size_t(a.q.sizes[0]) * std::size_t(p.heads_q) * std::size_t(a.q.sizes[1]) * sizeof(float));
  const std::int64_t dbias_accum = p.has_dbias ? plan_dbias_accum(p, a.deterministic, b) : 0;
  b->dbias_tile = k.bias_tile && p.has_dbias && dbias_accum == 0;  // then tileable (select.cpp's fits)
  b->dbias_zero = p.has_dbias && dbias_accum == 0 && (p.is_masked() || p.varlen);
  b->dbias_dense_bytes = b->dbias_zero ? dense_bytes(a.dbias) : 0;
  w->dbias_accum = dbias_accum > 0 ? reserve(std::size_t(dbias_accum) * sizeof(float)) : 0;
  const auto grad_accum = [&](GradAccum* g, const TensorRef& t, std::int64_t cols, std::size_t* offset) {
    g->batch = t.sizes[0], g->rows = t.sizes[1], g->heads = t.sizes[2];
    g->ld = accum_ld(cols);
    *offset = reserve(std::size_t(g->batch * g->rows * g->heads * g->ld) * sizeof(float));
  };
  switch (gradient_store(k)) {
    case GradientStore::dq_accum: {
      // A one-pass row adds a step's dQ tile to the workspace as one block (on sm_90 one bulk
      // reduction) only where the workspace's rows are the tile's width, else element by element
      // with atomics: its rows are padded to the bucket (D = 129..192 on a D = 256 row, as on the
      // sm80 family, which has no D = 192 one-pass row). The rows of a head-dim cluster split (the
      // one-pass rows without a tail split) add their column share element by element either way.
      const std::int64_t dq_cols = k.tail_split ? std::max<std::int64_t>(p.head_dim, k.max_head_dim) : p.head_dim;
      grad_accum(&b->dq_accum, a.q, dq_cols, &w->grad_accum[0]);
      if (b->kv_split_parts > 1) {  // per split tile: its count, and a slot of dK and dV per part but the last
        const std::size_t tiles = std::size_t(b->num_kv_blocks - b->kv_split_first);
        const std::size_t slot = 2 * std::size_t(k.block_n) * std::size_t(k.max_head_dim);
        w->split[0] = reserve(tiles * sizeof(int));
        w->split[1] = reserve(tiles * std::size_t(b->kv_split_parts - 1) * slot * sizeof(float));
      }
      if (k.tma) {
        // The counter, then (deterministic) the dQ order counts right after it: one memset.
        std::size_t n = sizeof(unsigned long long);
        if (a.deterministic) {
          b->dq_order_tiles = (p.seqlen_q + k.block_m - 1) / k.block_m;
          n += std::size_t(p.batch) * std::size_t(p.heads_q) * std::size_t(b->dq_order_tiles) * sizeof(int);
        }
        w->items_drawn = reserve(n);
      }
      break;
    }
    case GradientStore::cta_slots: {
      // One slot per resident CTA (the schedule's grid CTAs): dK and dV chunks of a key tile, dQ
      // chunks of a query tile.
      const auto chunks = [](std::int64_t d) { return (d + kGlobalChunk - 1) / kGlobalChunk; };
      b->dkdv_slot_elems = std::int64_t(k.block_n) * kGlobalChunk * (chunks(p.head_dim) + chunks(p.head_dim_v));
      b->dq_slot_elems = std::int64_t(k.block_m) * kGlobalChunk * chunks(p.head_dim);
      w->slots[0] = reserve(std::size_t(b->kv_grid_ctas * b->dkdv_slot_elems) * sizeof(float));
      w->slots[1] = reserve(std::size_t(b->grid_ctas * b->dq_slot_elems) * sizeof(float));
      break;
    }
    case GradientStore::grad_accums:
      grad_accum(&b->dq_accum, a.q, p.head_dim, &w->grad_accum[0]);
      grad_accum(&b->dk_accum, a.k, p.head_dim, &w->grad_accum[1]);
      grad_accum(&b->dv_accum, a.v, p.head_dim_v, &w->grad_accum[2]);
      break;
    case GradientStore::tensors: break;
  }
  w->bytes = bytes;
}

void bind_backward_workspace(const BackwardKernel& k, const BackwardWorkspace& w, void* base_ptr, BwdParams* b) {
  char* base = static_cast<char*>(base_ptr);
  const auto at = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };
  b->delta = at(0);
  if (w.dbias_accum) b->dbias_accum = at(w.dbias_accum);
  switch (gradient_store(k)) {
    case GradientStore::dq_accum:
      b->dq_accum.data = at(w.grad_accum[0]);
      if (b->kv_split_parts > 1) {
        b->kv_split_arrivals = reinterpret_cast<int*>(base + w.split[0]);
        b->kv_split_sums = at(w.split[1]);
      }
      if (w.items_drawn) {
        b->kv_items_drawn = reinterpret_cast<unsigned long long*>(base + w.items_drawn);
        if (b->dq_order_tiles > 0) b->dq_order = reinterpret_cast<int*>(b->kv_items_drawn + 1);
      }
      break;
    case GradientStore::cta_slots:
      b->dkdv_slots = at(w.slots[0]);
      b->dq_slots = at(w.slots[1]);
      break;
    case GradientStore::grad_accums:
      b->dq_accum.data = at(w.grad_accum[0]);
      b->dk_accum.data = at(w.grad_accum[1]);
      b->dv_accum.data = at(w.grad_accum[2]);
      break;
    case GradientStore::tensors: break;
  }
}

Scratch::Scratch(const Options& opt, std::size_t bytes, cudaStream_t stream) : stream_(stream) {
  ptr_ = opt.workspace;
  if (bytes == 0 || ptr_ != nullptr) return;
  if (opt.allocate_workspace) {
    ptr_ = opt.allocate_workspace(bytes);
    if (ptr_ == nullptr) {
      error_ = "the caller's allocator returned null for " + std::to_string(bytes) + " bytes";
      out_of_memory_ = true;
    }
    else if (reinterpret_cast<std::uintptr_t>(ptr_) % 16 != 0)
      error_ = "the caller's allocator returned memory that is not 16-byte aligned";
    return;
  }
  const cudaError_t e = cudaMallocAsync(&ptr_, bytes, stream);
  owned_ = e == cudaSuccess;
  if (owned_) return;
  cudaGetLastError();  // an allocation failure is not sticky; clear it for the caller's next call
  out_of_memory_ = e == cudaErrorMemoryAllocation;
  error_ = std::string(cudaGetErrorString(e)) + " (" + std::to_string(bytes) + " bytes needed";
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
    error_ += ", " + std::to_string(free_bytes) + " of " + std::to_string(total) + " bytes free on the device";
  error_ += ")";
}

Scratch::~Scratch() {
  if (owned_) cudaFreeAsync(ptr_, stream_);
}

Status Scratch::status() const {
  if (error_.empty()) return Status::Ok();
  return {out_of_memory_ ? StatusCode::out_of_memory : StatusCode::device_error, "workspace: " + error_};
}

}  // namespace memattn::cuda
