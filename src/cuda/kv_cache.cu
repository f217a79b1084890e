// The KV cache on CUDA (ForwardArgs::kv_cache): the forward's cache parameters, and the append:
// the rows of k_new and v_new copied to the slots of positions seqlens[b] onwards, before the
// forward reads the cache. Validation has read every index on the host, or the call is bounded
// (KvCache::max_seqlen_k) and the kernels clamp them; either way the kernels read them on the
// device (no host copy to upload).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/paged_kv.hpp"

namespace memattn::cuda {
namespace {

// One of the two copies: rows [B, M_new, Hk] of `width` elements, each into its slot of the cache.
struct AppendView {
  const std::uint16_t* from;  // k_new or v_new (16-bit elements; fp32 is copied as pairs of them)
  std::uint16_t* to;          // the cache tensor
  std::int64_t from_strides[3], to_strides[3];  // (batch, row, head), in 16-bit units
  std::int64_t width;                           // head dim, in 16-bit units
  std::int64_t batch, rows, heads;
  const int* seqlens;
  const int* pages;  // page of a position block (block table or batch_idx); null: page b
  std::int64_t pages_stride, page_size;
  // Bounds for values the host did not read (KvCache::max_seqlen_k): each sequence's keys after the
  // append, and the cache's pages. Validated values pass unchanged.
  std::int64_t max_keys, num_pages;
};

__global__ void append_kernel(AppendView v) {
  const std::int64_t total = v.batch * v.rows * v.heads * v.width;
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const std::int64_t col = e % v.width, h = e / v.width % v.heads, m = e / (v.width * v.heads) % v.rows;
    const std::int64_t b = e / (v.width * v.heads * v.rows);
    const std::int64_t held = v.seqlens[b];
    const std::int64_t j = (held < 0 ? 0 : (held > v.max_keys - v.rows ? v.max_keys - v.rows : held)) + m;
    const std::int64_t listed = v.pages != nullptr ? v.pages[b * v.pages_stride + j / v.page_size] : b;
    const std::int64_t page = listed < 0 ? 0 : (listed >= v.num_pages ? v.num_pages - 1 : listed);
    v.to[page * v.to_strides[0] + (j % v.page_size) * v.to_strides[1] + h * v.to_strides[2] + col] =
        v.from[b * v.from_strides[0] + m * v.from_strides[1] + h * v.from_strides[2] + col];
  }
}

Status launch(const TensorRef& from, const TensorRef& to, const KvCache& c, const detail::Problem& p,
              cudaStream_t stream) {
  const std::int64_t units = std::int64_t(dtype_size(from.dtype)) / 2;  // 16-bit units per element
  AppendView v{};
  v.from = static_cast<const std::uint16_t*>(from.data);
  v.to = static_cast<std::uint16_t*>(to.data);
  for (int d = 0; d < 3; ++d) v.from_strides[d] = from.strides[d] * units, v.to_strides[d] = to.strides[d] * units;
  v.width = from.sizes[3] * units;
  v.batch = from.sizes[0], v.rows = from.sizes[1], v.heads = from.sizes[2];
  v.seqlens = c.seqlens.data;
  v.page_size = p.cache.page_size;
  v.max_keys = p.seqlen_k;
  v.num_pages = to.sizes[0];
  if (c.block_table.defined()) v.pages = c.block_table.data, v.pages_stride = c.block_table.row_stride;
  else if (c.batch_idx.defined()) v.pages = c.batch_idx.data, v.pages_stride = c.batch_idx.stride;
  constexpr int kThreads = 256;
  const std::int64_t total = v.batch * v.rows * v.heads * v.width;
  const unsigned blocks = unsigned(std::min<std::int64_t>((total + kThreads - 1) / kThreads, 65536));
  append_kernel<<<blocks, kThreads, 0, stream>>>(v);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return {StatusCode::device_error, std::string("kv_cache append: ") + cudaGetErrorString(e)};
  return Status::Ok();
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
}

Status append_kv_cache(const ForwardArgs& args, const detail::Problem& p) {
  const KvCache& c = args.kv_cache;
  if (!p.cache.enabled || p.cache.new_keys == 0 || p.batch == 0 || p.heads_k == 0) return Status::Ok();
  const auto stream = static_cast<cudaStream_t>(args.stream);
  if (Status s = launch(c.k_new, args.k, c, p, stream); !s.ok()) return s;
  return launch(c.v_new, args.v, c, p, stream);
}

}  // namespace memattn::cuda
