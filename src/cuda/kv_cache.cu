// The KV cache on CUDA (ForwardArgs::kv_cache): the forward's cache parameters, and the append:
// the rows of k_new and v_new copied to the slots of positions seqlens[b] onwards, before the
// forward reads the cache, or by the forward kernel itself (a few new keys: cache_params).
// Validation has read every index on the host, or the call is bounded (KvCache::max_seqlen_k) and
// the kernels clamp them; either way the kernels read them on the device (no host copy to upload).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/paged_kv.hpp"
#include "cuda/select.hpp"

namespace memattn::cuda {
namespace {

// The two copies (k_new into k, v_new into v): rows [B, M_new, Hk] of `width` 16-bit units each
// (fp32 is copied as pairs of them), each into the slot of its position, found as the forward's
// paged loads find it (PageLookup over the forward's cache fields).
struct AppendView {
  const std::uint16_t* from[2];  // k_new, v_new
  std::uint16_t* to[2];          // the cache tensors
  std::int64_t from_strides[2][3], to_strides[2][3];  // (batch, row, head), in 16-bit units
  std::int64_t width[2];                              // head dims, in 16-bit units
  std::int64_t batch, rows, heads;
  // Each sequence's keys after the append, at most: a length the host did not read
  // (KvCache::max_seqlen_k) is clamped to it; validated lengths pass unchanged.
  std::int64_t max_keys;
  FwdParams cache;  // cache_seqlens, the block table or batch_idx, the page size, the page count
};

// blockIdx.y: 0 copies the keys, 1 the values (one launch for both).
__global__ void append_kernel(const __grid_constant__ AppendView v) {
  const int which = blockIdx.y;
  const std::int64_t width = v.width[which];
  const std::int64_t total = v.batch * v.rows * v.heads * width;
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const std::int64_t col = e % width, h = e / width % v.heads, m = e / (width * v.heads) % v.rows;
    const int b = int(e / (width * v.heads * v.rows));
    const std::int64_t held = v.cache.cache_seqlens[b];
    const int j = int((held < 0 ? 0 : (held > v.max_keys - v.rows ? v.max_keys - v.rows : held)) + m);
    std::int64_t page = 0;
    int slot = 0;
    PageLookup(v.cache, b).locate(j, &page, &slot);
    const std::int64_t* to = v.to_strides[which];
    const std::int64_t* from = v.from_strides[which];
    v.to[which][page * to[0] + slot * to[1] + h * to[2] + col] = v.from[which][b * from[0] + m * from[1] + h * from[2] + col];
  }
}

// The most new keys per sequence that the forward kernel writes into the cache itself
// (cache_append.hpp). Every CTA that attends to them copies them first, each query tile and each
// query head of a group again, so a chunk of many rows goes to the append kernel, which copies
// each once; a decode step (one row, or a few speculative ones) saves that kernel's launch.
constexpr std::int64_t kMaxNewKeysInForward = 16;

// Whether the forward kernel appends: a few new keys, every row it copies whole 16-byte vectors.
bool append_in_forward(const ForwardArgs& a, const detail::Problem& p) {
  const KvCache& c = a.kv_cache;
  const auto rows16 = [](const TensorRef& t) {
    return aligned16(t) && t.sizes[3] * std::int64_t(dtype_size(t.dtype)) % 16 == 0;
  };
  return p.cache.new_keys > 0 && p.cache.new_keys <= kMaxNewKeysInForward && rows16(c.k_new) && rows16(c.v_new) &&
         rows16(a.k) && rows16(a.v);
}

}  // namespace

// A contiguous cache's pages are its rows: batch_idx[b], or b.
void cache_params(const ForwardArgs& a, const detail::Problem& p, FwdParams* f) {
  if (!p.cache.enabled) return;
  const KvCache& c = a.kv_cache;
  f->cache_seqlens = c.seqlens.data;
  f->cache_new_keys = int(p.cache.new_keys);
  set_cache_page_size(p.cache.page_size, f);
  f->cache_num_pages = a.k.sizes[0];
  if (c.block_table.defined()) f->cache_pages = c.block_table.data, f->cache_pages_stride = c.block_table.row_stride;
  else if (c.batch_idx.defined()) f->cache_pages = c.batch_idx.data, f->cache_pages_stride = c.batch_idx.stride;
  if (append_in_forward(a, p)) {
    f->cache_k_new = c.k_new.data;
    f->cache_v_new = c.v_new.data;
    f->k_new_batch_stride = c.k_new.strides[0], f->k_new_row_stride = c.k_new.strides[1];
    f->k_new_head_stride = c.k_new.strides[2];
    f->v_new_batch_stride = c.v_new.strides[0], f->v_new_row_stride = c.v_new.strides[1];
    f->v_new_head_stride = c.v_new.strides[2];
  }
}

Status append_kv_cache(const ForwardArgs& args, const detail::Problem& p) {
  const KvCache& c = args.kv_cache;
  if (!p.cache.enabled || p.cache.new_keys == 0 || p.batch == 0 || p.heads_k == 0) return Status::Ok();
  AppendView v{};
  const TensorRef* from[2] = {&c.k_new, &c.v_new};
  const TensorRef* to[2] = {&args.k, &args.v};
  std::int64_t widest = 0;
  for (int w = 0; w < 2; ++w) {
    const std::int64_t units = std::int64_t(dtype_size(from[w]->dtype)) / 2;  // 16-bit units per element
    v.from[w] = static_cast<const std::uint16_t*>(from[w]->data);
    v.to[w] = static_cast<std::uint16_t*>(to[w]->data);
    for (int d = 0; d < 3; ++d) v.from_strides[w][d] = from[w]->strides[d] * units, v.to_strides[w][d] = to[w]->strides[d] * units;
    v.width[w] = from[w]->sizes[3] * units;
    widest = std::max(widest, v.width[w]);
  }
  v.batch = c.k_new.sizes[0], v.rows = c.k_new.sizes[1], v.heads = c.k_new.sizes[2];
  v.max_keys = p.seqlen_k;
  cache_params(args, p, &v.cache);
  constexpr int kThreads = 256;
  const std::int64_t total = v.batch * v.rows * v.heads * widest;
  const dim3 grid(unsigned(std::min<std::int64_t>((total + kThreads - 1) / kThreads, 65536)), 2);
  append_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(args.stream)>>>(v);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return {StatusCode::device_error, std::string("kv_cache append: ") + cudaGetErrorString(e)};
  return Status::Ok();
}

}  // namespace memattn::cuda
